# Muon for the CPU mini reproduction (after config/mini.py): the paper's split (Muon on every 2-D
# parameter, embeddings included; on the rest the official repository's AdamW with betas 0.9/0.95, lr_1d
# fixed at 3e-3) and its paper-era schedule (constant, then linear to 0 over the last 2% of the run); the
# learning rate, weight decay, warmup and momentum tuned by scripts/tune_mini.sh
# (results/tune/tuning.md; before tuning, 4e-2, 0, config/mini.py's 25 steps and 0.95).
include = ["paper_muon.py"]  # then the mini's own values
learning_rate = 5.657e-2
weight_decay = 1e-3
warmup_iters = 0
muon_momentum = 0.85
lr_1d = 3e-3
