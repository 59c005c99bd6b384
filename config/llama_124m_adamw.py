# AdamW on Semenov et al.'s 124M Llama: their tuned scripts/124m/adamw.sh (lr 1e-3, betas 0.8/0.999, wd 0.1).
include = ["llama_124m.py"]
out_dir = "out/llama_124m_adamw"
wandb_run_name = "llama_124m_adamw"
optimizer = "adamw"
learning_rate = 1e-3
min_lr = 1e-5
weight_decay = 0.1
beta1 = 0.8
beta2 = 0.999
decay_embeddings = False  # their groups: decay on the Linear weights only (not the tied embedding)
