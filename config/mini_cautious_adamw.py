# Cautious AdamW for the CPU mini reproduction (after config/mini.py): AdamW's recipe (betas 0.9/0.95, weight
# decay 0.1, its decay groups) with C-Optim's eps 1e-6; the learning rate from the mini sweep (scripts/mini_sweep.sh).
optimizer = "cautious-adamw"
learning_rate = 2e-3
weight_decay = 0.1
beta1 = 0.9
beta2 = 0.95
decay_embeddings = False  # the official decay groups
