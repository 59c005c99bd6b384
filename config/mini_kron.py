# Kron (levanter's PSGD Kron) for the CPU mini reproduction (after config/mini.py): Wen et al.'s tuned 130M values
# (beta1 0.95, preconditioner lr 0.2, the update probability held at 1 for 2000 steps (all of a mini run), weight
# decay 0.7 on the blocks' matrices) with levanter's layout (256-blocks, diagonal past 25000); its learning rate
# the benchmark's 2e-3, not yet swept; the loss's mean gradient, clipped at 1 as levanter's.
optimizer = "kron"
learning_rate = 2e-3
beta1 = 0.95
kron_precond_lr = 0.2
kron_update_prob_min = 0.05
kron_update_prob_flat_start = 2000
weight_decay = 0.7
grad_multiplier = 1.0
