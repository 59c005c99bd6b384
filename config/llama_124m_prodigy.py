# Prodigy on Semenov et al.'s 124M Llama: their tuned scripts/124m/prodigy.sh (learning rate 1 through their
# OneCycle cosine, so from and to 0.01; betas 0.9/0.999 with bias correction, decoupled weight decay 0.1).
include = ["llama_124m.py", "paper_prodigy.py"]
out_dir = "out/llama_124m_prodigy"
wandb_run_name = "llama_124m_prodigy"
learning_rate = 1.0
min_lr = 0.01
