# Scion for the CPU mini reproduction (after config/mini.py): its authors' GPT settings (LIONS-EPFL/scion,
# examples/shallow-nanogpt: momentum 0.1, radii 1 for the first layer, 3 for the blocks, 10 for the output layer,
# constrained); the learning rate from the mini sweep (scripts/mini_sweep.sh; before it, 2^-10, between their
# nanoGPT's 2^-12 and their shallow GPT's sweep).
optimizer = "scion"
learning_rate = 8e-3
scion_momentum = 0.1
grad_multiplier = 1.0  # the lmo of each layer is scale-free; the clip reads the batch's mean gradient
