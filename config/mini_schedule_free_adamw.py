# Schedule-Free AdamW for the CPU mini reproduction (after config/mini.py): no schedule (constant lr;
# its own warmup over mini.py's 25 steps), AdamW's betas and weight decay, the learning rate from the sweep.
optimizer = "schedule-free-adamw"
lr_schedule = "constant"
warmup_iters = 0
sf_warmup_steps = 25
learning_rate = 4e-3
weight_decay = 0.1
beta1 = 0.9
beta2 = 0.95
decay_embeddings = False  # the official decay groups
