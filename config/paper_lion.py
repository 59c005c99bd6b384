# Lion (Chen et al., 2023) at the paper's GPT-2 scale, for comparison with its AdamW: the authors'
# betas 0.9/0.99; their advice for the rest, a learning rate 3-10x below AdamW's and a weight decay
# 3-10x above (untuned here). cells.py's gpt2_<size>_lion builds on it and sets the learning rate.
optimizer = "lion"
beta1 = 0.9
beta2 = 0.99
weight_decay = 1.0
decay_embeddings = False  # the official runs' decay groups
