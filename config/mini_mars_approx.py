# MARS-approx for the CPU mini reproduction (after config/mini.py and config/mini_mars.py): the learning rate
# and warmup tuned by scripts/tune_mini.sh (results/tune/tuning.md; before tuning, 3e-3 and 25 steps).
optimizer = "mars"
is_approx = True
learning_rate = 6e-3
warmup_iters = 150
