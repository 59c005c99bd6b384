# Prodigy for the CPU mini reproduction (after config/mini.py): Semenov et al.'s 124M settings (learning rate 1,
# the multiplier of its own step-size estimate; betas 0.9/0.999 with bias correction, decoupled weight decay 0.1)
# and AdamW's decay groups.
optimizer = "prodigy"
learning_rate = 1.0
weight_decay = 0.1
beta1 = 0.9
beta2 = 0.999
prodigy_bias_correction = True
decay_embeddings = False  # the official decay groups
