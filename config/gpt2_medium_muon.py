# GPT-2 medium (355M) with Muon: the paper's setting, as the official
# AGI-Arena/MARS config/train_gpt2_medium_muon.py. 100k steps of 480 x 1024 tokens (~49B tokens);
# the scripts in scripts/ pick the dataset, GPU count, micro-batch and token budget.
out_dir = "out/gpt2_medium_muon"
wandb_run_name = "gpt2-medium-muon"
dataset = "openwebtext"

# model: GPT-2 medium, without biases, attention logits of layer i also divided by i + 1 (as the official runs)
model = "medium"
vocab_size = 50304
block_size = 1024
bias = False
dropout = 0.0
scale_attn_by_inverse_layer_idx = True

# batch: 480 sequences of 1024 tokens per step on any number of GPUs
total_batch_size = 480 * 1024
micro_batch_size = 15  # sequences per GPU per micro-step: what fits an 80 GB card
max_iters = 100_000

# schedule: linear warmup, cosine decay to min_lr over the whole run
lr_schedule = "cosine"
warmup_iters = 2000
lr_decay_iters = 0  # 0: the end of the run (max_iters, or the --max_tokens budget)
min_lr = 6e-5
grad_clip = 1.0

# optimizer: Muon on the 2-D parameters (embeddings included, as the paper), AdamW on the rest.
# The official train_muon.py ignores its `schedule` and decays linearly to 0 over the last 2000
# steps; to reproduce that instead: --lr_schedule=wsd --wsd_decay_frac=0.02 --min_lr=0
optimizer = "muon"
learning_rate = 1e-2
weight_decay = 0.0
muon_momentum = 0.95
muon_nesterov = True
muon_embeddings_on_adamw = False
lr_1d = 1.5e-3
beta1_1d = 0.9
beta2_1d = 0.95
weight_decay_1d = 0.1

# evaluation and logging
eval_interval = 1000
eval_sequences = 3000  # fixed windows; the official code averages 200 random batches of 15
log_interval = 10
compile = True
