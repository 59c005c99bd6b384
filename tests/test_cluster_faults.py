"""
The faults a shared cluster produces, reproduced for real: a full file system (a small tmpfs where
this machine lets us mount one, and always a file-size limit, which makes torch's zip writer fail
the same way), a read-only out_dir, two runs started in one out_dir at once (two real processes),
and a checkpoint whose bytes changed after it was written (ckpt.pt, the path users pass on).
Also a scheduler's preemption (a real SIGTERM at a known step, to one process and to one rank of two)
and a file system without flock (NFS without a lock daemon: the kernel answers flock with ENOLCK,
here through a seccomp filter on the real system call).
"""

import array
import contextlib
import ctypes
import errno
import fcntl
import glob
import json
import os
import pickle
import platform
import re
import shutil
import signal
import socket
import subprocess
import sys
import termios
import time

import pytest
import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.api import CheckpointException

from checkpoint import CheckpointError, ShardedCheckpoints, _dcp_failure, load_latest, step_path
from conftest import PYTHON, REPO, run_train, tiny_run_args
from model import GPT, GPTConfig
from runlog import OWNER
from test_fsdp_train import worker_of_rank

SMALL = dict(max_iters=12, eval_interval=6, optimizer="mars")  # a ~100 KB checkpoint


@contextlib.contextmanager
def small_filesystem(folder: str, size: str):
    """A real tmpfs of `size` mounted at folder (needs root or CAP_SYS_ADMIN: skips otherwise)."""
    os.makedirs(folder)
    if subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", folder], capture_output=True).returncode:
        pytest.skip("cannot mount a tmpfs here (not root); the file-size-limit test covers the full disk")
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", folder], check=True)


def fill(folder: str, leave_bytes: int) -> str:
    """Fill the file system of folder up to leave_bytes of free space; returns the filler's path."""
    filler = os.path.join(folder, "filler")
    free = shutil.disk_usage(folder).free
    with open(filler, "wb") as f:
        with contextlib.suppress(OSError):
            f.write(b"\0" * max(free - leave_bytes, 0))
    return filler


def assert_named_error(proc: subprocess.CompletedProcess, *fragments: str) -> None:
    assert proc.returncode == 2, (proc.returncode, proc.stderr[-2000:])
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    for fragment in fragments:
        assert fragment in proc.stderr, (fragment, proc.stderr[-2000:])


def assert_run_intact(out: str, step: int) -> None:
    """config.json parses, no temporary file is left, and the newest checkpoint (step) verifies and loads."""
    json.load(open(os.path.join(out, "config.json")))
    assert not glob.glob(os.path.join(out, "*.tmp")), os.listdir(out)
    path, ckpt = load_latest(out)
    assert path == step_path(out, step) and ckpt["step"] == step


def run_under_file_size_limit(args: list[str], limit_bytes: int) -> subprocess.CompletedProcess:
    """train.py with RLIMIT_FSIZE (ulimit -f): a write past limit_bytes fails with EFBIG, as on a full disk."""
    command = f'ulimit -f {limit_bytes // 1024} && exec "$@"'
    return subprocess.run(["bash", "-c", command, "bash", sys.executable, str(REPO / "train.py"), *args],
                          capture_output=True, text=True, cwd=REPO, timeout=300,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})


def test_a_checkpoint_larger_than_the_file_size_limit_is_named_and_nothing_is_lost(tiny_dataset, tmp_path):
    out = str(tmp_path / "run")
    run_train(tiny_run_args(tiny_dataset, out, **{**SMALL, "max_iters": 6}))
    limit = os.path.getsize(step_path(out, 6)) // 2
    proc = run_under_file_size_limit(tiny_run_args(tiny_dataset, out, init_from="resume", **SMALL), limit)
    assert_named_error(proc, "could not write checkpoint", "File too large", "free disk space")
    assert_run_intact(out, 6)
    assert not os.path.exists(step_path(out, 12))
    run_train(tiny_run_args(tiny_dataset, out, init_from="resume", **SMALL))  # with room again, it goes on
    assert_run_intact(out, 12)


