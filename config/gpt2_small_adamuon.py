# GPT-2 small (124M) with AdaMuon: the authors' gpt2/config/small.py (Chongjie-Si/AdaMuon at 369f0b3) at the
# paper's setting (config/gpt2_small.py): 100k steps of 480 x 1024 tokens, as theirs (15 sequences x 4
# micro-steps x 8 GPUs, the micro-steps' gradients summed); the scripts in scripts/ pick the dataset, GPU count,
# micro-batch and token budget. Their model has rotary position embeddings where ours learns a position table
# (on AdamW, decayed, with the token embedding).
include = ["gpt2_small.py", "paper_adamuon.py"]
out_dir = "out/gpt2_small_adamuon"
wandb_run_name = "gpt2_small_adamuon"
learning_rate = 6e-4
