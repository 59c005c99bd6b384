# SOAP for the CPU mini reproduction (after config/mini.py): the authors' betas 0.95/0.95, weight decay
# 0.01 and preconditioner refresh every 10 steps; the learning rate from the sweep.
optimizer = "soap"
learning_rate = 2.4e-2
weight_decay = 0.01
beta1 = 0.95
beta2 = 0.95
precondition_frequency = 10
decay_embeddings = False  # the official decay groups
