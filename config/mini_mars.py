# MARS-AdamW for the CPU mini reproduction (after config/mini.py): the paper's betas, gamma and weight
# decays (AdamW with betas 0.9/0.95 on the 1-D parameters: the schema's defaults), the learning rate
# from scripts/mini_sweep.sh (lr_1d fixed at 3e-3): the point scripts/tune_mini.sh starts both variants from.
# The tuned recipes: config/mini_mars_approx.py or config/mini_mars_exact.py after this file.
include = ["paper_mars.py"]  # then the mini's own values
learning_rate = 3e-3
lr_1d = 3e-3
