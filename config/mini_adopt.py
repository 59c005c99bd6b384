# ADOPT for the CPU mini reproduction (after config/mini.py): Semenov et al.'s 124M settings (betas 0.9/0.999,
# eps 1e-6) and AdamW's decay groups; the learning rate from the mini sweep (scripts/mini_sweep.sh), the weight
# decay and warmup tuned by scripts/tune_mini.sh (results/tune/tuning.md; before, 0.1 and config/mini.py's 25).
include = ["paper_adopt.py"]  # then the mini's own values
learning_rate = 2e-3
weight_decay = 0.3
warmup_iters = 50
