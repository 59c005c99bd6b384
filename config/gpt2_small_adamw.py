# GPT-2 small (124M) with AdamW: the paper's setting, as the official
# AGI-Arena/MARS config/train_gpt2_small_adamw.py. 100k steps of 480 x 1024 tokens (~49B tokens);
# the scripts in scripts/ pick the dataset, GPU count, micro-batch and token budget.
# Settings not assigned here are the schema's defaults (config/__init__.py), which are the
# paper's: cosine schedule, warmup 2000, grad_clip 1.0, block_size 1024, eps 1e-8, eval every 1000 steps.
out_dir = "out/gpt2_small_adamw"
wandb_run_name = "gpt2-small-adamw"
dataset = "openwebtext"

# model: GPT-2 small, without biases, attention logits of layer i also divided by i + 1 (as the official runs)
model = "small"
bias = False
scale_attn_by_inverse_layer_idx = True

# batch: 480 sequences of 1024 tokens per step on any number of GPUs
micro_batch_size = 15  # sequences per GPU per micro-step: what fits an 80 GB card

# schedule: linear warmup, cosine decay to min_lr over the whole run
min_lr = 3e-5

# evaluation and logging
eval_sequences = 3000  # fixed windows; the official code averages 200 random batches of 15
compile = True
