# Cautious AdamW at the paper's GPT-2 scale: AdamW's recipe (betas 0.9/0.95, weight decay 0.1 on the Linear
# weights) with C-Optim's eps 1e-6; Wen et al.'s tuned 130M values are not transcribed yet.
optimizer = "cautious-adamw"
beta1 = 0.9
beta2 = 0.95
eps = 1e-6
weight_decay = 0.1
decay_embeddings = False
