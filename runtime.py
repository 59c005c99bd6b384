"""
Where a run executes: the process's place in torch.distributed, its device and
precision, and the stop signal every rank agrees on. Used by train.py; eval/
takes autocast_context() from here too.
"""

import argparse
import contextlib
import ctypes
import datetime
import gc
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import ContextManager

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import DeviceMesh

from errors import InputError
from stop_signals import EARLY_SIGNALS, REQUEUE_SIGNAL


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


def device_type(device_setting: str) -> str:
    """What a device setting (auto | cpu | cuda | cuda:N) runs on here: 'cuda' or 'cpu' (auto: a GPU if any)."""
    if device_setting == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return "cuda" if device_setting.startswith("cuda") else "cpu"


def init_runtime(device_setting: str) -> Runtime:
    """Join the process group when torchrun started us (RANK/LOCAL_RANK/WORLD_SIZE set),
    NCCL on GPUs and gloo on CPU. device_setting: auto | cpu | cuda | cuda:N, and present on this
    machine (an InputError naming it otherwise, before any work)."""
    if device_setting != "auto":
        try:
            check_device(device_setting)
        except InputError as e:
            raise InputError(f"config key 'device': {e}") from None
    use_cuda = device_type(device_setting) == "cuda"
    adopt_slurm_ranks()
    if "RANK" not in os.environ:
        device = torch.device((device_setting if device_setting != "auto" else "cuda") if use_cuda else "cpu")
        return Runtime(0, 0, 1, device)
    rank, local_rank, world_size = (int(os.environ[k]) for k in ("RANK", "LOCAL_RANK", "WORLD_SIZE"))
    device = torch.device(f"cuda:{local_rank}" if use_cuda else "cpu")
    if use_cuda:
        torch.cuda.set_device(device)
    # Generous timeout: the other ranks wait in a collective while rank 0 writes a checkpoint
    # (tens of GB for XL with MARS) to a possibly slow shared filesystem.
    join_process_group(backend="nccl" if use_cuda else "gloo", device_id=device if use_cuda else None,
                       timeout=datetime.timedelta(minutes=60))
    return Runtime(rank, local_rank, world_size, device)


def adopt_slurm_ranks() -> None:
    """When srun started one task per rank (train.py without torchrun: `srun python train.py ...`, so that
    SLURM's signals reach every rank), torchrun's variables from SLURM's: the rank, the world size, the
    rank on the node, and the rendezvous at the step's first node, on a port of the job's own."""
    if "RANK" in os.environ or int(os.environ.get("SLURM_STEP_NUM_TASKS", "1")) <= 1:
        return
    first_node = subprocess.run(["scontrol", "show", "hostnames", os.environ["SLURM_STEP_NODELIST"]],
                                capture_output=True, text=True, check=True).stdout.split()[0]
    # LOCAL_RANK picks the GPU: the task's place on its node, or 0 when SLURM shows each task its own GPU alone
    # (--gpus-per-task=1 or --gpu-bind: CUDA_VISIBLE_DEVICES is then that one)
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "")
    one_gpu = visible != "" and "," not in visible
    os.environ.update(RANK=os.environ["SLURM_PROCID"], WORLD_SIZE=os.environ["SLURM_STEP_NUM_TASKS"],
                      LOCAL_RANK="0" if one_gpu else os.environ["SLURM_LOCALID"])
    os.environ.setdefault("MASTER_ADDR", first_node)
    os.environ.setdefault("MASTER_PORT", str(20000 + int(os.environ["SLURM_JOB_ID"]) % 20000))


# Teardown. A gloo thread that has finished a collective frees it afterwards, and freeing tensors that
# Python also holds takes the GIL. So a group must not be destroyed (which waits for its threads) by a
# thread holding the GIL, nor outlive the interpreter's shutdown (where a thread asking for the GIL
# aborts the process: "terminate called without an active exception"). destroy_process_group releases
# the GIL while it destroys a group, provided it drops the group's last reference: nothing else may
# hold one (DDP's reducer, freed with the GIL held: a hang at exit, seen under load; torch._dynamo,
# imported after the group exists: join_process_group; FSDP's modules, until train.train has let the
# run go; FSDP's device mesh, which DTensor's caches keep: close_runtime).


