# AdEMAMix for the CPU mini reproduction (after config/mini.py): the authors' betas, alpha and beta3 warmed up
# over the whole run; beta3, alpha, the learning rate and warmup tuned by scripts/tune_mini.sh
# (results/tune/tuning.md; before, beta3 0.999 (the authors' 0.9999 has a half-life of 6,900 steps: the slow EMA
# would not move in 256), alpha 8, the sweep's 1e-3 and config/mini.py's 25 steps).
include = ["paper_ademamix.py"]  # then the mini's own values
learning_rate = 1.414e-3
warmup_iters = 100
beta3 = 0.99
alpha = 4.0
