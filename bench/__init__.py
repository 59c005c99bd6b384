"""
Benchmarks, each run from the repository root as `python -m bench.<name>`:

    python -m bench.optimizer_step     # one optimizer step on GPT-2-small tensors, against fused AdamW
    python -m bench.train_step CONFIG  # a training step of a config (CPU: with and without malloc reuse)
    python -m bench.tokenization       # data/prepare.py's tokenisation against nanoGPT's approach
    python -m bench.gpu                # GPU: tokens/s, MFU, memory and the step split, per optimizer
    python -m bench.memory CONFIG --world_size N   # a model of memory per GPU by part, and communication
    python -m bench.nanogpt NANOGPT    # GPU: nanoGPT's own train.py at the same shape and batch (the reference)
    python -m bench.official_mars MARS/MARS/optimizers   # GPU: MARS-AdamW against its authors' fused kernel
    bash bench/gpu_round.sh STAGES     # a lent GPU's measurements, in stages sized to one call (see the script)

Each prints the command and the machine first (print_header), so a pasted result says where it came from.
"""

import os
import platform
import sys

import torch


def machine() -> str:
    """The machine in one line: CPU (cores, threads torch uses) or GPU, and the torch version."""
    if torch.cuda.is_available():
        device = f"{torch.cuda.get_device_name()} (CUDA {torch.version.cuda})"
    else:
        device = f"CPU {platform.processor() or platform.machine()}, {os.cpu_count()} cores, " \
                 f"{torch.get_num_threads()} torch threads"
    return f"{device}; torch {torch.__version__}; Python {platform.python_version()}"


def print_header() -> None:
    """The command that is running and the machine it runs on."""
    print(f"$ python -m {sys.modules['__main__'].__spec__.name} {' '.join(sys.argv[1:])}".rstrip())
    print(f"# {machine()}")
