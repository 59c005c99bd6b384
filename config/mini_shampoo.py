# Distributed Shampoo for the CPU mini reproduction (after config/mini.py): modded-nanogpt's optimization-track
# recipe (config/paper_shampoo.py: Shampoo on the blocks' matrices, betas 0.9/0.95, weight decay 0.2, Adam grafting
# with beta2 0.95 and eps 1e-10; AdamW on the embeddings at 1/320 and the 1-D parameters at 0.01), its root inverses
# every 5 steps, on config/mini.py's schedule and gradients. The learning rate is the mini sweep's best
# (results/mini_2026/sweep.md), 8x the run's 1.5e-3.
optimizer = "shampoo"
learning_rate = 1.2e-2
beta1 = 0.9
beta2 = 0.95
weight_decay = 0.2
precondition_frequency = 5
grafting = "adam"
grafting_beta2 = 0.95
grafting_eps = 1e-10
shampoo_routing = "blocks"
lr_embeddings = 1 / 320
lr_1d = 0.01
beta1_1d = 0.8
beta2_1d = 0.95
eps_1d = 1e-10
weight_decay_1d = 0.0
