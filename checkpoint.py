"""
Checkpoints: what one holds, how it is written so that no crash loses a run,
how a run resumes from one, and how eval/sample/export load its model.

In a run's out_dir, each save writes ckpt_<step>.pt (atomically: a temporary file,
fsync'ed, renamed) and beside it ckpt_<step>.pt.sha256, the checksum of its bytes,
computed while writing. Only then does ckpt.pt (a hard link, so no extra disk)
move to the new file and do checkpoints beyond the newest `keep` go (ckpt_best.pt,
a link to the best-validation one, optionally stays too). So the last good
checkpoint is never touched before the next one is durable. Resume tries them
newest first and takes the first whose checksum matches and which loads.

A checkpoint is a dict (torch.save, loadable with weights_only=True):
  model, optimizer, scaler        state_dicts
  step, tokens_seen, best_val_loss
  config, model_args              the run's resolved TrainConfig (dict) and GPTConfig arguments
  rng                             per-rank CPU/CUDA generator states
  loader                          {seed, next_step}: all the data loader needs to continue
  data_fingerprint                the training shards' names and sizes
  code_version
"""

import glob
import hashlib
import os
import re
import sys
from dataclasses import dataclass, fields
from typing import IO, Any

import torch

from data.shards import atomic_write, file_sha256, fsync_directory
from model import GPT, GPTConfig
from optim.contract import GroupState
from runtime import InputError, device_type, resolve_dtype, write_failure

LATEST = "ckpt.pt"
BEST = "ckpt_best.pt"
# Settings that shape the optimizer and grad-scaler state whatever the optimizer: a resume cannot
# change them (each optimizer declares its own in the registry, optim/__init__.py).
STATE_KEYS = ("optimizer", "dtype")
# Keys that differ between a run and its own resume.
RESUME_ONLY_KEYS = ("init_from", "eval_only")


class CheckpointError(InputError):
    """A checkpoint that cannot be used; the message names the file and what to do."""


def step_path(out_dir: str, step: int) -> str:
    return os.path.join(out_dir, f"ckpt_{step:07d}.pt")


def checksum_path(path: str) -> str:
    return path + ".sha256"


class _HashingWriter:
    """A file wrapper that hashes what is written through it (no second read of a large file), and
    keeps the OSError of a failed write: torch's zip writer re-raises it as a RuntimeError."""

    def __init__(self, f: IO[bytes]):
        self.f, self.sha, self.error = f, hashlib.sha256(), None

    def write(self, data) -> int:
        self.sha.update(data)
        try:
            return self.f.write(data)
        except OSError as e:
            self.error = e
            raise

    def flush(self) -> None:
        self.f.flush()


def save_checkpoint(out_dir: str, state: dict, keep: int, best: bool = False, keep_best: bool = False) -> str:
    """Write state as out_dir/ckpt_<step>.pt with its checksum, point ckpt.pt (and, when best,
    ckpt_best.pt) at it, then remove what is beyond the newest `keep`. Returns its path."""
    path = step_path(out_dir, state["step"])
    try:  # (atomic_write removes its temporary file when the write fails)
        with atomic_write(path) as f:
            writer = _HashingWriter(f)
            try:
                torch.save(state, writer)
            except RuntimeError as e:
                if writer.error is None:
                    raise
                raise writer.error from e  # a full disk, as torch's zip writer reports it
        with atomic_write(checksum_path(path), "w") as f:
            f.write(writer.sha.hexdigest() + "\n")
        _link(path, os.path.join(out_dir, LATEST))
        if best and keep_best:
            _link(path, os.path.join(out_dir, BEST))
    except OSError as e:
        if os.path.exists(path) and not os.path.exists(checksum_path(path)):
            os.remove(path)  # complete but unverifiable, and it takes the space the next try needs
        raise CheckpointError(f"could not write checkpoint {path} {write_failure(e)}; then resume with "
                              f"--init_from=resume. The previous checkpoints in {out_dir} are untouched") from e
    for old in step_checkpoints(out_dir)[keep:]:
        for p in (old, checksum_path(old)):
            if os.path.exists(p):
                os.remove(p)
    return path


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
    """The ckpt_<step>.pt files in out_dir, newest first."""
    paths = [p for p in glob.glob(os.path.join(out_dir, "ckpt_*.pt")) if re.fullmatch(r"ckpt_\d+\.pt", os.path.basename(p))]
    return sorted(paths, reverse=True)


