# MARS-M for the CPU mini reproduction (after config/mini.py): the official recipe's momentum
# (beta1 0.95) and weight decay, the learning rate from the mini sweep.
optimizer = "mars-m"
is_approx = True
gamma = 0.025
learning_rate = 2.4e-2
weight_decay = 1e-2
beta1 = 0.95
