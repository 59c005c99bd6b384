# NAdamW for the CPU mini reproduction (after config/mini.py): AlgoPerf's NAdamW (constant momentum) with
# AdamW's betas and weight decay; the learning rate and warmup tuned by scripts/tune_mini.sh
# (results/tune/tuning.md; before, the sweep's 4e-3 and config/mini.py's 25 steps).
include = ["paper_nadamw.py"]  # then the mini's own values
learning_rate = 5.657e-3
warmup_iters = 150
