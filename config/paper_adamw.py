# The paper's AdamW recipe (torch's fused AdamW), every GPT-2 size: the official AGI-Arena/MARS
# config/train_gpt2_*_adamw.py. cells.py's gpt2_<size>_adamw builds on it and sets the learning rate.
# Settings not assigned are the schema's defaults, which are the paper's: betas 0.9/0.95, weight
# decay 0.1, eps 1e-8, warmup 2000, grad_clip 1.0.
optimizer = "adamw"

# weight decay on the nn.Linear weights only (not the embeddings and the tied head), as the official runs
decay_embeddings = False
