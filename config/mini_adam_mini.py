# Adam-mini for the CPU mini reproduction (after config/mini.py): AdamW's mini settings (betas 0.9/0.95, weight
# decay 0.1) with the package's blocks and decay groups (the embeddings decay, as its authors' GPT-2); the
# learning rate from the mini sweep (scripts/mini_sweep.sh; AdamW's before it was swept: 2e-3); the warmup and
# beta2 tuned by scripts/tune_mini.sh (results/tune/tuning.md; before, config/mini.py's 25 steps and 0.95).
include = ["paper_adam_mini.py"]  # then the mini's own values
learning_rate = 4e-3
warmup_iters = 150
# the mini's setting where the paper's recipe differs (config/mini.py's, or the default)
eps = 1e-08
