"""
Time a training step (forward, backward, optimizer) of a config's model on this device.

    python -m bench.train_step config/quickstart.py            # CPU: with/without malloc reuse
    python -m bench.train_step config/gpt2_small_mars.py --micro_batch_size=16 --device=cuda

Prints the median ms per micro-step and tokens/s; on CPU it also runs the step
without train.keep_freed_memory_for_reuse() (in a fresh process) and prints the ratio.
"""

import os
import statistics
import subprocess
import sys
import time

import torch

from config import load_config
from model import GPT, GPTConfig
from optim import build_optimizer
from train import keep_freed_memory_for_reuse


def median_step_ms(argv: list[str], reuse_memory: bool, steps: int = 8) -> float:
    cfg = load_config(argv)
    device = torch.device("cuda" if cfg.device in ("auto", "cuda") and torch.cuda.is_available() else "cpu")
    if device.type == "cpu" and reuse_memory:
        keep_freed_memory_for_reuse()
    torch.manual_seed(0)
    model = GPT(GPTConfig(**cfg.model_args())).to(device)
    optimizer = build_optimizer(model, cfg, device.type)
    x, y = torch.randint(0, 50257, (2, cfg.micro_batch_size, cfg.block_size), device=device)
    autocast = torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda")
    times = []
    for _ in range(steps + 3):
        start = time.perf_counter()
        with autocast:
            _, loss = model(x, y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if device.type == "cuda":
            torch.cuda.synchronize()
        times.append(1000 * (time.perf_counter() - start))
    return statistics.median(times[3:])  # the first steps warm up allocators and kernels


if __name__ == "__main__":
    argv = [a for a in sys.argv[1:] if a != "--no-reuse"]
    if "--no-reuse" in sys.argv:  # the baseline, in its own process so no mallopt has run
        print(median_step_ms(argv, reuse_memory=False))
        sys.exit()
    cfg = load_config(argv)
    ms = median_step_ms(argv, reuse_memory=True)
    print(f"{ms:.0f} ms per micro-step, {cfg.micro_batch_size * cfg.block_size / ms * 1000:,.0f} tokens/s")
    if not torch.cuda.is_available():
        baseline = float(subprocess.run([sys.executable, __file__, *argv, "--no-reuse"], capture_output=True,
                                        text=True, check=True).stdout.split()[-1])
        print(f"without malloc reuse: {baseline:.0f} ms per micro-step; speed-up {baseline / ms:.2f}x")
