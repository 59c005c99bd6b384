# Sophia (SophiaG) for the CPU mini reproduction (after config/mini.py): Semenov et al.'s 124M settings (betas
# 0.9/0.999, rho 0.04, weight decay 0.1, a Hessian estimate every 10 steps) and AdamW's decay groups; the
# estimate stands for the run's own tokens per step, as in its authors' loop; the learning rate from the mini
# sweep (scripts/mini_sweep.sh; the benchmark's 1e-3 before it).
optimizer = "sophia"
learning_rate = 5e-4
weight_decay = 0.1
beta1 = 0.9
beta2 = 0.999
sophia_rho = 0.04
sophia_hessian_interval = 10
decay_embeddings = False  # the official decay groups
grad_multiplier = 1.0  # the authors' loop takes the batch's mean gradient (h goes as its square)
