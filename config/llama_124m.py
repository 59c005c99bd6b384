# Semenov et al. 2025's 124M Llama ("Benchmarking Optimizers for Large Language Model Pretraining";
# epfml/llm-optimizer-benchmark at fdecd5d, scripts/124m/*.sh and src/main.py): FineWeb sample-100BT
# (python -m data.prepare fineweb), 256 sequences of 512 tokens per step (131K tokens; their 64 x 4
# accumulation on one GPU), 128K steps (16.8B tokens), OneCycle cosine with a 2000-step warmup from and to
# lr / 100 (min_lr in each optimizer's file), grad clip 0.5, the loss's mean gradient, bf16. The optimizer's
# settings: the rows llama_<size>_<optimizer> of config/cells.py. The AdamW, MARS and Muon rows follow their loop
# step for step (tests/test_fidelity.py), their values their scripts' flags at every size (tests/test_paper_configs.py).
dataset = "fineweb100B"
model = "llama-124m"
block_size = 512
total_batch_size = 256 * 512
micro_batch_size = 32  # sequences per GPU per micro-step: 8 GPUs, no accumulation (1 GPU: 8 micro-steps)
max_iters = 128_000
warmup_iters = 2000
lr_schedule = "onecycle"
grad_clip = 0.5
grad_multiplier = 1.0
dropout = 0.0
eval_interval = 1000
eval_sequences = 3000
compile = True
