# ADOPT on Semenov et al.'s 124M Llama: their tuned scripts/124m/adopt.sh (lr 1e-3, betas 0.9/0.999, eps 1e-6,
# decoupled weight decay 0.1).
include = ["llama_124m.py", "paper_adopt.py"]
out_dir = "out/llama_124m_adopt"
wandb_run_name = "llama_124m_adopt"
learning_rate = 1e-3
min_lr = 1e-5
