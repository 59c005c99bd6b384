# GPT-2 small (124M) with Schedule-Free AdamW, a baseline at the paper's setting (config/gpt2_small.py): 100k steps
# of 480 x 1024 tokens; the scripts in scripts/ pick the dataset, GPU count, micro-batch and token budget.
include = ["gpt2_small.py", "paper_schedule_free_adamw.py"]
out_dir = "out/gpt2_small_schedule_free_adamw"
wandb_run_name = "gpt2_small_schedule_free_adamw"
learning_rate = 1.2e-3  # 2x AdamW's, as Schedule-Free's authors find it takes a higher one (untuned)
