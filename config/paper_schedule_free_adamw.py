# Schedule-Free AdamW (Defazio et al., 2024) at the paper's GPT-2 scale: no schedule (a constant lr
# after its own warmup over the paper's 2000 steps), AdamW's betas 0.9/0.95 and weight decay 0.1.
# cells.py's gpt2_<size>_schedule_free_adamw builds on it and sets the learning rate.
optimizer = "schedule-free-adamw"
lr_schedule = "constant"
warmup_iters = 0
sf_warmup_steps = 2000
beta1 = 0.9
beta2 = 0.95
weight_decay = 0.1
decay_embeddings = False  # the official runs' decay groups
