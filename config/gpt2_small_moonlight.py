# GPT-2 small (124M) with Moonlight (Muon with weight decay, RMS-matched): the official AGI-Arena/MARS
# MARS_M/config/train_gpt2_small_moonlight.py. 100k steps of 480 x 1024 tokens (~49B tokens); the scripts
# in scripts/ pick the dataset, GPU count, micro-batch and token budget. Settings not assigned here or in
# the included files are the defaults (config/__init__.py, optim/): warmup 2000, grad_clip 1.0, block_size
# 1024, eps 1e-8.
include = ["gpt2_small.py", "paper_moonlight.py"]
out_dir = "out/gpt2_small_moonlight"
wandb_run_name = "gpt2_small_moonlight"
learning_rate = 0.006