def test_a_full_file_system_during_a_save_is_named_and_nothing_is_lost(tiny_dataset, tmp_path):
    with small_filesystem(str(tmp_path / "disk"), "8m") as disk:
        out = os.path.join(disk, "run")
        run_train(tiny_run_args(tiny_dataset, out, **{**SMALL, "max_iters": 6}))
        filler = fill(disk, leave_bytes=os.path.getsize(step_path(out, 6)) // 2)
        proc = run_train(tiny_run_args(tiny_dataset, out, init_from="resume", **SMALL), check=False)
        assert_named_error(proc, "could not write checkpoint", "No space left on device", "free disk space")
        assert_run_intact(out, 6)
        os.remove(filler)
        run_train(tiny_run_args(tiny_dataset, out, init_from="resume", **SMALL))
        assert_run_intact(out, 12)


def test_a_full_file_system_at_start_keeps_config_json(tiny_dataset, tmp_path):
    with small_filesystem(str(tmp_path / "disk"), "8m") as disk:
        out = os.path.join(disk, "run")
        run_train(tiny_run_args(tiny_dataset, out, **{**SMALL, "max_iters": 6}))
        config_before = open(os.path.join(out, "config.json")).read()
        fill(disk, leave_bytes=0)
        proc = run_train(tiny_run_args(tiny_dataset, out, init_from="resume", **SMALL), check=False)
        assert_named_error(proc, "cannot write the run's outputs", "No space left on device")
        assert open(os.path.join(out, "config.json")).read() == config_before  # not truncated in place
        assert_run_intact(out, 6)


def test_a_read_only_out_dir_is_named(tiny_dataset, tmp_path):
    with small_filesystem(str(tmp_path / "disk"), "8m") as disk:
        out = os.path.join(disk, "run")
        run_train(tiny_run_args(tiny_dataset, out, **{**SMALL, "max_iters": 6}))
        subprocess.run(["mount", "-o", "remount,ro", disk], check=True)
        proc = run_train(tiny_run_args(tiny_dataset, out, init_from="resume", **SMALL), check=False)
        assert_named_error(proc, "Read-only file system", "make the folder writable")
        assert_run_intact(out, 6)


# ----------------------------------------------------------------------------- preemption

WRITE = {"x86_64": 1, "aarch64": 64}.get(platform.machine())  # write(2)'s system call number
F_SETPIPE_SZ, PIPE_SIZE = 1031, 4096


def blocked_writing_stdout(pid: int, pipe: int) -> bool:
    """Whether the process is stuck in write(2) to its stdout (fd 1) with the pipe full
    (/proc/PID/syscall: the call's number, then its arguments)."""
    try:
        with open(f"/proc/{pid}/syscall") as f:
            call = f.read().split()[:2]
    except OSError:
        return False
    pending = array.array("i", [0])
    fcntl.ioctl(pipe, termios.FIONREAD, pending)
    return call == [str(WRITE), "0x1"] and pending[0] > PIPE_SIZE - 512


@pytest.mark.skipif(WRITE is None, reason="write(2)'s number on this architecture is not listed")
@pytest.mark.parametrize("nproc", [0, 2], ids=["one_process", "torchrun_2_ranks"])
def test_sigterm_saves_within_two_steps_at_any_log_interval(tiny_dataset, tmp_path, nproc):
    """A scheduler's preemption leaves about 30 s from SIGTERM to SIGKILL: with log_interval=1000 the
    run must still save within two steps (one process: at the next step), exit 143 and resume. The
    signal comes at a known step: the run prints a line after each checkpoint (ckpt_interval=1) into
    a one-page pipe that the test stops reading, so rank 0 blocks in write(2) right after saving step N,
    before step N+1. Then SIGTERM goes to the process (one process) or to rank 1, which is waiting for
    rank 0 inside step N+1, and the test reads again."""
    out = str(tmp_path / "run")
    args = tiny_run_args(tiny_dataset, out, max_iters=100_000, eval_interval=100_000,
                         log_interval=1000, ckpt_interval=1, ckpt_keep=1, micro_batch_size=4)
    launcher = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}"]
    proc = subprocess.Popen([*(launcher if nproc else [sys.executable]), str(REPO / "train.py"), *args], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, bufsize=0,  # (no reading ahead)
                            env=dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1"))
    workers, seen = [], []
    try:
        fcntl.fcntl(proc.stdout.fileno(), F_SETPIPE_SZ, PIPE_SIZE)
        for line in proc.stdout:  # training is under way; then the test stops reading
            seen.append(line)
            if line.startswith(b"step 3: saved"):
                break
        assert proc.poll() is None, b"".join(seen).decode()
        workers = [worker_of_rank(proc.pid, rank) for rank in range(nproc)] if nproc else [proc.pid]
        deadline = time.time() + 120
        while not blocked_writing_stdout(workers[0], proc.stdout.fileno()):
            assert time.time() < deadline and proc.poll() is None, "rank 0 never blocked on its output"
            time.sleep(0.05)
        saved = torch.load(os.path.join(out, "ckpt.pt"), weights_only=True)["step"]  # N
        os.kill(workers[-1], signal.SIGTERM)
        output = (b"".join(seen) + proc.communicate(timeout=180)[0]).decode(errors="replace")
    finally:
        if proc.poll() is None:  # (today's code ran on to step 1000)
            for pid in [*workers, proc.pid]:
                with contextlib.suppress(ProcessLookupError, TypeError):
                    os.kill(pid, signal.SIGKILL)
            proc.wait()
    stopped = torch.load(os.path.join(out, "ckpt.pt"), weights_only=True)["step"]
    print(f"signal after step {saved}; saved and stopped at step {stopped}")
    assert saved < stopped <= saved + (2 if nproc else 1), output[-3000:]
    assert f"at step {stopped}; resume with --init_from=resume" in output, output[-3000:]
    if nproc:  # torchrun exits 1; each rank exits 143, unless torchrun ended it first (-15: it had left the loop)
        codes = set(re.findall(r"exitcode\s*: (-?\d+)", output))
        assert "143" in codes and codes <= {"143", "-15"}, output[-3000:]
    else:
        assert proc.returncode == 128 + signal.SIGTERM and "stopped by SIGTERM" in output, output[-3000:]
    run_train(tiny_run_args(tiny_dataset, out, max_iters=stopped + 2, init_from="resume",
                            eval_interval=100_000, micro_batch_size=4), nproc=nproc)
    assert torch.load(os.path.join(out, "ckpt.pt"), weights_only=True)["step"] == stopped + 2


# ----------------------------------------------------------------------------- teardown

CHECKED_TEARDOWN = """
import glob, json, os, sys
import train

def close_runtime_and_count_gloo_threads():
    close_runtime()
    names = [open(path).read().strip() for path in glob.glob(f"/proc/{os.getpid()}/task/*/comm")]
    with open(os.path.join(sys.argv[1], f"rank{os.environ['RANK']}.json"), "w") as f:
        json.dump([name for name in names if "gloo" in name], f)

close_runtime = train.close_runtime
train.close_runtime = close_runtime_and_count_gloo_threads
train.main(sys.argv[2:])
"""


@pytest.mark.parametrize("parallelism", [{}, {"data_parallel": "fsdp", "async_checkpoint": True}],
                         ids=["ddp", "fsdp_async_checkpoint"])
def test_a_finished_two_rank_run_joins_every_gloo_thread_in_close_runtime(tiny_dataset, tmp_path, parallelism):
    """The exit of a finished torchrun run is deterministic when close_runtime destroys every process group
    itself, with the GIL released, joining their threads (runtime.py, Teardown). Left to DDP's reducer, a
    group is destroyed later holding the GIL, which one of its threads may still need: a hang at exit; left
    alive into interpreter shutdown, such a thread aborts the process. Here train.py's own close_runtime,
    counting the gloo threads left when it returns, in a real 2-rank run (and one whose asynchronous saves
    have a group of their own)."""
    (tmp_path / "checked_teardown.py").write_text(CHECKED_TEARDOWN)
    args = tiny_run_args(tiny_dataset, str(tmp_path / "run"), max_iters=4, eval_interval=4, micro_batch_size=4,
                         **parallelism)
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
                           str(tmp_path / "checked_teardown.py"), str(tmp_path), *args], cwd=REPO, timeout=300,
                          capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    left = {rank: json.load(open(tmp_path / f"rank{rank}.json")) for rank in (0, 1)}
    assert left == {0: [], 1: []}, left
    save = r"step 4: writing \S+ckpt_0000004 \(training paused \d+\.\d s\)" if parallelism else \
        r"step 4: saved \S+ckpt_0000004\.pt in \d+\.\d s"
    assert re.search(save, proc.stdout), proc.stdout[-3000:]  # how long the save held training up