def join_process_group(backend: str, **kwargs) -> None:
    """dist.init_process_group (train.py through init_runtime, the tests' torchrun scripts directly), after
    importing torch._dynamo: imported later (a torch.optim step does), it keeps references to the default
    group that outlive destroy_process_group, and the group's threads live on into interpreter shutdown."""
    import torch._dynamo  # noqa: F401

    dist.init_process_group(backend, **kwargs)


def close_runtime() -> None:
    """The end of a process that finished its distributed work, on every rank, after its asynchronous work
    was waited for (an async checkpoint's writes, StopSignal.close) and DDP's wrapper freed: a barrier, so
    that no rank tears down while another still talks to it, then every process group destroyed, their
    threads joined. Only on success (as torchtitan): after an exception the other ranks may never reach
    the barrier, so the exception propagates and the process exits nonzero without it."""
    if dist.is_initialized():
        dist.barrier()
        # A sharded run's device mesh outlives the run in DTensor's caches, and holds its process group in a
        # registry of its own: emptied, destroy_process_group drops the group's last reference
        # (DeviceMesh in the type's MRO, not isinstance: DeviceMesh's metaclass's isinstance reads attributes of
        # every object, and torch.distributed.reduce_op's warns "deprecated" on every rank)
        for mesh in [o for o in gc.get_objects() if DeviceMesh in type(o).__mro__]:
            getattr(mesh, "_pg_registry", {}).clear()
        dist.destroy_process_group()


def all_reduce_sum(t: torch.Tensor) -> torch.Tensor:
    """t summed over ranks, in place (t itself without torch.distributed)."""
    if dist.is_initialized():
        dist.all_reduce(t)
    return t


def broadcast_from_main(obj: object) -> object:
    """Rank 0's obj (picklable) on every rank (a collective; obj itself without torch.distributed)."""
    if not dist.is_initialized():
        return obj
    holder = [obj]
    dist.broadcast_object_list(holder, src=0)
    return holder[0]


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


