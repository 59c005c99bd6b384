# GPT-2 small (124M) with SOAP, a baseline at the paper's setting (config/gpt2_small.py): 100k steps
# of 480 x 1024 tokens; the scripts in scripts/ pick the dataset, GPU count, micro-batch and token budget.
include = ["gpt2_small.py", "paper_soap.py"]
out_dir = "out/gpt2_small_soap"
wandb_run_name = "gpt2_small_soap"
learning_rate = 3e-3  # the authors' default (untuned)
