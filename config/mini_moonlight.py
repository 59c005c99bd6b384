# Moonlight for the CPU mini reproduction (after config/mini.py): the official recipe's update scale
# (0.2 sqrt(max(m, n)), matched to AdamW's) and its decoupled weight decay; the learning rate, weight decay,
# warmup and momentum tuned by scripts/tune_mini.sh (results/tune/tuning.md; before tuning, 2.4e-2,
# 1e-1, config/mini.py's 25 steps and the official beta1 0.95).
include = ["paper_moonlight.py"]  # then the mini's own values
learning_rate = 3.394e-2
weight_decay = 1e-3
warmup_iters = 0
beta1 = 0.9
