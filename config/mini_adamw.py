# AdamW for the CPU mini reproduction (after config/mini.py): the paper's betas and weight decay; the
# learning rate and warmup tuned by scripts/tune_mini.sh (results/tune/tuning.md; before tuning,
# 2e-3 and config/mini.py's 25 steps, from scripts/mini_sweep.sh).
include = ["paper_adamw.py"]  # then the mini's own values
learning_rate = 5.657e-3
warmup_iters = 150
weight_decay = 0.1
beta1 = 0.9
beta2 = 0.95
