# The CPU mini reproduction (scripts/mini_sweep.sh, scripts/mini_paper.sh): a small GPT on the
# standard-library corpus as raw bytes (python -m data.quickstart --tokenizer bytes), so the CPU's work
# goes into the transformer: 0.49M parameters, 10% of them in the embeddings (the GPT-2-token mini model
# had 94% in a 50K-row embedding), each run 256 steps of 4096 tokens = 1.05M tokens.
# The paper's shape shrunk: its global-gradient scale here; each optimizer's betas, decay groups,
# gamma, weight decays and schedule in config/mini_<optimizer>.py, applied after this file.
out_dir = "out/mini"
dataset = "stdlib_bytes"
tokenizer = "bytes"
vocab_size = 264  # 256 bytes + <|endoftext|>, padded to a multiple of 8
device = "cpu"
n_layer = 4
n_head = 4
n_embd = 96
block_size = 256
bias = False
dropout = 0.0
scale_attn_by_inverse_layer_idx = True
micro_batch_size = 16
total_batch_size = 16 * 256  # tokens per optimizer step
max_iters = 256
warmup_iters = 25
lr_schedule = "cosine"
min_lr = 0.0  # every optimizer and learning rate decays to 0 (the paper's floors are 0-5% of the peak)
grad_clip = 1.0
grad_multiplier = 4.0  # the official scripts' gradient scale (GPT-2 small: 4 x the batch mean)
eval_interval = 32
eval_sequences = 128
log_interval = 8
