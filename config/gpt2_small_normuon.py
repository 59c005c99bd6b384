# GPT-2 small (124M) with NorMuon at the paper's setting (config/gpt2_small.py): 100k steps of 480 x 1024 tokens;
# the scripts in scripts/ pick the dataset, GPU count, micro-batch and token budget. The recipe
# (config/paper_normuon.py) is modded-nanogpt's optimization-track NorMuon run, the closest published one.
include = ["gpt2_small.py", "paper_normuon.py"]
out_dir = "out/gpt2_small_normuon"
wandb_run_name = "gpt2_small_normuon"
learning_rate = 0.035
