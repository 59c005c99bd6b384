# GPT-2 small (124M) with Sophia, a baseline at the paper's setting (config/gpt2_small.py): 100k steps of
# 480 x 1024 tokens, its authors' own batch; the scripts in scripts/ pick the dataset, GPU count, micro-batch
# and token budget. Its authors decay to 1.5e-5 after a 2000-step warmup.
include = ["gpt2_small.py", "paper_sophia.py"]
out_dir = "out/gpt2_small_sophia"
wandb_run_name = "gpt2_small_sophia"
min_lr = 1.5e-5
