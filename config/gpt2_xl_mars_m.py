# GPT-2 xl (1.5B) with MARS-M (approximate): the setting of the official
# AGI-Arena/MARS MARS_M/config/train_gpt2_xl_mars_m.py (arXiv 2510.21800). 100k steps of
# 480 x 1024 tokens (~49B tokens); the scripts in scripts/ pick the dataset, GPU count, micro-batch
# and token budget. Settings not assigned here are the schema's defaults (config/__init__.py):
# warmup 2000, grad_clip 1.0, block_size 1024, eps 1e-8, eval every 1000 steps.
out_dir = "out/gpt2_xl_mars_m"
wandb_run_name = "gpt2-xl-mars-m"
dataset = "openwebtext"

# model: GPT-2 xl, without biases, attention logits of layer i also divided by i + 1 (as the official runs)
model = "xl"
bias = False
scale_attn_by_inverse_layer_idx = True

# batch: 480 sequences of 1024 tokens per step on any number of GPUs. The official scripts sum,
# rather than average, their 12 per-GPU micro-batches: the gradient they clip and step on is
# 12 x the batch mean, kept here whatever the GPU count or micro-batch.
grad_multiplier = 12.0
micro_batch_size = 5  # sequences per GPU per micro-step: what fits an 80 GB card

# schedule: linear warmup from 0, cosine decay to min_lr over the whole run (every group the same lr)
min_lr = 1e-5

# optimizer: the matrix rule on the 2-D parameters except the embeddings and the tied head, which
# take AdamW (betas 0.9/0.95, eps before the bias corrections) with the 1-D ones, all decayed with
# weight_decay, as the official script. momentum = beta1 (the official scripts pass it so).
optimizer = "mars-m"
is_approx = True  # the official runs: MARS-M-approx (exact: --is_approx=False)
gamma = 0.025
learning_rate = 3e-3
# weight_decay 1e-2: the official MARS_M/config files (what the official scripts ran); the official
# README's table says 1e-1, which is Moonlight's setting.
weight_decay = 1e-2
beta1 = 0.95

# evaluation and logging
eval_sequences = 3000  # fixed windows; the official code averages 200 random batches of its micro-batch
compile = True