# ----------------------------------------------------------------------------- a file system without flock

FLOCK = {"x86_64": 73, "aarch64": 32}.get(platform.machine())  # flock(2)'s system call number


def flock_fails_with(error: int):
    """A preexec_fn: in the child (and whatever it starts) the kernel answers every flock(2) with `error`,
    as NFS without a lock daemon answers ENOLCK and Lustre mounted without flock ENOSYS. A seccomp
    filter: the fault at the system-call boundary, where the file system's would be."""

    class Instruction(ctypes.Structure):
        _fields_ = [("code", ctypes.c_uint16), ("jt", ctypes.c_uint8), ("jf", ctypes.c_uint8), ("k", ctypes.c_uint32)]

    class Program(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(Instruction))]

    LOAD_SYSCALL_NUMBER, JUMP_IF_EQUAL, RETURN = 0x20, 0x15, 0x06
    SECCOMP_RET_ERRNO, SECCOMP_RET_ALLOW = 0x00050000, 0x7FFF0000
    PR_SET_NO_NEW_PRIVS, PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 38, 22, 2

    def install() -> None:
        code = (Instruction * 4)(Instruction(LOAD_SYSCALL_NUMBER, 0, 0, 0),
                                 Instruction(JUMP_IF_EQUAL, 0, 1, FLOCK),
                                 Instruction(RETURN, 0, 0, SECCOMP_RET_ERRNO | error),
                                 Instruction(RETURN, 0, 0, SECCOMP_RET_ALLOW))
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) or libc.prctl(
                PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(Program(len(code), code)), 0, 0):
            raise OSError(ctypes.get_errno(), "cannot install the seccomp filter")

    return install


