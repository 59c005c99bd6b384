# Muon for the CPU mini reproduction (after config/mini.py): the paper's split (Muon on every 2-D
# parameter, embeddings included; AdamW with betas 0.9/0.95 on the rest: the schema's defaults), the
# learning rates from scripts/mini_sweep.sh (lr_1d kept at the paper's 0.15 x learning_rate).
optimizer = "muon"
learning_rate = 2e-2
weight_decay = 0.0
lr_1d = 3e-3
weight_decay_1d = 0.1
