# Signum for the CPU mini reproduction (after config/mini.py): Semenov et al.'s 124M settings (momentum 0.9,
# no Nesterov, decoupled weight decay 0.1); the learning rate from the mini sweep (scripts/mini_sweep.sh), the weight
# decay tuned by scripts/tune_mini.sh (results/tune/tuning.md; before, 0.1).
include = ["paper_signum.py"]  # then the mini's own values
learning_rate = 4e-4
weight_decay = 0.03
