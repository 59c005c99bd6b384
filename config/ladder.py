# The batch-size ladder (experiments/batch_ladder.py), after config/mini.py: the mini testbed's corpus,
# shape and schedule with a smaller model, so that every size runs the same 4.19M tokens (1,024 steps at
# 4K tokens per step, 64 at 64K) and the whole ladder takes hours, not days, on 2 cores: 3 layers of 64
# (0.17M parameters) run 4M tokens in 165-185 s on one core with another run beside it (MARS-exact:
# 340 s), where the mini model's 0.49M would take about 380 s. The ladder sets total_batch_size,
# warmup_iters, eval_interval and log_interval per size, so that warmup (10% of the tokens) and
# evaluation (every 262K tokens) fall at the same tokens.
out_dir = "out/ladder"
n_layer = 3
n_head = 4
n_embd = 64
max_tokens = 4 * 1024 * 1024  # experiments/batch_ladder.py --tokens sets it per run