# The stop requests a run agrees on, by priority: a stop outranks a requeue (scancel during a pending requeue).
NO_STOP, REQUEUE, STOP = 0, 1, 2
class StopSignal:
    """SIGTERM/SIGINT (a user's scancel, Ctrl-C) as a request to stop, and SIGUSR1 (SLURM's warning before
    the time limit, or a preemption) as a request to stop and be requeued, which every rank agrees on
    within two steps of the signal, without stalling a step. A scheduler gives about 30 s from SIGTERM to
    SIGKILL, too little to wait for a log step. The loop calls step_done() after each step, on every rank:
    one process reads its own flag; under torch.distributed each call starts an asynchronous all-reduce
    summing the ranks' requests and reads the previous call's, so every rank gets the same answer at the
    same step (and the count of ranks a signal reached, which shows a job script that forwards signals to
    some ranks only). The flags are a CPU tensor reduced over a gloo group of its own, so on GPUs it
    never syncs the host with the device or waits in a queue behind training's NCCL collectives;
    waited a step after it started, a few bytes, it has long arrived. A second Ctrl-C kills."""

    def __init__(self) -> None:
        self.received: str | None = None  # this rank's signal (a stop's, once one came)
        self.agreed = NO_STOP  # every rank's request, as of the last step_done()
        self.ranks_signalled = 0  # how many ranks got a signal themselves, as of the last agreement read
        self.group = dist.new_group(backend="gloo") if dist.is_initialized() else None  # (a collective)
        self.pending: tuple[dist.Work, torch.Tensor] | None = None  # the all-reduce of the last step's flags
        for sig in (signal.SIGTERM, signal.SIGINT, REQUEUE_SIGNAL):
            signal.signal(sig, self._handle)
        for name in EARLY_SIGNALS:
            self._handle(signal.Signals[name].value, None)
        EARLY_SIGNALS.clear()

    def _handle(self, signum: int, frame) -> None:
        if signum != REQUEUE_SIGNAL or self.received is None:
            self.received = signal.Signals(signum).name
        signal.signal(signal.SIGINT, signal.SIG_DFL)

    def _request(self) -> int:
        if self.received is None:
            return NO_STOP
        return REQUEUE if self.received == REQUEUE_SIGNAL.name else STOP

    def step_done(self) -> bool:
        """Whether to stop now: some rank got a signal before the previous call (one process: before
        this one). Every rank calls it once after each step."""
        if self.group is None:
            self.agreed = self._request()
            self.ranks_signalled = int(self.received is not None)
            return self.requested
        counts = self._wait_for_pending()
        if counts is not None:
            stops, requeues = counts
            self.agreed = STOP if stops else REQUEUE if requeues else NO_STOP
        request = self._request()
        # summed over ranks: how many ask to stop, how many to be requeued (a stop outranks a requeue)
        flags = torch.tensor([request == STOP, request == REQUEUE], dtype=torch.int32)
        self.pending = (dist.all_reduce(flags, group=self.group, async_op=True), flags)
        return self.requested

    def _wait_for_pending(self) -> tuple[int, int] | None:
        """The pending all-reduce's sums (ranks asking to stop, ranks asking to be requeued), counted into
        ranks_signalled; None when none is pending."""
        if self.pending is None:
            return None
        work, flags = self.pending
        work.wait()
        stops, requeues = flags.tolist()
        self.ranks_signalled = max(self.ranks_signalled, stops + requeues)
        return stops, requeues

    @property
    def requested(self) -> bool:
        return self.agreed != NO_STOP

    @property
    def requeue(self) -> bool:
        """Whether the run stops to be requeued (some rank got SIGUSR1, none a stop)."""
        return self.agreed == REQUEUE

    def close(self) -> None:
        """Read the last all-reduce (a rank whose signal came a moment after the others' is counted in
        ranks_signalled there) and let go of the group (before close_runtime, which destroys it: the signal
        handlers keep this object, so its group would otherwise live on into interpreter shutdown). The
        agreement itself stays as the loop last read it."""
        self._wait_for_pending()
        self.pending, self.group = None, None

    @property
    def exit_status(self) -> int:
        """The run's exit status: 0 when it finished, else 128 + the signal's number (143 for SIGTERM, 130 for
        Ctrl-C, 138 for SIGUSR1; SIGTERM's on a rank stopped by another's signal), as a shell reports a
        process the signal ended: a job wrapper tells a preempted run, to resume, from a finished one."""
        if not self.requested:
            return 0
        if self.requeue:
            return 128 + REQUEUE_SIGNAL.value
        name = self.received if self.received and self.received != REQUEUE_SIGNAL.name else "SIGTERM"
        return 128 + signal.Signals[name].value


def check_slurm_restarts(max_requeues: int) -> None:
    """Refuse a SLURM job's life after more than max_requeues restarts. A run requeues itself at most that
    often, so more restarts are requeues of SLURM's own (a node failure, a cluster's RequeueExit), which a
    run that fails at every start would repeat for ever."""
    job, restarts = os.environ.get("SLURM_JOB_ID"), int(os.environ.get("SLURM_RESTART_COUNT", "0"))
    if job and restarts > max_requeues:
        raise InputError(f"SLURM job {job} has been restarted {restarts} times, more than max_requeues="
                         f"{max_requeues}: its log says why each life ended; the checkpoints are kept: fix that "
                         "cause, then submit the job again (--init_from=auto resumes it) or raise max_requeues")


