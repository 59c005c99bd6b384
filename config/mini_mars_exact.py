# MARS-exact for the CPU mini reproduction (after config/mini.py and config/mini_mars.py): the learning rate,
# warmup and beta2 tuned by scripts/tune_mini.sh (results/tune/tuning.md; before tuning, MARS-approx's
# 3e-3, 25 steps and 0.99).
optimizer = "mars"
is_approx = False
learning_rate = 8.485e-3
warmup_iters = 150
beta2 = 0.995
