"""
A run's outputs: config.json (the resolved config and where it ran), metrics.jsonl
(one JSON row per log or eval step), the console (a tqdm bar on a terminal) and,
optionally, Weights & Biases. One RunLog per process; on ranks other than 0 it
exists and does nothing, so the training loop never asks which rank it is on.
"""

import atexit
import contextlib
import fcntl
import hashlib
import json
import os
import socket
import sys
from typing import IO

from files import atomic_write
from errors import InputError, write_failure

LOCK = "run.lock"  # held (flock) by the run writing this out_dir (lock_out_dir)
OWNER = "run.lock.owner"  # where flock fails: created by the run writing this out_dir, removed when it ends


def unwritable(out_dir: str, e: OSError) -> InputError:
    return InputError(f"cannot write the run's outputs in {out_dir} {write_failure(e)}")


def in_use(out_dir: str, holder: str, fix: str = "") -> InputError:
    return InputError(f"{out_dir} is in use by another run ({holder}): two runs in one out_dir would mix their "
                      f"checkpoints and logs. Wait for it to end, or choose another out_dir{fix}")


def lock_out_dir(out_dir: str) -> IO[str]:
    """An exclusive claim on out_dir for as long as this process holds the returned file: two runs writing
    one out_dir would mix their checkpoints, config.json and metrics rows. A flock on out_dir/run.lock,
    which the kernel releases when the process ends, however it ends. Where the file system has no flock
    (NFS without a lock daemon: ENOLCK; Lustre mounted without flock: ENOSYS), a warning saying so and
    claim_without_flock(), which catches the common case: a second run started while the first lives."""
    try:
        os.makedirs(out_dir, exist_ok=True)
        lock = open(os.path.join(out_dir, LOCK), "a+")
    except OSError as e:
        raise unwritable(out_dir, e) from None
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        lock.seek(0)
        holder = lock.read().strip() or "another process"
        lock.close()
        raise in_use(out_dir, holder) from None
    except OSError as e:
        print(f"warning: cannot lock {lock.name} ({e.strerror or e}): this file system does not support flock "
              "(NFS without a lock daemon, Lustre mounted without -o flock). Claiming the out_dir with "
              f"{os.path.join(out_dir, OWNER)} instead, which names this process and goes when it ends; a "
              "run killed on another node leaves it behind, to delete by hand", file=sys.stderr)
        claim_without_flock(out_dir)
        return lock
    lock.seek(0)
    lock.truncate()
    lock.write(f"pid {os.getpid()} on {socket.gethostname()}\n")
    lock.flush()
    return lock


def claim_without_flock(out_dir: str) -> None:
    """Create out_dir/run.lock.owner, exclusively (O_EXCL, atomic on NFS and Lustre), naming this process,
    and remove it at exit. One that exists refuses the run, unless it is stale: its process is gone from
    this host (a run killed by SIGKILL or the OOM killer), and then it is taken over, with a warning.
    A process on another host cannot be checked from here: the message names the file to delete."""
    path, me = os.path.join(out_dir, OWNER), process_identity(os.getpid())
    while True:
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            owner = read_owner(path)
            if not owner_is_gone(owner, me):
                holder = f"pid {owner['pid']} on {owner['host']}" if owner else "a run starting, or an unreadable claim"
                raise in_use(out_dir, f"{holder}, per {path}; this file system has no flock",
                             f". If no run is using it (one killed on another node), delete {path} and start "
                             "again") from None
            print(f"warning: {path} names pid {owner['pid']} on this host, which is no longer running (a run that "
                  "was killed): taking the out_dir over", file=sys.stderr)
            try:
                os.remove(path)
            except FileNotFoundError:  # another run took it over first: look again
                pass
            except OSError as e:
                raise unwritable(out_dir, e) from None
            continue
        except OSError as e:
            raise unwritable(out_dir, e) from None
        with os.fdopen(fd, "w") as f:
            json.dump(me, f)
        atexit.register(release_claim, path, me)
        return


