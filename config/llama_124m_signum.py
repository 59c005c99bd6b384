# Signum on Semenov et al.'s 124M Llama: their tuned scripts/124m/signum.sh (lr 1e-3, momentum 0.9, no
# Nesterov, decoupled weight decay 0.1). Their momentum starts as a copy of the weights (a defect: see
# optim/signum.py); signum_momentum_init="parameter" reruns it exactly.
include = ["llama_124m.py", "paper_signum.py"]
out_dir = "out/llama_124m_signum"
wandb_run_name = "llama_124m_signum"
learning_rate = 1e-3
min_lr = 1e-5
