# Cautious AdamW for the CPU mini reproduction (after config/mini.py): AdamW's recipe (beta1 0.9, its decay groups)
# with C-Optim's eps 1e-6; the learning rate, weight decay, warmup and beta2 tuned by scripts/tune_mini.sh
# (results/tune/tuning.md; before tuning, 2e-3, 0.1, config/mini.py's 25 steps and 0.95, from scripts/mini_sweep.sh).
include = ["paper_cautious_adamw.py"]  # then the mini's own values
learning_rate = 5.657e-3
weight_decay = 0.3
warmup_iters = 150
beta2 = 0.995