def process_identity(pid: int) -> dict:
    """pid, host and the process's start time (Linux: clock ticks since boot; None elsewhere), which tells
    a live process from another that got its pid later (a container restarted on the same node)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            started = int(f.read().rsplit(")", 1)[1].split()[19])
    except (OSError, ValueError, IndexError):
        started = None
    return dict(pid=pid, host=socket.gethostname(), started=started)


def read_owner(path: str) -> dict | None:
    """The process a run.lock.owner names; None when it is unreadable or still being written."""
    try:
        with open(path) as f:
            owner = json.load(f)
        return owner if {"pid", "host"} <= owner.keys() else None
    except (OSError, ValueError, AttributeError):
        return None


def owner_is_gone(owner: dict | None, me: dict) -> bool:
    """Whether the owner is a process of this host that no longer runs (or pid reuse: another process now)."""
    if owner is None or owner["host"] != me["host"]:
        return False
    if owner["pid"] == me["pid"]:
        return True  # (it cannot be this process: it has not written the file yet)
    try:
        os.kill(owner["pid"], 0)
    except ProcessLookupError:
        return True
    except PermissionError:  # another user's process
        pass
    started = process_identity(owner["pid"])["started"]
    return None not in (started, owner.get("started")) and started != owner["started"]


def release_claim(path: str, me: dict) -> None:
    if read_owner(path) == me:  # (never another run's)
        with contextlib.suppress(OSError):  # (at exit: a file system gone read-only leaves it, to take over)
            os.remove(path)


class RunLog:
    def __init__(self, enabled: bool):
        """enabled: whether this process writes (rank 0); the console works before open()."""
        self.enabled = enabled
        self.metrics_file = None
        self.wandb = None
        self.progress = None

    def open(self, out_dir: str, run_info: dict, resume: bool, total_steps: int, start_step: int,
             wandb_project: str = "", wandb_run_name: str = "") -> None:
        """Write config.json (run_info) and open metrics.jsonl (appended to on resume), W&B when a
        project is given, and a progress bar on a terminal."""
        if not self.enabled:
            return
        try:
            os.makedirs(out_dir, exist_ok=True)
            with atomic_write(os.path.join(out_dir, "config.json"), "w") as f:  # (a full disk keeps the old one)
                json.dump(run_info, f, indent=2)
            self.metrics_file = open(os.path.join(out_dir, "metrics.jsonl"), "a" if resume else "w")
        except OSError as e:
            raise unwritable(out_dir, e) from None
        self.print(json.dumps(run_info["config"], indent=1))
        if wandb_project:
            import wandb

            # One W&B run per out_dir, so a resumed run continues its curves.
            run_id = hashlib.sha1(os.path.abspath(out_dir).encode()).hexdigest()[:16]
            self.wandb = wandb.init(project=wandb_project, name=wandb_run_name or None, config=run_info,
                                    id=run_id, resume="allow")
        if sys.stderr.isatty():
            from tqdm import tqdm

            self.progress = tqdm(total=total_steps, initial=start_step, unit="step", dynamic_ncols=True)

    def print(self, line: str) -> None:
        """A line on the console, flushed: a log file (SLURM's output, nohup's) shows it now, not a buffer later."""
        if not self.enabled:
            return
        if self.progress is not None:
            self.progress.write(line)
        else:
            print(line, flush=True)

    def write(self, row: dict) -> None:
        """One metrics row (it has a 'type' and a 'step'), to metrics.jsonl and W&B."""
        if self.metrics_file is not None:
            try:
                self.metrics_file.write(json.dumps(row) + "\n")
                self.metrics_file.flush()
            except OSError as e:
                raise InputError(f"cannot append to {self.metrics_file.name} {write_failure(e)}; then resume with "
                                 "--init_from=resume (the checkpoints are untouched)") from None
            if self.wandb is not None:
                self.wandb.log(row, step=row["step"])

    def advance(self, steps: int = 1) -> None:
        if self.progress is not None:
            self.progress.update(steps)

    def close(self) -> None:
        if self.progress is not None:
            self.progress.close()
        if self.metrics_file is not None:
            self.metrics_file.close()
        if self.wandb is not None:
            self.wandb.finish()
