"""
Time train.py's optimizer step (forward-backward, clipping, optimizer) of a config's model on this
device, on synthetic tokens, and what the log-step diagnostics add to it.

    python -m bench.train_step config/quickstart.py            # CPU: also with/without malloc reuse
    python -m bench.train_step config/gpt2_small_mars.py --micro_batch_size=16 --device=cuda --compile=True

Prints the median ms per step and tokens/s; the diagnostics' overhead (optim/diagnostics.py: run on
log steps only, so their cost per step is the extra time of a diagnosed step over log_interval);
on CPU, the step without runtime.keep_freed_memory_for_reuse() (in a fresh process) and the ratio.
"""

if not __package__:  # run as a file: the repository's modules (model, data, ...) are not importable
    raise SystemExit("bench/train_step.py is a module of the bench package: run it from the repository root as\n"
                     "    python -m bench.train_step ...")

import statistics
import subprocess
import sys
import time

import torch

import bench
from config import TrainConfig
from errors import exit_on_input_error
from model import GPT, GPTConfig
from optim import build_optimizer, load_config
from optim.routing import parameter_kinds
from runtime import autocast_context, init_runtime, keep_freed_memory_for_reuse, resolve_dtype
from train import StepContext


class SyntheticBatches:
    """train.TrainBatches' interface on random tokens, drawn once, in host memory as TrainBatches
    gives them (train.StepContext.forward_backward moves each micro-batch to the device)."""

    def __init__(self, cfg: TrainConfig):
        self.x, self.y = torch.randint(0, cfg.vocab_size, (2, cfg.micro_batch_size, cfg.block_size))

    def micro_batch(self, *args) -> tuple[torch.Tensor, torch.Tensor]:
        return self.x, self.y


def median_step_ms(argv: list[str], reuse_memory: bool, diagnose: bool = False, steps: int = 8) -> float:
    cfg = load_config(argv)
    rt = init_runtime(cfg.device)  # one process: rank 0 of 1 on the config's device
    device = rt.device
    if device.type == "cpu" and reuse_memory:
        keep_freed_memory_for_reuse()
    cfg.total_batch_size = cfg.micro_batch_size * cfg.block_size  # one micro-step per step
    torch.manual_seed(0)
    raw_model = GPT(GPTConfig(**cfg.model_args()), cfg.fused_cross_entropy).to(device)
    optimizer = build_optimizer(raw_model, cfg, device.type)
    for group in optimizer.param_groups:
        group["lr"] = group["base_lr"]
    dtype = resolve_dtype(cfg.dtype, device)
    scaler = torch.amp.GradScaler(device.type, enabled=dtype == "float16")
    autocast = autocast_context(device, dtype)
    model = torch.compile(raw_model) if cfg.compile else raw_model  # as train.py runs it
    stepper = StepContext(model, list(raw_model.parameters()), optimizer, scaler, SyntheticBatches(cfg), cfg, rt,
                          autocast)
    kinds = parameter_kinds(raw_model) if diagnose else None
    times = []
    for step in range(steps + 3):
        start = time.perf_counter()
        _, _, diagnostics = stepper.optimizer_step(step, kinds)
        [value.item() for value in diagnostics.values()]  # what a log step reads
        if device.type == "cuda":
            torch.cuda.synchronize()
        times.append(1000 * (time.perf_counter() - start))
    return statistics.median(times[3:])  # the first steps warm up allocators and kernels


def main(argv: list[str]) -> None:
    if any(arg in ("-h", "--help") for arg in argv):
        print(__doc__.strip() + "\n\nArguments: train.py's (config files, then --key=value overrides); "
              "python train.py --help lists them.")
        return
    with exit_on_input_error():
        argv = [a for a in argv if a != "--no-reuse"]
        cfg = load_config(argv)  # (a mistyped key or a bad value: named here, before anything runs)
        if "--no-reuse" in sys.argv:  # the baseline, in its own process so no mallopt has run
            print(median_step_ms(argv, reuse_memory=False))
            return
        bench.print_header()
        ms = median_step_ms(argv, reuse_memory=True)
    print(f"{ms:.0f} ms per step of {cfg.micro_batch_size} x {cfg.block_size} tokens, "
          f"{cfg.micro_batch_size * cfg.block_size / ms * 1000:,.0f} tokens/s ({cfg.optimizer})")
    diagnosed = median_step_ms(argv, reuse_memory=True, diagnose=True)
    print(f"a step with diagnostics: {diagnosed:.0f} ms; at log_interval {cfg.log_interval} they add "
          f"{100 * (diagnosed - ms) / cfg.log_interval / ms:.2f}% per step")
    if not torch.cuda.is_available():
        baseline = float(subprocess.run([sys.executable, "-m", "bench.train_step", *argv, "--no-reuse"],
                                        capture_output=True, text=True, check=True).stdout.split()[-1])
        print(f"without malloc reuse: {baseline:.0f} ms per step; speed-up {baseline / ms:.2f}x")


if __name__ == "__main__":
    main(sys.argv[1:])
