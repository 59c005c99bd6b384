# Lion for the CPU mini reproduction (after config/mini.py): the authors' betas 0.9/0.99, weight decay
# 10x AdamW's (their advice: 3-10x, with a learning rate 3-10x lower); the learning rate and warmup tuned by
# scripts/tune_mini.sh (results/tune/tuning.md; before, the sweep's 4e-4 and config/mini.py's 25 steps).
include = ["paper_lion.py"]  # then the mini's own values
learning_rate = 5.657e-4
warmup_iters = 0
