# Dion (Ahn, Xu et al., 2025) at the paper's GPT-2 scale: the authors' GPT recipe (microsoft/dion at 0a059a4,
# configs/dion_160m.yaml with their train.py: lr 0.02, mu 0.95, weight decay 0.01 on the blocks' matrices, rank
# fraction 0.5, AdamW on the embeddings and the head at the same rate, undecayed, with betas 0.9/0.95: the ones their
# Dion reads, its own default, where train.py's betas=(0.95, 0.98) lands in a key it never reads; no warmup,
# constant, then linear to 0 over the last 20% of the run; no gradient clipping). Their bf16 momentum and Q
# (mixed_precision: true) are fp32 here. cells.py's gpt2_<size>_dion builds on it and sets the learning rate.
optimizer = "dion"
weight_decay = 0.01
dion_momentum = 0.95
rank_fraction = 0.5
beta1_1d = 0.9
beta2_1d = 0.95
warmup_iters = 0
lr_schedule = "wsd"
wsd_decay_frac = 0.2
min_lr = 0.0
grad_clip = 0.0
grad_multiplier = 1.0