def has_checkpoint(out_dir: str) -> bool:
    return bool(step_checkpoints(out_dir)) or os.path.exists(os.path.join(out_dir, LATEST))


def _to_stderr(line: str) -> None:
    print(line, file=sys.stderr)


def recorded_checksum(path: str) -> str | None:
    """The sha256 recorded for a checkpoint: its own .sha256, or for ckpt.pt and ckpt_best.pt (hard links)
    that of the ckpt_<step>.pt they are; None when none is recorded."""
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


def load_checkpoint(path: str, verify: bool = True, log=_to_stderr) -> dict:
    """A checkpoint file's contents, or a CheckpointError naming what is wrong with it.

    Always loaded on the CPU and memory-mapped: a tensor's bytes are read from the file when it is
    used, so a caller that takes only the model never reads the optimizer state, and the caller
    moves what it uses to its device (CUDA RNG states, for one, must stay CPU tensors).
    verify=False skips the sha256 pass (a resume's other ranks: rank 0 has verified the file)."""
    if not os.path.exists(path):
        raise CheckpointError(f"no checkpoint at {path}; check the path (train.py writes <out_dir>/ckpt.pt)")
    problem = verify_checksum(path, log) if verify else None
    if problem:
        raise CheckpointError(f"{path}: {problem}")
    try:
        ckpt = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except Exception as e:  # truncated zip, not a torch file, unpickling refused: all mean unusable
        first_line = str(e).strip().splitlines()[0] if str(e).strip() else ""
        raise CheckpointError(f"{path} is not a readable checkpoint ({type(e).__name__}: {first_line[:200]}); "
                              "use an intact checkpoint (resume falls back to an older one)") from e
    missing = [k for k in ("model", "model_args") if not isinstance(ckpt, dict) or k not in ckpt]
    if missing:
        raise CheckpointError(f"{path} is not a train.py checkpoint (it lacks {', '.join(missing)})")
    return ckpt


def load_latest(out_dir: str, log=print) -> tuple[str, dict]:
    """The newest checkpoint in out_dir that verifies and loads (on the CPU); names each one skipped and why."""
    candidates = step_checkpoints(out_dir) or [os.path.join(out_dir, LATEST)]
    skipped = []
    for path in candidates:
        try:
            ckpt = load_checkpoint(path, log=log)
        except CheckpointError as e:
            skipped.append(str(e))
            log(f"skipping checkpoint: {e}")
            continue
        return path, ckpt
    raise CheckpointError(
        f"no usable checkpoint in {out_dir}:\n  " + "\n  ".join(skipped)
        + "\nstart the run again with --init_from=scratch in a new out_dir"
    )


def check_resumable(ckpt: dict, path: str, config: dict, model_args: dict, fingerprint: list,
                    state_keys: tuple[str, ...]) -> dict[str, tuple[Any, Any]]:
    """Refuse a resume that could not continue the run; returns the config changes (old, new)."""
    if ckpt["model_args"] != model_args:
        raise CheckpointError(f"the model in {path} ({ckpt['model_args']}) differs from the config's "
                              f"({model_args}); resume with the run's own model settings")
    if [list(x) for x in ckpt["data_fingerprint"]] != [list(x) for x in fingerprint]:
        raise CheckpointError(f"the training shards differ from those {path} was trained on; "
                              "resuming on other data would not continue the run")
    # (a key the new config does not have is another optimizer's, recorded by older runs: not a change)
    changed = {k: (v, config[k]) for k, v in ckpt["config"].items()
               if k not in RESUME_ONLY_KEYS and k in config and config[k] != v}
    state_shaping = {k: changed[k] for k in (*STATE_KEYS, *state_keys) if k in changed}
    if "dtype" in state_shaping:
        # 'auto' names bf16 on CUDA and fp32 on CPU: compare the precisions the two runs compute in, so
        # 'auto' -> 'float32' on CPU is a change of words only (the checkpoint's run was on CUDA if it
        # saved CUDA generator states).
        old_device = "cuda" if any(r.get("cuda") is not None for r in ckpt.get("rng", [])) else "cpu"
        old_dtype = resolve_dtype(ckpt["config"]["dtype"], torch.device(old_device))
        if old_dtype == resolve_dtype(config["dtype"], torch.device(device_type(config["device"]))):
            del state_shaping["dtype"]
    if state_shaping:
        raise CheckpointError(f"{path} was trained with other optimizer or precision settings "
                              f"(old, new): {state_shaping}; its state cannot continue under the new ones")
    return changed