def requeue_slurm_job(max_requeues: int, log: Callable[[str], None]) -> bool:
    """Requeue the SLURM job this run is (its own task, for a task of a job array: the array's id would
    requeue every task), so that it continues from the checkpoint just saved when it starts again; False,
    with the reason logged, outside SLURM, after max_requeues requeues, or when scontrol refuses."""
    job = os.environ.get("SLURM_JOB_ID")
    if not job:
        return False
    restarts = int(os.environ.get("SLURM_RESTART_COUNT", "0"))
    if restarts >= max_requeues:
        log(f"not requeueing SLURM job {job}: it has been requeued {restarts} times (max_requeues={max_requeues}), "
            "so a requeue would likely stop here again; the checkpoint is saved: raise max_requeues or the time "
            "limit and submit the job again (--init_from=auto resumes it)")
        return False
    array, task = os.environ.get("SLURM_ARRAY_JOB_ID"), os.environ.get("SLURM_ARRAY_TASK_ID")
    target = f"{array}_{task}" if array and task else job
    try:
        proc = subprocess.run(["scontrol", "requeue", target], capture_output=True, text=True, timeout=60)
        error = proc.stderr.strip() if proc.returncode else None
    except (OSError, subprocess.TimeoutExpired) as e:
        error = str(e)
    if error:
        log(f"could not requeue SLURM job {target} ({error}); the checkpoint is saved: submit the job again "
            "(--init_from=auto resumes it), and submit with --requeue")
        return False
    log(f"requeued SLURM job {target} (requeue {restarts + 1} of at most {max_requeues}): it resumes from the "
        "checkpoint when it starts again (--init_from=auto)")
    return True


class Watchdog:
    """Ends a distributed run whose loop stops making progress. A frozen rank (a hung node or
    filesystem, SIGSTOP) leaves the others waiting in a collective, silently, for the process group's
    timeout, which is 60 minutes because rank 0 may take that long to write a checkpoint. So the loop
    calls beat() once a step; when `timeout` seconds pass without one, this process prints the step it
    is stuck after and exits with status 1 (torchrun then ends the job). Checkpoint writes run inside
    paused(), keeping the 60 minutes. Armed from the first beat(): what comes before it has the
    group's timeout alone. timeout 0 never fires."""

    def __init__(self, timeout: float, rank: int) -> None:
        self.timeout, self.rank = timeout, rank
        self.step: int | None = None  # steps done at the last beat; None while unarmed or paused
        self.since = time.monotonic()
        self.closed = threading.Event()
        if timeout > 0:
            threading.Thread(target=self._watch, name="watchdog", daemon=True).start()

    def beat(self, step: int) -> None:
        self.since = time.monotonic()
        self.step = step

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        step, self.step = self.step, None
        try:
            yield
        finally:
            if step is not None:
                self.beat(step)

    def close(self) -> None:
        self.closed.set()

    def _watch(self) -> None:
        # (A thread: the main thread is blocked inside the collective, out of Python's reach.)
        while not self.closed.wait(min(self.timeout / 10, 1.0)):
            step = self.step
            if step is not None and time.monotonic() - self.since > self.timeout:
                print(f"error: rank {self.rank}: no step completed for {self.timeout:g} s after step {step} "
                      "(step_timeout): another rank is most likely frozen or dead and this one waits for it in a "
                      "collective; stopping. Check the other ranks' nodes and logs, then resume with "
                      "--init_from=resume (or raise step_timeout if a step really takes this long)",
                      file=sys.stderr, flush=True)
                os._exit(1)  # sys.exit cannot unwind a thread stuck in C++; the checkpoints are complete files


# The device's command-line argument type (it asks torch; errors.py holds the others).


def check_device(text: str) -> str:
    """text when it names a device this machine has (cpu, cuda or cuda:N); else an InputError saying why
    (train.py's device setting and the other entry points' --device)."""
    try:
        device = torch.device(text)
    except RuntimeError:
        raise InputError(f"'{text}' is not a device; use cpu, cuda or cuda:N") from None
    if device.type not in ("cpu", "cuda"):
        raise InputError(f"'{text}': only cpu and cuda devices are supported")
    if device.type == "cuda" and not torch.cuda.is_available():
        raise InputError(f"'{text}': this machine has no usable CUDA GPU; use cpu")
    if device.type == "cuda" and device.index is not None and device.index >= torch.cuda.device_count():
        raise InputError(f"'{text}': this machine has {torch.cuda.device_count()} GPU(s), cuda:0 to "
                         f"cuda:{torch.cuda.device_count() - 1}")
    return text


def device_arg(text: str) -> str:
    """--device: cpu, cuda or cuda:N, and present on this machine."""
    try:
        return check_device(text)
    except InputError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
