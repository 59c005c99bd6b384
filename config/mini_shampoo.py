# Distributed Shampoo for the CPU mini reproduction (after config/mini.py): modded-nanogpt's optimization-track
# recipe (config/paper_shampoo.py: Shampoo on the blocks' matrices, betas 0.9/0.95, weight decay 0.2, Adam grafting
# with beta2 0.95 and eps 1e-10; AdamW on the embeddings at 1/320 and the 1-D parameters at 0.01), its root inverses
# every 5 steps, on config/mini.py's schedule and gradients. The learning rate is the mini sweep's best
# (results/mini_2026/sweep.md), 8x the run's 1.5e-3.
include = ["paper_shampoo.py"]  # then the mini's own values
learning_rate = 1.2e-2
# the mini's setting where the paper's recipe differs (config/mini.py's, or the default)
grad_clip = 1.0
grad_multiplier = 4.0
lr_schedule = "cosine"
max_preconditioner_dim = 1024
warmup_iters = 25
wsd_decay_frac = 0.2
