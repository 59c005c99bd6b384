# MARS-AdamW for the CPU mini reproduction (after config/mini.py): the paper's betas, gamma and weight
# decays (AdamW with betas 0.9/0.95 on the 1-D parameters: the schema's defaults), the learning rate
# from scripts/mini_sweep.sh (lr_1d fixed at 3e-3): the point scripts/tune_mini.sh starts both variants from.
# The tuned recipes: config/mini_mars_approx.py or config/mini_mars_exact.py after this file.
optimizer = "mars"
mars_type = "mars-adamw"
is_approx = True
gamma = 0.025
learning_rate = 3e-3
weight_decay = 1e-2
beta1 = 0.95
beta2 = 0.99
lr_1d = 3e-3
weight_decay_1d = 0.1
decay_embeddings = False  # the official decay groups
