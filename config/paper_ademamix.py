# AdEMAMix (Pagliardini et al., 2024) at the paper's GPT-2 scale: the authors' recommendation for
# language models (betas 0.9/0.999/0.9999, alpha 8, alpha and beta3 warmed up over the whole run,
# weight decay 0.1). config/cells.py's gpt2_<size>_ademamix builds on it and sets the learning rate.
optimizer = "ademamix"
beta1 = 0.9
beta2 = 0.999
beta3 = 0.9999
alpha = 8.0
alpha_warmup = -1
beta3_warmup = -1
weight_decay = 0.1
decay_embeddings = False  # the official runs' decay groups
