# NorMuon for the CPU mini reproduction (after config/mini.py): Muon's mini split (the blocks' matrices on
# NorMuon; the embeddings and the 1-D parameters on AdamW with betas 0.9/0.95 at lr_1d 3e-3) and schedule
# (constant, then linear to 0 over the last 2%), the authors' momentum and beta2 0.95. The learning rate is
# the mini sweep's best (results/mini_2026/sweep.md: seed 1 at each rate of config/cells.py's grid).
include = ["paper_normuon.py"]  # then the mini's own values
learning_rate = 2e-2
weight_decay = 1e-3
weight_decay_1d = 0.1
wsd_decay_frac = 0.02
# the mini's setting where the paper's recipe differs (config/mini.py's, or the default)
beta1_1d = 0.9
eps = 1e-08
