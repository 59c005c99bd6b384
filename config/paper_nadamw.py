# NAdamW (torch's NAdam, decoupled weight decay) at the paper's GPT-2 scale: AdamW's recipe
# (betas 0.9/0.95, weight decay 0.1 on the nn.Linear weights) with Nesterov momentum.
# cells.py's gpt2_<size>_nadamw builds on it and sets the learning rate.
optimizer = "nadamw"
beta1 = 0.9
beta2 = 0.95
weight_decay = 0.1
decay_embeddings = False  # the official runs' decay groups
