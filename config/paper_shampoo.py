# Distributed Shampoo (facebookresearch/optimizers) at the paper's GPT-2 scale: modded-nanogpt's optimization-track
# Shampoo run (KellerJordan/modded-nanogpt records/track_3_optimization/results/20260513_shampoo_1_4_power, the
# script in its log): Shampoo on the blocks' matrices (betas 0.9/0.95, decoupled weight decay 0.2, blocks of up to
# 8192, root inverses, the package's -1/4 power, every 5 steps from step 5, Adam grafting with beta2 0.95 and eps
# 1e-10, epsilon the package's 1e-12), torch's AdamW on the rest (betas 0.8/0.95, eps 1e-10, no decay: 1-D lr 0.01;
# the run's untied head 1/320, which our tied embedding and head take, its unit-variance input embedding's 0.3 not
# applying to our 0.02-std table), the loss's mean gradient unclipped, and its schedule: constant, then linear to 0
# over the last 70% of the run, no warmup. cells.py's gpt2_<size>_shampoo builds on it and sets the learning rate.
optimizer = "shampoo"
beta1 = 0.9
beta2 = 0.95
weight_decay = 0.2
max_preconditioner_dim = 8192
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
grad_multiplier = 1.0
grad_clip = 0.0
lr_schedule = "wsd"
wsd_decay_frac = 0.7
warmup_iters = 0
min_lr = 0.0
