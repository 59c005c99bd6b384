# AdamW for the CPU mini reproduction (after config/mini.py): the paper's betas and weight decay,
# the learning rate from scripts/mini_sweep.sh.
optimizer = "adamw"
learning_rate = 2e-3
weight_decay = 0.1
beta1 = 0.9
beta2 = 0.95
decay_embeddings = False  # the official decay groups