needs_seccomp = pytest.mark.skipif(FLOCK is None or sys.platform != "linux",
                                   reason="a seccomp filter on flock(2) needs Linux on x86_64 or aarch64")


@pytest.mark.parametrize("flock_error", [None, errno.ENOLCK], ids=["flock", "without_flock"])
def test_a_second_run_in_the_same_out_dir_is_refused_while_the_first_runs(tiny_dataset, tmp_path, flock_error):
    """Two real runs in one out_dir, where flock works and where it fails with ENOLCK (NFS without a lock
    daemon): then the run says so by name and claims out_dir with run.lock.owner (O_EXCL), which refuses
    the second run just as well and goes when the first ends."""
    if flock_error and FLOCK is None:
        pytest.skip("a seccomp filter on flock(2) needs Linux on x86_64 or aarch64")
    out, host = str(tmp_path / "run"), socket.gethostname()
    args = tiny_run_args(tiny_dataset, out, max_iters=1_000_000, lr_decay_iters=100, eval_interval=50,
                         log_interval=5)
    train = [sys.executable, str(REPO / "train.py")]
    options = dict(cwd=REPO, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"},
                   preexec_fn=flock_fails_with(flock_error) if flock_error else None)
    first = subprocess.Popen(train + args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, **options)
    try:
        metrics = os.path.join(out, "metrics.jsonl")
        deadline = time.time() + 120
        while not (os.path.exists(metrics) and os.path.getsize(metrics)) and first.poll() is None:
            assert time.time() < deadline, "the first run never logged"
            time.sleep(0.2)
        assert first.poll() is None, first.communicate()[1][-3000:]
        first.send_signal(signal.SIGSTOP)  # (it holds out_dir stopped as running, with no CPU while the second starts)
        if flock_error:
            owner = json.load(open(os.path.join(out, OWNER)))
            assert (owner["pid"], owner["host"]) == (first.pid, host), owner
        # (the runs after the first are refused or resume by themselves: where the kernel's flock works, the
        # tests' preloaded python3 starts them; a seccomp filter must be installed in the process that runs)
        again = train if flock_error else [PYTHON, str(REPO / "train.py")]
        second = subprocess.run(again + args, capture_output=True, timeout=300, **options)
        fix = f"delete {os.path.join(out, OWNER)} and start again" if flock_error else "choose another out_dir"
        assert_named_error(second, f"{out} is in use by another run (pid {first.pid} on {host}", fix)
    finally:
        first.send_signal(signal.SIGCONT)
        first.send_signal(signal.SIGTERM)  # preemption: the first run saves and stops
        _, stderr = first.communicate(timeout=120)
    assert first.returncode == 128 + signal.SIGTERM, stderr[-3000:]
    rows = [json.loads(line) for line in open(os.path.join(out, "metrics.jsonl"))]  # every row whole
    assert rows and json.load(open(os.path.join(out, "config.json")))["argv"][1:] == args
    if flock_error:
        assert f"warning: cannot lock {os.path.join(out, 'run.lock')} (No locks available)" in stderr, stderr[-3000:]
        assert not os.path.exists(os.path.join(out, OWNER))  # the claim went with the run
    args = tiny_run_args(tiny_dataset, out, init_from="resume", max_iters=rows[-1]["step"] + 10, lr_decay_iters=100,
                         eval_interval=50, log_interval=5)
    resume = subprocess.run(again + args, capture_output=True, timeout=300, **options)
    assert resume.returncode == 0, resume.stderr[-3000:]  # the lock went with the process


