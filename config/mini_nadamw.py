# NAdamW for the CPU mini reproduction (after config/mini.py): AlgoPerf's NAdamW (constant momentum) with
# AdamW's betas and weight decay; the learning rate and warmup tuned by scripts/tune_mini.sh
# (results/tune/tuning.md; before, the sweep's 4e-3 and config/mini.py's 25 steps).
optimizer = "nadamw"
learning_rate = 5.657e-3
weight_decay = 0.1
warmup_iters = 150
beta1 = 0.9
beta2 = 0.95
decay_embeddings = False  # the official decay groups
