# GPT-2 small (124M) with Prodigy, a baseline at the paper's setting (config/gpt2_small.py): 100k steps
# of 480 x 1024 tokens; the scripts in scripts/ pick the dataset, GPU count, micro-batch and token budget.
include = ["gpt2_small.py", "paper_prodigy.py"]
out_dir = "out/gpt2_small_prodigy"
wandb_run_name = "gpt2_small_prodigy"
min_lr = 0.05  # its learning rate 1 decays to a twentieth, as the paper's AdamW (6e-4 to 3e-5)