CLAIM = """
import json, os, sys
from runlog import OWNER, lock_out_dir
from errors import InputError
for out in sys.argv[1:]:
    try:
        lock_out_dir(out)
        print(json.dumps(["claimed", json.load(open(os.path.join(out, OWNER))), os.getpid()]))
    except InputError as e:
        print(json.dumps(["refused", str(e), os.getpid()]))
"""


@needs_seccomp
def test_without_flock_a_stale_claim_of_this_host_is_taken_over_and_another_hosts_is_named(tmp_path):
    """run.lock.owner left by a run that was killed: on this host its pid is gone (or is another process
    now: a container restarted on the node), and the claim is taken over with a warning; from another
    host nothing can be checked, and the run is refused with the file to delete."""
    host, finished = socket.gethostname(), subprocess.Popen(["true"])
    finished.wait()  # (its pid is no process now)
    claims = {"dead_pid": dict(pid=finished.pid, host=host, started=None),
              "reused_pid": dict(pid=os.getpid(), host=host, started=1),  # alive, but started at another time
              "other_host": dict(pid=os.getpid(), host="node-elsewhere", started=None),
              "none": None}
    for name, claim in claims.items():
        os.makedirs(tmp_path / name)
        if claim:
            (tmp_path / name / OWNER).write_text(json.dumps(claim))
    proc = subprocess.run([sys.executable, "-c", CLAIM, *(str(tmp_path / name) for name in claims)], cwd=REPO,
                          text=True, capture_output=True, timeout=120, preexec_fn=flock_fails_with(errno.ENOSYS))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stderr.count("(Function not implemented): this file system does not support flock") == 4, proc.stderr
    results = dict(zip(claims, (json.loads(line) for line in proc.stdout.splitlines())))
    for name in ("dead_pid", "reused_pid", "none"):
        outcome, owner, pid = results[name]
        assert outcome == "claimed" and (owner["pid"], owner["host"]) == (pid, host), (name, results)
    assert proc.stderr.count("which is no longer running (a run that was killed): taking the out_dir over") == 2
    outcome, message, _ = results["other_host"]
    assert outcome == "refused" and f"pid {os.getpid()} on node-elsewhere" in message, message
    assert f"delete {tmp_path / 'other_host' / OWNER} and start again" in message, message
    assert not any((tmp_path / name / OWNER).exists() for name in ("dead_pid", "reused_pid", "none"))  # released


