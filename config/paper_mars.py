# The paper's MARS recipe: MARS-approx (MARS-AdamW), every GPT-2 size, as the official AGI-Arena/MARS
# config/train_gpt2_*_mars.py. cells.py's gpt2_<size>_mars builds on it and sets the learning rates.
# docs/reproducing.md's table of differences from the official runs lists what still differs and why.

# optimizer: MARS-AdamW, approximate form (one gradient per step); AdamW on the 1-D parameters
optimizer = "mars"
mars_type = "mars-adamw"
is_approx = True
gamma = 0.025
weight_decay = 1e-2
beta1 = 0.95
beta2 = 0.99
weight_decay_1d = 0.1

# weight decay on the nn.Linear weights only (not the embeddings and the tied head), as the official runs
decay_embeddings = False
