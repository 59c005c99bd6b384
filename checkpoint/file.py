"""
Single-file checkpoints: what one holds, how it is written so that no crash loses a run, and how it is
read back verified. A run folder's checkpoints of either format are listed and rotated here too.

In a run's out_dir, each save writes ckpt_<step>.pt atomically (a temporary file, fsync'ed,
renamed), with the sha256 of every tensor inside it (`checksums`, by the tensor's path), so that it
verifies wherever it is copied (cp -r, rsync and object stores turn the hard link below into a
plain file and drop anything beside it) and a reader verifies exactly the bytes it reads: eval,
sample and export the model's, resume all of them (checkpoints from before kept their checksum in a
ckpt_<step>.pt.sha256 beside them, which is still read). Only then does ckpt.pt (a hard link, so no extra disk)
move to the new file and do checkpoints beyond the newest `keep` go (ckpt_best.pt,
a link to the best-validation one, optionally stays too). So the last good
checkpoint is never touched before the next one is durable. Resume (checkpoint/resume.py) tries them
newest first and takes the first whose checksum matches and which loads. A sharded run writes
ckpt_<step>/ folders instead (checkpoint/sharded.py).

A checkpoint is a dict (torch.save, loadable with weights_only=True):
  model, optimizer, scaler        state_dicts
  step, tokens_seen, best_val_loss
  config, model_args              the run's resolved TrainConfig (dict) and GPTConfig arguments
  rng                             per-rank CPU/CUDA generator states
  loader                          {seed, next_step}: all the data loader needs to continue
  data_fingerprint                the training shards' names and sizes
  code_version
  checksums                       {"model/lm_head.weight": sha256 hex, "optimizer/state/0/exp_avg": ...}
"""

import errno
import glob
import hashlib
import os
import re
import shutil
import sys
import zipfile
from typing import IO, Any

import torch
import torch.distributed as dist

from errors import InputError, write_failure
from files import atomic_write, file_sha256, fsync_directory
from runtime import broadcast_from_main

LATEST = "ckpt.pt"
BEST = "ckpt_best.pt"
CHECKSUMS = "checksums"  # a single-file checkpoint's record of its tensors' sha256, inside it


class CheckpointError(InputError):
    """A checkpoint that cannot be used; the message names the file and what to do."""


def step_path(out_dir: str, step: int) -> str:
    return os.path.join(out_dir, f"ckpt_{step:07d}.pt")


def checksum_path(path: str) -> str:
    return path + ".sha256"


class _ErrorKeepingWriter:
    """A file wrapper that keeps the OSError of a failed write: torch's zip writer re-raises it as a
    RuntimeError, which would hide a full disk."""

    def __init__(self, f: IO[bytes]):
        self.f, self.error = f, None

    def write(self, data) -> int:
        try:
            return self.f.write(data)
        except OSError as e:
            self.error = e
            raise

    def flush(self) -> None:
        self.f.flush()


def tensor_records(ckpt: dict, prefix: str = "") -> dict[str, torch.Tensor]:
    """The checkpoint's tensors by path ("model/lm_head.weight", "optimizer/state/0/exp_avg"), those under prefix."""
    leaves, _ = torch.utils._pytree.tree_flatten_with_path({k: v for k, v in ckpt.items() if k != CHECKSUMS})
    records = {"/".join(str(key.key if hasattr(key, "key") else key.idx) for key in path): value
               for path, value in leaves if isinstance(value, torch.Tensor)}
    return {name: tensor for name, tensor in records.items() if name.startswith(prefix)}


def tensor_sha256(tensor: torch.Tensor) -> str:
    """The sha256 of a tensor's bytes (read in place for a loaded checkpoint's: contiguous, memory-mapped)."""
    return hashlib.sha256(tensor.detach().to("cpu").contiguous().reshape(-1).view(torch.uint8).numpy()).hexdigest()


def verify_records(ckpt: dict, prefix: str = "") -> str | None:
    """None when every tensor under prefix has the sha256 the checkpoint records inside it; else which not."""
    recorded = ckpt[CHECKSUMS]
    for name, tensor in tensor_records(ckpt, prefix).items():
        if recorded.get(name) != tensor_sha256(tensor):
            return f"its tensor {name} differs from the recorded sha256 inside it (corrupt)"
    return None


