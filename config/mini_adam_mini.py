# Adam-mini for the CPU mini reproduction (after config/mini.py): AdamW's mini settings (betas 0.9/0.95, weight
# decay 0.1) with the package's blocks and decay groups (the embeddings decay, as its authors' GPT-2); the
# learning rate from the mini sweep (scripts/mini_sweep.sh; AdamW's before it was swept: 2e-3); the warmup and
# beta2 tuned by scripts/tune_mini.sh (results/tune/tuning.md; before, config/mini.py's 25 steps and 0.95).
optimizer = "adam-mini"
learning_rate = 4e-3
weight_decay = 0.1
warmup_iters = 150
beta1 = 0.9
beta2 = 0.98
