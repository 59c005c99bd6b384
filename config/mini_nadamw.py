# NAdamW for the CPU mini reproduction (after config/mini.py): AlgoPerf's NAdamW (constant momentum) with
# AdamW's betas and weight decay, the learning rate from the sweep.
optimizer = "nadamw"
learning_rate = 4e-3
weight_decay = 0.1
beta1 = 0.9
beta2 = 0.95
decay_embeddings = False  # the official decay groups