def _short_write(e: BaseException) -> OSError | None:
    """The failed write behind torch's zip writer's "unexpected pos" RuntimeError (the file took fewer bytes
    than were written), for when the OSError that caused it is not at hand: a full disk, a quota or a file-size
    limit, which it cannot tell apart."""
    if isinstance(e, RuntimeError) and "unexpected pos" in str(e):
        return OSError(errno.ENOSPC, "the file took fewer bytes than were written: a full disk, a quota or a "
                                     "file-size limit")
    return None


def _save(obj: Any, f: IO[bytes]) -> None:
    """torch.save(obj, f), a failed write raising its OSError (a full disk) rather than torch's RuntimeError."""
    writer = _ErrorKeepingWriter(f)
    try:
        torch.save(obj, writer)
    except RuntimeError as e:
        error = writer.error or _short_write(e)
        if error is None:
            raise
        raise error from e


def save_checkpoint(out_dir: str, state: dict, keep: int, best: bool = False, keep_best: bool = False) -> str:
    """Write state, with its tensors' checksums inside, as out_dir/ckpt_<step>.pt, point ckpt.pt (and, when
    best, ckpt_best.pt) at it, then remove what is beyond the newest `keep`. Returns its path."""
    path = step_path(out_dir, state["step"])
    state = state | {CHECKSUMS: {name: tensor_sha256(tensor) for name, tensor in tensor_records(state).items()}}
    try:  # (atomic_write removes its temporary file when the write fails)
        with atomic_write(path) as f:
            _save(state, f)
        _link(path, os.path.join(out_dir, LATEST))
        if best and keep_best:
            _link(path, os.path.join(out_dir, BEST))
    except OSError as e:
        raise CheckpointError(f"could not write checkpoint {path} {write_failure(e)}; then resume with "
                              f"--init_from=resume. The previous checkpoints in {out_dir} are untouched") from e
    rotate(out_dir, keep)
    return path


def rotate(out_dir: str, keep: int) -> None:
    """Remove the checkpoints beyond the newest `keep` (a sharded one ckpt_best links to stays)."""
    best = os.path.join(out_dir, "ckpt_best")
    kept = os.path.realpath(best) if os.path.islink(best) else None
    for old in step_checkpoints(out_dir)[keep:]:
        if os.path.realpath(old) != kept:
            remove_checkpoint(old)


def _link(target: str, link: str) -> None:
    """Atomically make `link` a hard link to target (a copy where hard links are not supported)."""
    tmp = link + ".tmp"
    if os.path.lexists(tmp):
        os.remove(tmp)
    try:
        os.link(target, tmp)
    except OSError:
        with open(target, "rb") as src, atomic_write(tmp) as dst:
            while chunk := src.read(1 << 24):
                dst.write(chunk)
    os.replace(tmp, link)
    fsync_directory(os.path.dirname(link) or ".")


def step_checkpoints(out_dir: str) -> list[str]:
    """The ckpt_<step>.pt files and ckpt_<step>/ folders in out_dir, newest first."""
    paths = [p for p in glob.glob(os.path.join(out_dir, "ckpt_*")) if re.fullmatch(r"ckpt_\d+(\.pt)?", os.path.basename(p))]
    return sorted(paths, key=lambda p: int(re.findall(r"\d+", os.path.basename(p))[0]), reverse=True)


def remove_checkpoint(path: str) -> None:
    """A checkpoint file with its checksum, or a sharded checkpoint's folder."""
    if os.path.isdir(path):
        shutil.rmtree(path)
    for p in (path, checksum_path(path)):
        if os.path.isfile(p):
            os.remove(p)


def has_checkpoint(out_dir: str) -> bool:
    return bool(step_checkpoints(out_dir)) or os.path.exists(os.path.join(out_dir, LATEST))


def _to_stderr(line: str) -> None:
    print(line, file=sys.stderr)


def recorded_checksum(path: str) -> str | None:
    """The file's sha256 recorded beside a checkpoint from before the checksums inside: its own .sha256, or
    for ckpt.pt and ckpt_best.pt (hard links) that of the ckpt_<step>.pt they are; None when none is."""
    for candidate in [path] + step_checkpoints(os.path.dirname(path) or "."):
        if os.path.exists(checksum_path(candidate)) and (candidate == path or os.path.samefile(candidate, path)):
            with open(checksum_path(candidate)) as f:
                return f.read().strip()
    return None


