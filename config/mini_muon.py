# Muon for the CPU mini reproduction (after config/mini.py): the paper's split (Muon on every 2-D
# parameter, embeddings included; on the rest the official repository's AdamW with betas 0.9/0.95),
# its paper-era schedule (constant, then linear to 0 over the last 2% of the run), the learning rate
# from scripts/mini_sweep.sh (lr_1d fixed at 3e-3).
optimizer = "muon"
learning_rate = 4e-2
weight_decay = 0.0
lr_1d = 3e-3
weight_decay_1d = 0.1
muon_adamw = "official"
lr_schedule = "wsd"
wsd_decay_frac = 0.02
