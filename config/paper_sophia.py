# Sophia (SophiaG) at the paper's GPT-2 scale: its authors' GPT-2 small recipe (Liuhong99/Sophia at a7e1572,
# config/train_gpt2_small_sophiag.py: lr 6e-4, betas 0.965/0.99, rho 0.05, weight decay 0.2 on the Linear
# weights, a Hessian estimate every 10 steps standing for the step's tokens, its gradient clipped at 1 as the
# step's, the loss's mean gradient).
optimizer = "sophia"
learning_rate = 6e-4
beta1 = 0.965
beta2 = 0.99
sophia_rho = 0.05
weight_decay = 0.2
sophia_hessian_interval = 10
sophia_clip_hessian_gradient = True
decay_embeddings = False
grad_multiplier = 1.0
