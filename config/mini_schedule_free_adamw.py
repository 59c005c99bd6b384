# Schedule-Free AdamW for the CPU mini reproduction (after config/mini.py): no schedule (constant lr, its own
# warmup), AdamW's betas; the learning rate, weight decay and warmup tuned by scripts/tune_mini.sh
# (results/tune/tuning.md; before, the sweep's 4e-3, AdamW's 0.1 and mini.py's 25 steps).
include = ["paper_schedule_free_adamw.py"]  # then the mini's own values
sf_warmup_steps = 200
learning_rate = 1.131e-2
weight_decay = 3e-3
