# AdEMAMix for the CPU mini reproduction (after config/mini.py): the authors' alpha 8 and betas, alpha
# and beta3 warmed up over the whole run, but beta3 0.999: the run is 256 steps, and 0.9999's half-life
# is 6,900 (the slow EMA would not move); the learning rate from the sweep.
optimizer = "ademamix"
learning_rate = 1e-3
weight_decay = 0.1
beta1 = 0.9
beta2 = 0.999
beta3 = 0.999
alpha = 8.0
decay_embeddings = False  # the official decay groups
