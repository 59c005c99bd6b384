# GPT-2 small (124M) with Distributed Shampoo, a baseline at the paper's setting (config/gpt2_small.py): 100k steps
# of 480 x 1024 tokens; the scripts in scripts/ pick the dataset, GPU count, micro-batch and token budget.
include = ["gpt2_small.py", "paper_shampoo.py"]
out_dir = "out/gpt2_small_shampoo"
wandb_run_name = "gpt2_small_shampoo"
learning_rate = 1.5e-3  # modded-nanogpt's Shampoo run (GPT-2 small, 4150 steps of 524k tokens; untuned here)
