# Semenov et al.'s tuned MARS-AdamW (approx) for their Llama (scripts/124m/mars.sh: mars_lr 3e-3, betas 0.95/0.99,
# gamma 0.025, wd 0.1 on the matrices; the 1-D parameters on AdamW at lr 1e-3, betas 0.8/0.999, wd 0.1, as their
# MARS hard-codes weight_decay_1d), unchanged at 210M and 720M (config/cells.py).
optimizer = "mars"
mars_type = "mars-adamw"
is_approx = True
learning_rate = 3e-3
min_lr = 3e-5
weight_decay = 0.1
beta1 = 0.95
beta2 = 0.99
gamma = 0.025
lr_1d = 1e-3
beta1_1d = 0.8
beta2_1d = 0.999
weight_decay_1d = 0.1
decay_embeddings = False  # their groups: decay on the Linear weights only (not the tied embedding)
