# Semenov et al. 2025's 720M Llama (epfml/llm-optimizer-benchmark at fdecd5d, scripts/720m/*.sh): what its
# runs change from the 124M's recipe (config/llama_124m.py; each cells.py row llama_720m_<optimizer> takes this
# file, then its optimizer's recipe): 1984 sequences of 512 tokens per step (1.02M tokens; their 62 x 32
# accumulation on one GPU), 48K steps (48.8B tokens), grad clip 0.1. Warmup (2000 steps), schedule and data as
# at 124M.
include = ["llama_124m.py"]
model = "llama-720m"
total_batch_size = 1984 * 512
micro_batch_size = 31  # sequences per GPU per micro-step: 8 GPUs x 8 micro-steps (bench.memory: fits 80 GB)
max_iters = 48_000
grad_clip = 0.1
eval_interval = 500