def verify_checksum(path: str, log=_to_stderr) -> str | None:
    """None when path's bytes match its recorded checksum; else why not. A checkpoint with no checksum
    recorded (older runs; ckpt.pt copied elsewhere) loads with a warning through log."""
    expected = recorded_checksum(path)
    if expected is None:
        log(f"warning: no checksum recorded for {path} (no {os.path.basename(checksum_path(path))} beside it, "
            "and no ckpt_<step>.pt it links to): loading it unverified")
        return None
    actual = file_sha256(path)
    if actual != expected:
        return f"its sha256 {actual[:12]}... differs from the recorded {expected[:12]}... (corrupt or cut short)"
    return None


def unreadable(path: str, error: Exception) -> str:
    """What is wrong with a checkpoint file torch.load refused: its size and its checksum's verdict (torch's own
    advice, to load it with weights_only=False, is wrong for a damaged file and unsafe for a foreign one)."""
    size = os.path.getsize(path)
    kind = "not a torch zip archive" if "zip" in str(error).lower() or not zipfile.is_zipfile(path) else \
        f"its contents do not unpickle ({type(error).__name__})"
    expected = recorded_checksum(path)
    if expected is None:
        verdict = "no checksum recorded beside it"
    elif file_sha256(path) == expected:
        verdict = "its sha256 matches the one recorded when it was written"
    else:
        verdict = "its sha256 differs from the one recorded when it was written: corrupt or cut short"
    return f"{size:,} bytes, {kind}, {verdict}"


def load_file(path: str, verify: bool = True, log=_to_stderr, only: str = "") -> dict:
    """A single-file checkpoint's contents, or a CheckpointError naming what is wrong with it.

    Always loaded on the CPU and memory-mapped: a tensor's bytes are read from the file when it is
    used, so a caller that takes only the model never reads the optimizer state, and the caller
    moves what it uses to its device (CUDA RNG states, for one, must stay CPU tensors).
    Verified against the checksums inside it, the tensors under `only` ("model/": the model's alone,
    all by default); a checkpoint from before them, against the file's .sha256 beside it.
    verify=False skips that pass (a resume's other ranks: rank 0 has verified the file)."""
    try:
        ckpt = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except Exception as e:  # truncated zip, not a torch file, unpickling refused: all mean unusable
        raise CheckpointError(f"{path} is unreadable: {unreadable(path, e)}; use an intact checkpoint (resume "
                              "falls back to the one before)") from e
    missing = [k for k in ("model", "model_args") if not isinstance(ckpt, dict) or k not in ckpt]
    if missing:
        raise CheckpointError(f"{path} is not a train.py checkpoint (it lacks {', '.join(missing)})")
    if verify:
        problem = verify_records(ckpt, only) if CHECKSUMS in ckpt else verify_checksum(path, log)
        if problem:
            raise CheckpointError(f"{path}: {problem}; use an intact checkpoint (resume falls back to an older one)")
    return ckpt


def _rank() -> int:
    return dist.get_rank() if dist.is_initialized() else 0


class FileCheckpoints:
    """Writes a run's checkpoints as single files (save_checkpoint), from rank 0; the interface of
    ShardedCheckpoints, which a sharded run uses."""

    def __init__(self, out_dir: str, keep: int, keep_best: bool, asynchronous: bool = False):
        self.out_dir, self.keep, self.keep_best = out_dir, keep, keep_best

    def save(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer, meta: dict, best: bool) -> str:
        """Rank 0 writes the checkpoint; every rank learns whether it could (a failed write stops them all)."""
        path, error = step_path(self.out_dir, meta["step"]), None
        if _rank() == 0:
            try:
                save_checkpoint(self.out_dir, meta | dict(model=model.state_dict(), optimizer=optimizer.state_dict()),
                                self.keep, best, self.keep_best)
            except CheckpointError as e:
                error = str(e)
        error = broadcast_from_main(error)
        if error:
            raise CheckpointError(error)
        return path

    def finish(self) -> None:
        pass

