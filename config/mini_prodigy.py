# Prodigy for the CPU mini reproduction (after config/mini.py): Semenov et al.'s 124M settings (learning rate 1,
# the multiplier of its own step-size estimate; betas 0.9/0.999 with bias correction, decoupled weight decay 0.1)
# and AdamW's decay groups; the learning rate from the mini sweep (scripts/mini_sweep.sh: a quarter of its own
# estimate, with half of it 0.005 behind); d's multiplier tuned by scripts/tune_mini.sh (results/tune/tuning.md;
# before, the authors' 1).
include = ["paper_prodigy.py"]  # then the mini's own values
learning_rate = 0.25
prodigy_d_coef = 2.0
