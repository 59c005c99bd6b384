# GPT-2 small (124M) with Scion, a baseline at the paper's setting (config/gpt2_small.py): 100k steps of
# 480 x 1024 tokens; the scripts in scripts/ pick the dataset, GPU count, micro-batch and token budget.
include = ["gpt2_small.py", "paper_scion.py"]
out_dir = "out/gpt2_small_scion"
wandb_run_name = "gpt2_small_scion"
learning_rate = 3.6e-4  # its authors' modded-nanogpt GPT-2 small rate at these radii (train_gpt_scion.py; untuned here)
min_lr = 0.0