def test_a_full_file_system_during_a_sharded_save_is_named_and_nothing_is_lost(tiny_dataset, tmp_path):
    """The same under data_parallel=fsdp over 2 ranks: DCP's failed write named on every rank, the
    half-written folder removed, the previous checkpoint verifying, and the run resumable."""
    sharded = dict(SMALL, data_parallel="fsdp", micro_batch_size=4)
    with small_filesystem(str(tmp_path / "disk"), "8m") as disk:
        out = os.path.join(disk, "run")
        run_train(tiny_run_args(tiny_dataset, out, **{**sharded, "max_iters": 6}), nproc=2)
        manifest = json.load(open(os.path.join(out, "ckpt_0000006", "manifest.json")))["files"]
        filler = fill(disk, leave_bytes=sum(record["bytes"] for record in manifest.values()) // 2)
        proc = run_train(tiny_run_args(tiny_dataset, out, init_from="resume", **sharded), nproc=2, check=False)
        workers = proc.stderr.split("failed (exitcode: 2)")[0]  # torchrun's own report of them follows
        assert proc.returncode != 0 and "Traceback" not in workers, proc.stderr[-3000:]
        # each rank: a rank's own full disk, or the other rank's short write, whose cause did not travel
        final = os.path.join(out, "ckpt_0000012")
        named = [f"error: could not write checkpoint {final} ({why}); free disk space" for why in
                 ("No space left on device", "the file took fewer bytes than were written: a full disk, a quota or "
                                             "a file-size limit")]
        assert sum(workers.count(text) for text in named) == 2, workers[-3000:]
        path, ckpt = load_latest(out)
        assert path.endswith("ckpt_0000006") and ckpt["step"] == 6 and not glob.glob(os.path.join(out, "*.tmp"))
        os.remove(filler)
        run_train(tiny_run_args(tiny_dataset, out, init_from="resume", **sharded), nproc=2)
        assert load_latest(out)[1]["step"] == 12


FILE_SIZE_LIMITED_SAVE = """
import pickle, resource, signal, sys
import torch, torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.api import CheckpointException
from checkpoint.sharded import _dcp_failure
from model import GPT, GPTConfig
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # (a write past the limit then fails with EFBIG, as under ulimit -f)
resource.setrlimit(resource.RLIMIT_FSIZE, (40_000, 40_000))
model = GPT(GPTConfig(block_size=8, vocab_size=256, n_layer=1, n_head=1, n_embd=64))  # tensors of 64 KB
try:
    dcp.save(model.state_dict(), storage_writer=dcp.FileSystemWriter(sys.argv[1]))
except CheckpointException as e:
    (cause, _), = e.failures.values()
    print(_dcp_failure(e))
    print(_dcp_failure(CheckpointException("save", {1: (pickle.loads(pickle.dumps(cause)), None)})))
"""


def test_a_file_size_limit_during_a_sharded_save_is_not_named_a_full_disk(tmp_path):
    """A real file-size limit (RLIMIT_FSIZE, in a process of its own) on DCP's write: this rank's error names it
    (File too large); the same error reaching rank 0 from another rank, pickled without its cause, is named a short
    write (a full disk, a quota or a file-size limit), never 'No space left on device'."""
    proc = subprocess.run([PYTHON, "-c", FILE_SIZE_LIMITED_SAVE, str(tmp_path / "ckpt")], capture_output=True,
                          text=True, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=120)
    own, other = proc.stdout.rstrip("\n").splitlines()[-2:]
    assert own.startswith(" (File too large); free disk space"), proc.stdout + proc.stderr
    assert "file-size limit" in other and "No space left" not in other, other


def test_a_full_disk_inside_torchs_zip_writer_during_a_sharded_save_is_named(tmp_path):
    """DCP writes each tensor with torch.save, whose zip writer reports a full disk as a RuntimeError
    ("unexpected pos ...") with the file's OSError only as its context: which of the two a rank gets
    depends on where its write meets the end of the disk. The RuntimeError is named as a full disk too."""
    model = GPT(GPTConfig(block_size=8, vocab_size=256, n_layer=1, n_head=1, n_embd=64))  # tensors of 64 KB
    optimizer = torch.optim.AdamW(model.parameters())
    with small_filesystem(str(tmp_path / "disk"), "4m") as disk:
        fill(disk, leave_bytes=40_000)
        with pytest.raises(CheckpointException) as raw:  # the fault as DCP reports it, without us
            dcp.save(model.state_dict(), storage_writer=dcp.FileSystemWriter(os.path.join(disk, "raw")))
        (cause, _), = raw.value.failures.values()
        assert isinstance(cause, RuntimeError) and isinstance(cause.__context__, OSError), repr(cause)
        # Another rank's failure reaches rank 0 pickled by DCP's gather, which drops the OSError behind it.
        from_another_rank = pickle.loads(pickle.dumps(cause))
        assert from_another_rank.__context__ is None
        named_there = _dcp_failure(CheckpointException("save", {1: (from_another_rank, None)}))
        assert named_there.startswith(" (the file took fewer bytes than were written: a full disk, a quota or a "
                                      "file-size limit); free disk space"), named_there
        shutil.rmtree(os.path.join(disk, "raw"))
        out = os.path.join(disk, "run")
        os.makedirs(out)
        with pytest.raises(CheckpointError) as named:
            ShardedCheckpoints(out, keep=1, keep_best=False, asynchronous=False).save(
                model, optimizer, dict(step=5), best=False)
        final = os.path.join(out, "ckpt_0000005")
        assert str(named.value).startswith(f"could not write checkpoint {final} (No space left on device); "
                                           "free disk space"), str(named.value)
        assert os.listdir(out) == []  # the half-written folder removed
