# Sophia (SophiaG) for the CPU mini reproduction (after config/mini.py): Semenov et al.'s 124M settings (betas
# 0.9/0.999, rho 0.04, weight decay 0.1, a Hessian estimate every 10 steps) and AdamW's decay groups; the
# estimate stands for the run's own tokens per step, as in its authors' loop; the learning rate from the mini
# sweep (scripts/mini_sweep.sh; the benchmark's 1e-3 before it), then with the weight decay and warmup tuned by
# scripts/tune_mini.sh (results/tune/tuning.md; before, 5e-4, 0.1 and config/mini.py's 25 steps).
include = ["paper_sophia.py"]  # then the mini's own values
learning_rate = 1.414e-3
weight_decay = 3.0
warmup_iters = 150
beta1 = 0.9
beta2 = 0.999
sophia_rho = 0.04
