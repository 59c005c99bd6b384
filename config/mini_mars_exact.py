# MARS-exact for the CPU mini reproduction (after config/mini.py and config/mini_mars.py): the learning rate
# and warmup tuned by scripts/tune_mini.sh (scripts/tune_results/tuning.md; before tuning, MARS-approx's
# 3e-3 and 25 steps).
optimizer = "mars"
is_approx = False
learning_rate = 8.485e-3
warmup_iters = 200
