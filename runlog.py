"""
A run's outputs: config.json (the resolved config and where it ran), metrics.jsonl
(one JSON row per log or eval step), the console (a tqdm bar on a terminal) and,
optionally, Weights & Biases. One RunLog per process; on ranks other than 0 it
exists and does nothing, so the training loop never asks which rank it is on.
"""

import fcntl
import hashlib
import json
import os
import socket
import sys
from typing import IO

from data.shards import atomic_write
from runtime import InputError, write_failure

LOCK = "run.lock"  # held by the run writing this out_dir (lock_out_dir)


def unwritable(out_dir: str, e: OSError) -> InputError:
    return InputError(f"cannot write the run's outputs in {out_dir} {write_failure(e)}")


def lock_out_dir(out_dir: str) -> IO[str]:
    """An exclusive lock on out_dir for as long as this process holds the returned file (flock on
    out_dir/run.lock; the kernel releases it when the process ends, however it ends): two runs
    writing one out_dir would mix their checkpoints, config.json and metrics rows."""
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
        raise InputError(f"{out_dir} is in use by another run ({holder}): two runs in one out_dir would mix their "
                         "checkpoints and logs. Wait for it to end, or choose another out_dir") from None
    lock.seek(0)
    lock.truncate()
    lock.write(f"pid {os.getpid()} on {socket.gethostname()}\n")
    lock.flush()
    return lock


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
        if self.enabled:
            (self.progress.write if self.progress is not None else print)(line)

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
