# GPT-2 medium (355M) with Muon: the paper's setting, as the official
# AGI-Arena/MARS config/train_gpt2_medium_muon.py. 100k steps of 480 x 1024 tokens (~49B tokens);
# the scripts in scripts/ pick the dataset, GPU count, micro-batch and token budget.
# Settings not assigned here are the schema's defaults (config/__init__.py), which are the
# paper's: warmup 2000, grad_clip 1.0, block_size 1024, eps 1e-8, eval every 1000 steps. README.md's
# "Differences from the official runs" lists what still differs and why.
out_dir = "out/gpt2_medium_muon"
wandb_run_name = "gpt2-medium-muon"
dataset = "openwebtext"

# model: GPT-2 medium, without biases, attention logits of layer i also divided by i + 1 (as the official runs)
model = "medium"
bias = False
scale_attn_by_inverse_layer_idx = True

# batch: 480 sequences of 1024 tokens per step on any number of GPUs. The official scripts sum,
# rather than average, their 4 per-GPU micro-batches: the gradient they clip and step on is
# 4 x the batch mean, kept here whatever the GPU count or micro-batch.
grad_multiplier = 4.0
micro_batch_size = 15  # sequences per GPU per micro-step: what fits an 80 GB card

# schedule: the paper-era official train_muon.py (before commit 0052466), which produced the
# paper's Muon numbers: linear warmup from 0, constant, then linear decay to 0 over the last 2000
# steps (its `schedule` and min_lr were ignored). Since commit 0052466 (2025-08-31) the official
# code decays each group by cosine to the same absolute min_lr instead:
#   --lr_schedule=cosine --min_lr_groups=absolute --min_lr=6e-5
lr_schedule = "wsd"
wsd_decay_frac = 0.02
min_lr = 0.0

# optimizer: Muon on the 2-D parameters (embeddings included, as the paper), on the rest the
# official repository's own AdamW (optimizers/adamw.py), as its train_muon.py.
optimizer = "muon"
learning_rate = 1e-2
weight_decay = 0.0
lr_1d = 1.5e-3
weight_decay_1d = 0.1
muon_adamw = "official"

# evaluation and logging
eval_sequences = 3000  # fixed windows; the official code averages 200 random batches of its micro-batch
compile = True
