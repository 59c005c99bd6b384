# GPT-2 small (124M) with AdamH, a baseline at the paper's setting (config/gpt2_small.py): 100k steps of 480 x 1024
# tokens (the authors' track runs 4875 steps of 524,288); the scripts in scripts/ pick the dataset, GPU count,
# micro-batch and token budget.
include = ["gpt2_small.py", "paper_adamh.py"]
out_dir = "out/gpt2_small_adamh"
wandb_run_name = "gpt2_small_adamh"
learning_rate = 0.018  # the authors' modded-nanogpt track rate (untuned here)
