# GPT-2 xl (1.5B) with AdamW: the paper's setting, as the official
# AGI-Arena/MARS config/train_gpt2_xl_adamw.py. 100k steps of 480 x 1024 tokens (~49B tokens);
# the scripts in scripts/ pick the dataset, GPU count, micro-batch and token budget.
# Settings not assigned here are the schema's defaults (config/__init__.py), which are the
# paper's: warmup 2000, grad_clip 1.0, block_size 1024, eps 1e-8, eval every 1000 steps. README.md's
# "Differences from the official runs" lists what still differs and why.
out_dir = "out/gpt2_xl_adamw"
wandb_run_name = "gpt2-xl-adamw"
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

# schedule: linear warmup from 0, cosine decay to min_lr over the whole run
min_lr = 1e-5

# optimizer
learning_rate = 2e-4

# weight decay on the nn.Linear weights only (not the embeddings and the tied head), as the official runs
decay_embeddings = False

# evaluation and logging
eval_sequences = 3000  # fixed windows; the official code averages 200 random batches of its micro-batch
compile = True
