# Dion2 (Ahn, Xu et al., arXiv 2512.16928) at the paper's GPT-2 scale: the authors' GPT recipe (microsoft/dion at
# 0a059a4, configs/dion2_160m.yaml with their train.py: lr 0.02, mu 0.95, weight decay 0.01 on the blocks'
# matrices, ortho_fraction 0.5, their Newton-Schulz (--use_polar_express off), AdamW on the embeddings and the head
# at the same rate, undecayed, with betas 0.9/0.95, as for Dion (config/paper_dion.py); no warmup, constant, then
# linear to 0 over the last 20% of the run; no gradient clipping). cells.py's gpt2_<size>_dion2 builds on it and
# sets the learning rate; its NorDion2 cell (their nordion2, muon_beta2 0.95) changes only the optimizer.
optimizer = "dion2"
weight_decay = 0.01
dion_momentum = 0.95
ortho_fraction = 0.5
ns_coefficients = "dion"
beta1_1d = 0.9
beta2_1d = 0.95
warmup_iters = 0
lr_schedule = "wsd"
wsd_decay_frac = 0.2
min_lr = 0.0
grad_clip = 0.0
grad_multiplier = 1.0
