# GPT-2 small (124M) with ADOPT, a baseline at the paper's setting (config/gpt2_small.py): 100k steps
# of 480 x 1024 tokens; the scripts in scripts/ pick the dataset, GPU count, micro-batch and token budget.
include = ["gpt2_small.py", "paper_adopt.py"]
out_dir = "out/gpt2_small_adopt"
wandb_run_name = "gpt2_small_adopt"
learning_rate = 6e-4  # AdamW's (untuned)
