# The CPU mini reproduction (scripts/mini_sweep.sh, scripts/mini_paper.sh): a tiny GPT on the
# standard-library corpus (python -m data.quickstart), the paper's recipe shrunk to minutes.
# The optimizer settings come from config/mini_{adamw,muon,mars}.py, applied after this file.
out_dir = "out/mini"
dataset = "stdlib"
device = "cpu"
n_layer = 4
n_head = 4
n_embd = 64
block_size = 64
bias = False
dropout = 0.0
scale_attn_by_inverse_layer_idx = True
micro_batch_size = 8
total_batch_size = 8 * 64  # tokens per optimizer step
max_iters = 120
lr_schedule = "cosine"
warmup_iters = 12
min_lr = 0.0  # every optimizer and learning rate decays to 0 (the paper's floors are 0.15-5% of the peak)
grad_clip = 1.0
eval_interval = 20
eval_sequences = 128
log_interval = 5
