# Kron (levanter's PSGD Kron) for the CPU mini reproduction (after config/mini.py): Wen et al.'s tuned 130M values
# (beta1 0.95, preconditioner lr 0.2, the update probability held at 1 for 2000 steps (all of a mini run), weight
# decay 0.7 on the blocks' matrices) with levanter's layout (256-blocks, diagonal past 25000) but its matrices
# kept matrices: levanter's merge heuristic (target 8192) would fold every matrix of this model (96 x 96,
# 96 x 384, the 288 x 96 attention and the 264 x 96 embedding) into vectors, whose dense 256 x 256
# preconditioners learn from one outer product an update, about precond_lr / 256 a step (at 2e-3, 40 steps took
# the loss to 5.19 merged, 3.88 not); at GPT-2 and Llama widths (768 and up) it merges nothing. The learning
# rate, weight decay, beta1 and preconditioner lr tuned by scripts/tune_mini.sh (results/tune/tuning.md; before,
# the mini sweep's 8e-3 and Wen et al.'s 0.7, 0.95 and 0.2: the preconditioner's rate moved the loss most, 2.32 to
# 1.99 at 0.8 over a run of 256 steps). The loss's mean gradient, clipped at 1.
include = ["paper_kron.py"]  # then the mini's own values
learning_rate = 5.657e-3
beta1 = 0.85
kron_precond_lr = 0.8
kron_merge_small_dims = False
weight_decay = 0.3
