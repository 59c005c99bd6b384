# GPT-2 small (124M) with Lion, a baseline at the paper's setting (config/gpt2_small.py): 100k steps
# of 480 x 1024 tokens; the scripts in scripts/ pick the dataset, GPU count, micro-batch and token budget.
include = ["gpt2_small.py", "paper_lion.py"]
out_dir = "out/gpt2_small_lion"
wandb_run_name = "gpt2_small_lion"
learning_rate = 2e-4  # the authors' advice, 3x below AdamW's 6e-4 (untuned)
