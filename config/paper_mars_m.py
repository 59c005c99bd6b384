# The MARS-M recipe (arXiv 2510.21800), every GPT-2 size, as the official AGI-Arena/MARS
# MARS_M/config/train_gpt2_*_mars_m.py. cells.py's gpt2_<size>_mars_m builds on it and sets the
# learning rate (and the schedule's floor).

# optimizer: the matrix rule on the 2-D parameters except the embeddings and the tied head, which
# take AdamW (betas 0.9/0.95, eps before the bias corrections) with the 1-D ones, all decayed with
# weight_decay, as the official script. momentum = beta1 (the official scripts pass it so).
optimizer = "mars-m"
is_approx = True  # the official runs: MARS-M-approx (exact: --is_approx=False)
gamma = 0.025
# weight_decay 1e-2: the official MARS_M/config files (what the official scripts ran); the official
# README's table says 1e-1, which is Moonlight's setting.
weight_decay = 1e-2
beta1 = 0.95
