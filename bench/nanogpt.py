"""
The reference for bench.gpu: Karpathy's nanoGPT `train.py`, run as its authors ship it, on the same GPU,
model shape and micro-batch, its tokens/s and MFU printed the way bench.gpu prints ours.

    git clone https://github.com/karpathy/nanoGPT /path/to/nanoGPT
    python -m bench.nanogpt /path/to/nanoGPT --models small,medium

nanoGPT reads `data/<dataset>/train.bin` under its working directory, so each run happens in a temporary
folder holding links to nanoGPT's three files and a shard of random token ids (nanoGPT's own format, flat
uint16). Its command line sets the shape (GPT-2 small or medium, no biases, as our paper configs), the
micro-batch, one micro-step per step (a single GPU), bf16 and compile (nanoGPT's defaults) and turns
checkpoints and wandb off; nothing else of nanoGPT's is changed. Its "iter N: ... time T ms" lines are the
wall-clock of each step, with a loss.item() sync per step (log_interval=1); the median after --warmup
steps is the step time. MFU uses this project's FLOP count (model.GPT.flops_per_token) and peak
(train.PEAK_BF16_FLOPS) for both, so the two rows compare like for like; nanoGPT's own MFU figure
counts against an A100's 312 TFLOP/s.
"""

if not __package__:  # run as a file: the repository's modules (model, data, ...) are not importable
    raise SystemExit("bench/nanogpt.py is a module of the bench package: run it from the repository root as\n"
                     "    python -m bench.nanogpt ...")

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile

import numpy as np
import torch

import train
from bench import print_header
from config import TrainConfig
from config.models import PRESETS
from model import GPT, GPTConfig

NANOGPT_FILES = ("train.py", "model.py", "configurator.py")
ITER_LINE = re.compile(r"^iter (\d+): loss [\d.naif]+, time ([\d.]+)ms")


def nanogpt_step_ms(nanogpt: str, model: str, micro_batch: int, steps: int, warmup: int, workdir: str) -> list[float]:
    """Run nanoGPT's train.py for warmup + steps steps of `model` in workdir; the measured steps' ms."""
    for name in NANOGPT_FILES:
        os.symlink(os.path.join(nanogpt, name), os.path.join(workdir, name))
    data = os.path.join(workdir, "data", "random")
    os.makedirs(data)
    rng = np.random.default_rng(0)
    for split, count in (("train", 1 << 24), ("val", 1 << 20)):
        rng.integers(0, 50257, count).astype(np.uint16).tofile(os.path.join(data, f"{split}.bin"))
    shape = PRESETS[model]
    command = [sys.executable, "train.py", "--dataset=random", f"--out_dir={workdir}/out", "--wandb_log=False",
               f"--n_layer={shape['n_layer']}", f"--n_head={shape['n_head']}", f"--n_embd={shape['n_embd']}",
               "--bias=False", "--dropout=0.0", f"--batch_size={micro_batch}", "--block_size=1024",
               "--gradient_accumulation_steps=1", f"--max_iters={warmup + steps}", "--log_interval=1",
               f"--eval_interval={warmup + steps + 1}", "--eval_iters=1", "--always_save_checkpoint=False",
               "--dtype=bfloat16", "--compile=True"]
    proc = subprocess.run(command, cwd=workdir, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"nanoGPT's train.py failed ({proc.returncode}):\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    times = {int(m[1]): float(m[2]) for m in map(ITER_LINE.match, proc.stdout.splitlines()) if m}
    return [ms for step, ms in sorted(times.items()) if step >= warmup]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.nanogpt",
                                     description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("nanogpt", help="a checkout of github.com/karpathy/nanoGPT")
    parser.add_argument("--models", default="small,medium", help="from: " + ", ".join(PRESETS))
    parser.add_argument("--micro-batch", type=int, default=15, help="sequences per step (bench.gpu's default: 15)")
    parser.add_argument("--steps", type=int, default=20, help="measured steps")
    parser.add_argument("--warmup", type=int, default=5, help="steps before measuring (compilation)")
    args = parser.parse_args(argv)
    missing = [name for name in NANOGPT_FILES if not os.path.isfile(os.path.join(args.nanogpt, name))]
    if missing:
        parser.error(f"{args.nanogpt} is not a nanoGPT checkout: no {', '.join(missing)}")
    print_header()
    if not torch.cuda.is_available():
        print("no CUDA device is present: nothing measured")
        return 0
    peak = train.peak_flops(TrainConfig(), torch.device("cuda"))
    print("| model | run | micro-batch | tokens/s | MFU % | step ms |")
    print("| --- | --- | --- | --- | --- | --- |")
    for model in filter(None, args.models.split(",")):
        with tempfile.TemporaryDirectory() as workdir:
            step_ms = statistics.median(nanogpt_step_ms(os.path.abspath(args.nanogpt), model, args.micro_batch,
                                                        args.steps, args.warmup, workdir))
        tokens_per_s = args.micro_batch * 1024 / (step_ms / 1000)
        with torch.device("meta"):
            flops_model = GPT(GPTConfig(**PRESETS[model], bias=False))
        mfu = f"{100 * flops_model.estimate_mfu(tokens_per_s, peak):.1f}" if peak else "-"
        print(f"| {model} | nanoGPT train.py | {args.micro_batch} | {tokens_per_s:,.0f} | {mfu} | {step_ms:.1f} |",
              flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
