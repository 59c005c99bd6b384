"""
Where a run executes: the process's place in torch.distributed, its device and
precision, and the stop signal every rank agrees on. Used by train.py; eval/
takes autocast_context() from here too.
"""

import argparse
import contextlib
import ctypes
import datetime
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import ContextManager

import torch
import torch.distributed as dist


@dataclass(frozen=True)
class Runtime:
    """This process's rank and device. One process without torchrun: rank 0 of 1."""

    rank: int
    local_rank: int
    world_size: int
    device: torch.device

    @property
    def distributed(self) -> bool:
        return self.world_size > 1 or dist.is_initialized()

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def init_runtime(device_setting: str) -> Runtime:
    """Join the process group when torchrun started us (RANK/LOCAL_RANK/WORLD_SIZE set),
    NCCL on GPUs and gloo on CPU. device_setting: auto | cpu | cuda | cuda:N."""
    use_cuda = device_setting.startswith("cuda") or (device_setting == "auto" and torch.cuda.is_available())
    if "RANK" not in os.environ:
        device = torch.device((device_setting if device_setting != "auto" else "cuda") if use_cuda else "cpu")
        return Runtime(0, 0, 1, device)
    rank, local_rank, world_size = (int(os.environ[k]) for k in ("RANK", "LOCAL_RANK", "WORLD_SIZE"))
    device = torch.device(f"cuda:{local_rank}" if use_cuda else "cpu")
    if use_cuda:
        torch.cuda.set_device(device)
    # Generous timeout: the other ranks wait in a collective while rank 0 writes a checkpoint
    # (tens of GB for XL with MARS) to a possibly slow shared filesystem.
    dist.init_process_group(backend="nccl" if use_cuda else "gloo", device_id=device if use_cuda else None,
                            timeout=datetime.timedelta(minutes=60))
    return Runtime(rank, local_rank, world_size, device)


def close_runtime(rt: Runtime) -> None:
    if dist.is_initialized():
        dist.destroy_process_group()


def all_reduce_sum(t: torch.Tensor) -> torch.Tensor:
    """t summed over ranks, in place (t itself without torch.distributed)."""
    if dist.is_initialized():
        dist.all_reduce(t)
    return t


def any_rank(flag: bool, device: torch.device) -> bool:
    """Whether flag holds on some rank (a collective: every rank calls it at the same point)."""
    value = torch.tensor(float(flag), device=device)
    if dist.is_initialized():
        dist.all_reduce(value, op=dist.ReduceOp.MAX)
    return bool(value.item())


def resolve_dtype(dtype_setting: str, device: torch.device) -> str:
    """'auto' is bf16 on CUDA and fp32 elsewhere."""
    if dtype_setting != "auto":
        return dtype_setting
    return "bfloat16" if device.type == "cuda" else "float32"


def autocast_context(device: str | torch.device, dtype: str) -> ContextManager:
    """Mixed precision for forward passes; float32 runs as is."""
    if dtype == "float32":
        return contextlib.nullcontext()
    device_type = "cuda" if str(device).startswith("cuda") else "cpu"
    return torch.autocast(device_type=device_type, dtype=getattr(torch, dtype))


def configure_device(device: torch.device, deterministic: bool = False) -> None:
    """TF32 matrix products on CUDA; on CPU, keep freed memory for reuse. deterministic: kernels that
    give the same bits every run (compiled embedding backward and flash attention's backward use
    atomics otherwise), so a resumed CUDA run equals an uninterrupted one bit for bit."""
    if deterministic:
        # cuBLAS reads its workspace setting when first used, inductor its flag when compiling: set both first.
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        os.environ.setdefault("TORCHINDUCTOR_DETERMINISTIC", "1")
        torch.use_deterministic_algorithms(True)
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    else:
        keep_freed_memory_for_reuse()


def keep_freed_memory_for_reuse() -> None:
    """CPU training: glibc hands every large freed tensor back to the OS and page-faults it in
    again at the next step, which measured 40% of a quickstart step here. Larger mmap and trim
    thresholds keep that memory in the heap for reuse (glibc only; elsewhere nothing changes)."""
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        return
    M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
    libc.mallopt(M_MMAP_THRESHOLD, 1 << 30)
    libc.mallopt(M_TRIM_THRESHOLD, (1 << 31) - 1)


def code_version() -> str:
    """The git commit of this code, with '-dirty' when it has uncommitted changes."""
    here = os.path.dirname(os.path.abspath(__file__))
    try:
        rev = subprocess.run(["git", "rev-parse", "HEAD"], cwd=here, capture_output=True, text=True, check=True)
        dirty = subprocess.run(["git", "status", "--porcelain"], cwd=here, capture_output=True, text=True)
        return rev.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


class StopSignal:
    """SIGTERM/SIGINT (preemption, Ctrl-C) as a request to stop, which all ranks agree on
    at the steps where they call agreed() together. A second Ctrl-C kills."""

    def __init__(self) -> None:
        self.received: str | None = None  # this rank's signal
        self.requested = False  # some rank's signal, as of the last agreed()
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self._handle)

    def _handle(self, signum: int, frame) -> None:
        self.received = signal.Signals(signum).name
        signal.signal(signal.SIGINT, signal.SIG_DFL)

    def agreed(self, device: torch.device) -> bool:
        """Whether any rank got a signal (a collective: every rank calls it at the same step)."""
        self.requested = any_rank(self.received is not None, device)
        return self.requested


class InputError(Exception):
    """Bad input from the user (a path, a file's contents, a name): the message names it and the fix."""


@contextlib.contextmanager
def exit_on_input_error(*errors: type[BaseException]):
    """Entry points' main(): an InputError (or one of `errors`) ends the program with its message
    and exit status 2, no traceback; anything else is a bug and keeps its traceback."""
    try:
        yield
    except (InputError, *errors) as e:
        print(f"error: {e}", file=sys.stderr)
        raise SystemExit(2) from None


# Command-line argument types shared by the entry points (argparse names the argument in its error).


def device_arg(text: str) -> str:
    """--device: cpu, cuda or cuda:N, and present on this machine."""
    try:
        device = torch.device(text)
    except RuntimeError:
        raise argparse.ArgumentTypeError(f"'{text}' is not a device; use cpu, cuda or cuda:N") from None
    if device.type not in ("cpu", "cuda"):
        raise argparse.ArgumentTypeError(f"'{text}': only cpu and cuda devices are supported")
    if device.type == "cuda" and not torch.cuda.is_available():
        raise argparse.ArgumentTypeError(f"'{text}': this machine has no usable CUDA GPU; use --device cpu")
    if device.type == "cuda" and device.index is not None and device.index >= torch.cuda.device_count():
        raise argparse.ArgumentTypeError(
            f"'{text}': this machine has {torch.cuda.device_count()} GPU(s), cuda:0 to "
            f"cuda:{torch.cuda.device_count() - 1}")
    return text


def at_least(minimum: float, kind: type = int) -> Callable[[str], float]:
    """An argparse type: a `kind` number no smaller than minimum."""
    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"'{text}' is not a {'whole number' if kind is int else 'number'}") from None
        if not value >= minimum:  # (NaN too)
            raise argparse.ArgumentTypeError(f"must be at least {minimum}, got {text}")
        return value

    return parse
