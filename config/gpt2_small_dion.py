# GPT-2 small (124M) with Dion, at the paper's setting (config/gpt2_small.py): 100k steps of 480 x 1024 tokens;
# the scripts in scripts/ pick the dataset, GPU count, micro-batch and token budget.
include = ["gpt2_small.py", "paper_dion.py"]
out_dir = "out/gpt2_small_dion"
wandb_run_name = "gpt2_small_dion"
learning_rate = 0.02  # the authors' (their 160M model, untuned here)
