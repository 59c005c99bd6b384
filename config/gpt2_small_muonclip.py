# GPT-2 small (124M) with MuonClip: config/gpt2_small_moonlight.py's run (the official MARS-M recipe) with QK-clip at
# Kimi K2's tau (config/paper_muonclip.py). Settings not assigned here or in the included files are the defaults.
include = ["gpt2_small.py", "paper_muonclip.py"]
out_dir = "out/gpt2_small_muonclip"
wandb_run_name = "gpt2_small_muonclip"
learning_rate = 0.006
