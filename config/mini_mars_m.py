# MARS-M for the CPU mini reproduction (after config/mini.py): the official recipe's momentum (beta1 0.95)
# and gamma, the learning rate from the mini sweep; the weight decay and warmup tuned by scripts/tune_mini.sh
# (results/tune/tuning.md; before tuning, 1e-2 and config/mini.py's 25 steps).
include = ["paper_mars_m.py"]  # then the mini's own values
learning_rate = 2.4e-2
weight_decay = 3e-2
warmup_iters = 6
