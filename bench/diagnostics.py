"""
The optimizer diagnostics' cost on a log step under FSDP (optim/diagnostics.py: the weights copied before the
step, the update and weight RMS after it), on sharded parameters of a 12-layer GPT (148 tensors), CPU and gloo:

    torchrun --standalone --nproc_per_node=2 -m bench.diagnostics

Prints rank 0's CPU milliseconds for one log step's diagnostics (the median of 200). Measured 2026-11-26 on the
2-core CPU machine, three runs each, interleaved: 26.3-28.4 ms with foreach ops on the DTensors (each through
DTensor's sharding propagation), 25.7-27.3 ms on each rank's local blocks: within the runs' spread on CPU,
where the all-reduces and the copies dominate.
"""

if not __package__:  # run as a file: the repository's modules (model, data, ...) are not importable
    raise SystemExit("bench/diagnostics.py is a module of the bench package: run it from the repository root as\n"
                     "    python -m bench.diagnostics ...")

import statistics
import time

import torch
import torch.distributed as dist

from model import GPT, GPTConfig
from optim import load_config
from optim.diagnostics import update_and_weight_rms, weights_before_step
from optim.routing import parameter_kinds
from parallel import parallelize
from runtime import Runtime, close_runtime, join_process_group

REPEATS = 200

if __name__ == "__main__":
    join_process_group("gloo")
    torch.set_num_threads(1)
    rt = Runtime(dist.get_rank(), dist.get_rank(), dist.get_world_size(), torch.device("cpu"))
    cfg = load_config(["config/mini_mars.py", "--n_layer=12", "--n_head=4", "--n_embd=64", "--block_size=32",
                       "--vocab_size=256", "--data_parallel=fsdp", "--device=cpu", "--compile=False",
                       "--micro_batch_size=2", f"--total_batch_size={64 * rt.world_size}"])
    torch.manual_seed(0)
    raw_model = GPT(GPTConfig(**cfg.model_args()))
    parallelize(raw_model, cfg, rt)
    kinds = parameter_kinds(raw_model)
    for _ in range(3):  # warm-up
        update_and_weight_rms(kinds, weights_before_step(kinds))
    dist.barrier()
    times = []
    for _ in range(REPEATS):
        start = time.process_time()
        update_and_weight_rms(kinds, weights_before_step(kinds))
        times.append(time.process_time() - start)
    dist.barrier()
    if rt.is_main:
        milliseconds = 1000 * statistics.median(times)
        print(f"{sum(len(params) for params in kinds.values())} sharded tensors over {rt.world_size} ranks: "
              f"{milliseconds:.1f} ms of CPU a log step's diagnostics")
    close_runtime()
