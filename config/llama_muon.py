# Semenov et al.'s tuned Muon for their Llama (scripts/124m/muon.sh: Keller Jordan's Muon, lr 1e-2 on the blocks'
# matrices, scaled by max(1, rows/cols)^0.5, momentum 0.95 with Nesterov, no weight decay there; the embedding, the
# tied head and the 1-D parameters on AdamW at lr 1e-3, betas 0.8/0.999, wd 0.1), unchanged at 210M and 720M
# (config/cells.py). Their D-Muon (decoupled weight decay, AdamW-matched update size) is our Moonlight:
# docs/optimizers.md.
optimizer = "muon"
learning_rate = 1e-2
min_lr = 1e-4
weight_decay = 0.0
muon_momentum = 0.95
muon_nesterov = True
muon_embeddings_on_adamw = True
lr_1d = 1e-3
beta1_1d = 0.8
beta2_1d = 0.999
weight_decay_1d = 0.1
muon_adamw = "keller"  # the AdamW inside their Muon class: eps on the uncorrected sqrt(v), decay scaled by lr
