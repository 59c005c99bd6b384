# Kron at the paper's GPT-2 scale: Wen et al.'s tuned values for their 130M model at 1x Chinchilla (marin-community/
# marin at 122c501, experiments/optimizer_sweep/Analysis/PhaseI/tex/hyperparam_tables_kron.tex: beta1 0.95, blocks of
# 256, preconditioner lr 0.2 and init scale 1, the update probability 1 for 2000 steps then annealed to 0.05, weight
# decay 0.7, grad clip 1; their lr 2e-3 is for their batch of 128 x 4096) on levanter's layout.
optimizer = "kron"
beta1 = 0.95
kron_block_size = 256
kron_precond_lr = 0.2
kron_precond_init_scale = 1.0
kron_update_prob_min = 0.05
kron_update_prob_flat_start = 2000
weight_decay = 0.7
grad_clip = 1.0
grad_multiplier = 1.0