@dataclass
class RunState:
    """Where a run stands between optimizer steps (what resume restores besides the state_dicts)."""

    step: int = 0
    best_val_loss: float = float("inf")


def training_state(model: torch.nn.Module, optimizer: torch.optim.Optimizer, scaler: torch.amp.GradScaler,
                   run: RunState, config: dict, model_args: dict, rng: list[dict], fingerprint: list,
                   code_version: str) -> dict:
    """The dict a checkpoint holds (see the module docstring)."""
    return dict(model=model.state_dict(), optimizer=optimizer.state_dict(), scaler=scaler.state_dict(),
                step=run.step, tokens_seen=run.step * config["total_batch_size"], best_val_loss=run.best_val_loss,
                config=config, model_args=model_args, rng=rng, loader=dict(seed=config["seed"], next_step=run.step),
                data_fingerprint=fingerprint, code_version=code_version)


def restore_training_state(ckpt: dict, model: torch.nn.Module, optimizer: torch.optim.Optimizer,
                           scaler: torch.amp.GradScaler) -> RunState:
    """Load the state_dicts. The optimizer's moments (and the run state some keep in their param groups,
    optim.contract.GroupState) come from the checkpoint, its hyperparameters from the current config
    (resume prints what changed)."""
    model.load_state_dict(ckpt["model"])
    kept = ("params", *(optimizer.group_state_keys if isinstance(optimizer, GroupState) else ()))
    hyperparameters = [{k: v for k, v in g.items() if k not in kept} for g in optimizer.param_groups]
    optimizer.load_state_dict(ckpt["optimizer"])
    for group, fresh in zip(optimizer.param_groups, hyperparameters):
        group.update(fresh)
    scaler.load_state_dict(ckpt["scaler"])
    return RunState(step=ckpt["step"], best_val_loss=ckpt["best_val_loss"])


def model_from_checkpoint(ckpt: dict, device: str | torch.device = "cpu") -> GPT:
    """The model a loaded checkpoint holds, on device, in eval mode. Built on the meta device and
    given the checkpoint's tensors, so the host holds the weights once (memory-mapped) and nothing
    else of the checkpoint is read."""
    model_args = ckpt["model_args"]
    with torch.device("meta"):
        model = GPT(GPTConfig(**{f.name: model_args[f.name] for f in fields(GPTConfig)}))
    model.load_state_dict(ckpt["model"], assign=True)
    model.tie_weights()  # assign gave the embedding and the head separate Parameters
    return model.to(device).eval()


def load_model(path: str, device: str | torch.device = "cpu") -> tuple[GPT, str]:
    """The model stored in a train.py checkpoint, on device, in eval mode, and the tokenizer it was trained
    with (for eval/, sample.py, export): the optimizer state is never read."""
    ckpt = load_checkpoint(path)
    return model_from_checkpoint(ckpt, device), tokenizer_of(ckpt)


def tokenizer_of(ckpt: dict) -> str:
    """The tokenizer a checkpoint's run trained on (runs from before the setting: gpt2)."""
    return ckpt.get("config", {}).get("tokenizer", "gpt2")
