# Sophia (SophiaG) for the CPU mini reproduction (after config/mini.py): Semenov et al.'s 124M settings (betas
# 0.9/0.999, rho 0.04, weight decay 0.1, a Hessian estimate every 10 steps) and AdamW's decay groups; the
# estimate stands for the run's own tokens per step, as in its authors' loop; the learning rate from the mini
# sweep (scripts/mini_sweep.sh; the benchmark's 1e-3 before it), then with the weight decay and warmup tuned by
# scripts/tune_mini.sh (results/tune/tuning.md; before, 5e-4, 0.1 and config/mini.py's 25 steps).
optimizer = "sophia"
learning_rate = 1.414e-3
weight_decay = 3.0
warmup_iters = 150
beta1 = 0.9
beta2 = 0.999
sophia_rho = 0.04
sophia_hessian_interval = 10
decay_embeddings = False  # the official decay groups
grad_multiplier = 1.0  # the authors' loop takes the batch's mean gradient (h goes as its square)
