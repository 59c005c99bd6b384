# The paper's Muon recipe, every GPT-2 size, as the official AGI-Arena/MARS config/train_gpt2_*_muon.py.
# cells.py's gpt2_<size>_muon builds on it and sets the learning rates.

# schedule: the paper-era official train_muon.py (before commit 0052466), which produced the
# paper's Muon numbers: linear warmup from 0, constant, then linear decay to 0 over the last 2000
# steps (its `schedule` and min_lr were ignored). Since commit 0052466 (2025-08-31) the official
# code decays each group by cosine to the same absolute min_lr instead:
#   --lr_schedule=cosine --min_lr_groups=absolute --min_lr=3e-5
lr_schedule = "wsd"
wsd_decay_frac = 0.02
min_lr = 0.0

# optimizer: Muon on the 2-D parameters (embeddings included, as the paper), on the rest the
# official repository's own AdamW (optimizers/adamw.py), as its train_muon.py.
optimizer = "muon"
weight_decay = 0.0
weight_decay_1d = 0.1
muon_adamw = "official"
