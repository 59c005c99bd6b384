# GPT-2 large (774M) with MARS-approx (MARS-AdamW): the official AGI-Arena/MARS
# config/train_gpt2_large_mars.py. 100k steps of 480 x 1024 tokens (~49B tokens); the scripts in scripts/
# pick the dataset, GPU count, micro-batch and token budget. Settings not assigned here or in the included
# files are the defaults (config/__init__.py, optim/): warmup 2000, grad_clip 1.0, block_size 1024, eps
# 1e-8.
include = ["gpt2_large.py", "paper_mars.py"]
out_dir = "out/gpt2_large_mars"
wandb_run_name = "gpt2_large_mars"
learning_rate = 0.002
lr_1d = 0.001
