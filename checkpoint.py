"""
Checkpoints: what one holds, how it is written so that no crash loses a run,
how a run resumes from one, and how eval/sample/export load its model.

In a run's out_dir, each save writes ckpt_<step>.pt atomically (a temporary file, fsync'ed,
renamed), with the sha256 of every tensor inside it (`checksums`, by the tensor's path), so that it
verifies wherever it is copied (cp -r, rsync and object stores turn the hard link below into a
plain file and drop anything beside it) and a reader verifies exactly the bytes it reads: eval,
sample and export the model's, resume all of them (checkpoints from before kept their checksum in a
ckpt_<step>.pt.sha256 beside them, which is still read). Only then does ckpt.pt (a hard link, so no extra disk)
move to the new file and do checkpoints beyond the newest `keep` go (ckpt_best.pt,
a link to the best-validation one, optionally stays too). So the last good
checkpoint is never touched before the next one is durable. Resume tries them
newest first and takes the first whose checksum matches and which loads.

A sharded run (data_parallel=fsdp) writes ckpt_<step>/ instead, a folder every rank writes its own
shards into through torch.distributed.checkpoint (DCP), so no rank gathers the model: DCP's files
(model and optimizer state, any world size can read them back), meta.pt (everything else below) and,
written last, manifest.json (each file's size and sha256, by relative name, so a copied folder
verifies). It is written as ckpt_<step>.tmp/ and renamed when complete; ckpt_best links to the best
one. Resume, eval, sample and export read either format, at any world size and parallelism.

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
import json
import os
import re
import shutil
import sys
import warnings
import zipfile
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, fields
from typing import IO, Any

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint._nested_dict import flatten_state_dict  # (DCP's own key names)
from torch.distributed.checkpoint.api import CheckpointException
from torch.distributed.tensor import DTensor
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions, get_model_state_dict, get_optimizer_state_dict, set_model_state_dict, set_optimizer_state_dict,
)

from data.shards import atomic_write, file_sha256, fsync_directory
from model import ARCHITECTURE_NAMES, GPT, GPTConfig
from optim.contract import GroupState, needs_second_gradient
from errors import InputError, write_failure
from runtime import broadcast_from_main, device_type, resolve_dtype

LATEST = "ckpt.pt"
BEST = "ckpt_best.pt"
CHECKSUMS = "checksums"  # a single-file checkpoint's record of its tensors' sha256, inside it
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
    """The full disk behind torch's zip writer's "unexpected pos" RuntimeError (the file took fewer bytes
    than were written), for when the OSError that caused it is not at hand."""
    if isinstance(e, RuntimeError) and "unexpected pos" in str(e):
        return OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
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


def load_checkpoint(path: str, verify: bool = True, log=_to_stderr, only: str = "") -> dict:
    """A checkpoint file's contents, or a CheckpointError naming what is wrong with it.

    Always loaded on the CPU and memory-mapped: a tensor's bytes are read from the file when it is
    used, so a caller that takes only the model never reads the optimizer state, and the caller
    moves what it uses to its device (CUDA RNG states, for one, must stay CPU tensors).
    Verified against the checksums inside it, the tensors under `only` ("model/": the model's alone,
    all by default); a checkpoint from before them, against the file's .sha256 beside it.
    verify=False skips that pass (a resume's other ranks: rank 0 has verified the file)."""
    if not os.path.exists(path):
        raise CheckpointError(f"no checkpoint at {path}; check the path (train.py writes <out_dir>/ckpt.pt, or "
                              "<out_dir>/ckpt_<step>/ under data_parallel=fsdp)")
    if os.path.isdir(path):
        return load_sharded_meta(path, verify, only)
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


def load_latest(out_dir: str, log=print, only: str = "") -> tuple[str, dict]:
    """The newest checkpoint in out_dir that verifies and loads (on the CPU; verified under `only`, all by
    default); names each one skipped and why."""
    candidates = step_checkpoints(out_dir) or [os.path.join(out_dir, LATEST)]
    for unfinished in sorted(glob.glob(os.path.join(out_dir, "ckpt_*.tmp"))):
        log(f"skipping checkpoint: {unfinished} is a save that did not complete (never renamed); "
            "the next save of its step replaces it")
    skipped = []
    for path in candidates:
        try:
            ckpt = load_checkpoint(path, log=log, only=only)
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
    stored = stored_model_args(ckpt)
    if stored["architecture"] != model_args["architecture"]:
        raise CheckpointError(f"{path} holds a {ARCHITECTURE_NAMES[stored['architecture']]} model and the config "
                              f"asks for a {ARCHITECTURE_NAMES[model_args['architecture']]} (model "
                              f"'{config.get('model')}'): resume with the run's own model preset")
    if stored != model_args:
        raise CheckpointError(f"the model in {path} ({stored}) differs from the config's "
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


def run_meta(scaler: torch.amp.GradScaler, run: RunState, config: dict, model_args: dict, rng: list[dict],
             fingerprint: list, code_version: str) -> dict:
    """What a checkpoint holds besides the model and optimizer state_dicts (see the module docstring)."""
    return dict(scaler=scaler.state_dict(), step=run.step, tokens_seen=run.step * config["total_batch_size"],
                best_val_loss=run.best_val_loss, config=config, model_args=model_args, rng=rng,
                loader=dict(seed=config["seed"], next_step=run.step), data_fingerprint=fingerprint,
                code_version=code_version)


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


def restore_training_state(ckpt: dict, model: torch.nn.Module, optimizer: torch.optim.Optimizer,
                           scaler: torch.amp.GradScaler) -> RunState:
    """Load the state_dicts. The optimizer's moments (and the run state some keep in their param groups,
    optim.contract.GroupState) come from the checkpoint, its hyperparameters from the current config
    (resume prints what changed). A single-file checkpoint loads into a model and optimizer of any
    parallelism, a sharded one (ckpt["path"], a folder) too: DCP reshards it to this run's ranks."""
    kept = ("params", *(optimizer.group_state_keys if isinstance(optimizer, GroupState) else ()))
    hyperparameters = [{k: v for k, v in g.items() if k not in kept} for g in optimizer.param_groups]
    if "path" in ckpt:  # a sharded checkpoint's meta: the state_dicts are in DCP's files beside it
        load_sharded_state(ckpt["path"], model, optimizer)
    elif any(isinstance(p, DTensor) for p in model.parameters()):  # a single file into a sharded model
        options = StateDictOptions(full_state_dict=True)
        set_model_state_dict(model, ckpt["model"], options=options)
        set_optimizer_state_dict(model, optimizer, named_optimizer_state(ckpt["optimizer"], model, optimizer),
                                 options=options)
    else:
        model.load_state_dict(ckpt["model"])
        optimizer.load_state_dict(ckpt["optimizer"])
    for group, fresh in zip(optimizer.param_groups, hyperparameters):
        group.update(fresh)
    scaler.load_state_dict(ckpt["scaler"])
    return RunState(step=ckpt["step"], best_val_loss=ckpt["best_val_loss"])


def stored_model_args(ckpt: dict) -> dict:
    """The GPTConfig arguments a checkpoint was saved with; a field newer than the checkpoint takes its default
    (a run from before the Llama presets is a GPT-2)."""
    return {f.name: ckpt["model_args"].get(f.name, f.default) for f in fields(GPTConfig)}


def model_from_checkpoint(ckpt: dict, device: str | torch.device = "cpu") -> GPT:
    """The model a loaded checkpoint holds, on device, in eval mode. Built on the meta device and
    given the checkpoint's tensors, so the host holds the weights once (memory-mapped) and nothing
    else of the checkpoint is read; from a sharded checkpoint, DCP reads the model's entries alone."""
    config = GPTConfig(**stored_model_args(ckpt))
    with torch.device("meta"):
        model = GPT(config)
    if "path" in ckpt:  # DCP reads into existing tensors: allocated on the CPU, never initialised
        model = model.to_empty(device="cpu")
        model.tie_weights()  # (to_empty allocated the head and the embedding apart: one of them would be spare)
        state = get_model_state_dict(model)
        _dcp_load({"model": state}, dcp_folder(ckpt["path"], "model"))
        model.load_state_dict(state, assign=True)
    else:
        model.load_state_dict(ckpt["model"], assign=True)
    model.tie_weights()  # assign gave the embedding and the head separate Parameters
    return model.to(device).eval()


def load_model(path: str, device: str | torch.device = "cpu") -> tuple[GPT, str]:
    """The model stored in a train.py checkpoint, on device, in eval mode, and the tokenizer it was trained
    with (for eval/, sample.py, export): the optimizer state is never read, and only the model's bytes
    are verified."""
    if is_run_folder(path):  # what a user pointing at a run means: its newest checkpoint that verifies
        newest, ckpt = load_latest(path, log=_to_stderr, only="model/")
        _to_stderr(f"{path} is a run's folder: using its newest verified checkpoint, {newest}")
    else:
        ckpt = load_checkpoint(path, only="model/")
    return model_from_checkpoint(ckpt, device), tokenizer_of(ckpt)


def is_run_folder(path: str) -> bool:
    """A train.py out_dir (checkpoints inside it), as against a checkpoint or a sharded checkpoint's folder."""
    return (os.path.isdir(path) and not os.path.exists(os.path.join(path, MANIFEST))
            and bool(step_checkpoints(path) or os.path.exists(os.path.join(path, LATEST))))


def tokenizer_of(ckpt: dict) -> str:
    """The tokenizer a checkpoint's run trained on (runs from before the setting: gpt2)."""
    return ckpt.get("config", {}).get("tokenizer", "gpt2")


# ----------------------------------------------------------------------------- sharded checkpoints (DCP)

META = "meta.pt"  # what a sharded checkpoint holds besides the state_dicts (training_state without them)
MANIFEST = "manifest.json"  # each file's size and sha256, written last: its presence means complete


class ShardedCheckpoints:
    """Writes a sharded run's checkpoints: every rank its own shards of the model state into model/ and
    of the optimizer state into optimizer/ (two DCP checkpoints, so that a reader of the model reads and
    verifies the model's files alone), rank 0 the rest; then each rank hashes the files it wrote, and
    rank 0 writes the manifest and renames ckpt_<step>.tmp/ to ckpt_<step>/. With asynchronous, save()
    returns once the state is copied to host memory, and a thread of ours writes it while training goes
    on, on a gloo group of its own (its collectives never interleave with training's); the manifest and
    rename wait for finish(), which the next save() and the end of the run call (a collective, as save() is)."""

    def __init__(self, out_dir: str, keep: int, keep_best: bool, asynchronous: bool):
        self.out_dir, self.keep, self.keep_best = out_dir, keep, keep_best
        self.group = dist.new_group(backend="gloo") if asynchronous and dist.is_initialized() else None
        self.writer = ThreadPoolExecutor(max_workers=1) if asynchronous else None  # None: synchronous saves
        self.pending: tuple[Future | None, str, bool] | None = None

    def save(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer, meta: dict, best: bool) -> str:
        """Start writing ckpt_<step>/ (finishing the previous save first); returns its path."""
        self.finish()
        final = os.path.join(self.out_dir, f"ckpt_{meta['step']:07d}")
        tmp, rank = final + ".tmp", _rank()
        error = None
        if rank == 0:
            try:
                if os.path.lexists(tmp):  # a save that was killed: never complete, never loaded
                    shutil.rmtree(tmp)
                os.makedirs(tmp)
                with open(os.path.join(tmp, META), "wb") as f:
                    _save(meta, f)
            except OSError as e:
                error = f"could not write checkpoint {final} {write_failure(e)}"
        _raise_if_any(error, self.out_dir)
        state = {"model": get_model_state_dict(model), "optimizer": get_optimizer_state_dict(model, optimizer)}
        future = None
        try:
            if self.writer is not None:  # our thread writes a copy (DCP's cannot copy FSDP2's shards, views of padded storage)
                future = self.writer.submit(_write_parts, torch.utils._pytree.tree_map(_own_copy, state), tmp,
                                            self.group)
            else:
                _write_parts(state, tmp, None)
        except (Exception, CheckpointException) as e:  # DCP raises any rank's failure on every rank
            error = f"could not write checkpoint {final}{_dcp_failure(e)}"
        self.pending = (future, tmp, best)
        if error is not None or self.writer is None:
            self.finish(error)
        return final

    def finish(self, error: str | None = None) -> None:
        """Complete the pending save: wait for its writes, hash, manifest, rename, rotate."""
        if self.pending is None:
            return
        (future, tmp, best), self.pending = self.pending, None
        final = tmp.removesuffix(".tmp")
        if future is not None:
            try:
                future.result()
            except (Exception, CheckpointException) as e:
                error = error or f"could not write checkpoint {final}{_dcp_failure(e)}"
        rank, files = _rank(), {}
        if error is None:
            try:
                files = {name: _file_record(os.path.join(tmp, name)) for name in _relative_files(tmp)
                         if os.path.basename(name).startswith(f"__{rank}_")
                         or (rank == 0 and not os.path.basename(name).startswith("__"))}
            except OSError as e:
                error = f"could not read back checkpoint {final} {write_failure(e)}"
        records = [(files, error)]
        if dist.is_initialized():
            records = [None] * dist.get_world_size()
            dist.all_gather_object(records, (files, error))
        errors = [e for _, e in records if e]
        if rank == 0:
            try:
                if not errors:
                    manifest = {name: record for rank_files, _ in records for name, record in rank_files.items()}
                    with atomic_write(os.path.join(tmp, MANIFEST), "w") as f:
                        json.dump({"files": manifest}, f, indent=1)
                    if os.path.isdir(final):  # the same step saved before (a resume that skipped it)
                        shutil.rmtree(final)
                    os.replace(tmp, final)
                    fsync_directory(self.out_dir)
                    if best and self.keep_best:
                        _symlink(os.path.basename(final), os.path.join(self.out_dir, "ckpt_best"))
                    rotate(self.out_dir, self.keep)
                elif os.path.isdir(tmp):
                    shutil.rmtree(tmp, ignore_errors=True)  # it takes the space the next try needs
            except OSError as e:
                errors.append(f"could not complete checkpoint {final} {write_failure(e)}")
                shutil.rmtree(tmp, ignore_errors=True)
        _raise_if_any(errors[0] if errors else None, self.out_dir)


def _write_parts(state: dict, folder: str, group: dist.ProcessGroup | None) -> None:
    """The model's and the optimizer's state as two DCP checkpoints, folder/model and folder/optimizer,
    one after the other (their collectives on one group must not interleave)."""
    for part, value in state.items():
        dcp.save({part: value}, storage_writer=dcp.FileSystemWriter(os.path.join(folder, part), sync_files=True),
                 process_group=group)


def _own_copy(value: Any) -> Any:
    """A tensor's copy in memory of its own (a DTensor's: its local block's), on the CPU."""
    if isinstance(value, DTensor):
        block = value.to_local().to("cpu", copy=True)
        return DTensor.from_local(block, value.device_mesh, value.placements, run_check=False, shape=value.shape,
                                  stride=value.stride())
    return value.to("cpu", copy=True) if isinstance(value, torch.Tensor) else value


def _rank() -> int:
    return dist.get_rank() if dist.is_initialized() else 0


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return f"{type(e).__name__}: {text.splitlines()[0][:300] if text else ''}"


def _dcp_failure(e: BaseException) -> str:
    """Why a DCP call failed, for a message: ' (No space left on device); free disk space ...' for the
    first rank's OSError, else ': <its first line>'. DCP raises a CheckpointException (a BaseException)
    that carries each failed rank's exception. A write that failed inside torch's zip writer is a
    RuntimeError ("unexpected pos ...") with the file's OSError down its chain; another rank's exception
    reaches this rank pickled, which drops the chain, so the RuntimeError alone is named as a full disk too."""
    causes = [cause for cause, _ in e.failures.values()] if isinstance(e, CheckpointException) else [e]
    for cause in causes:
        link = cause
        while link is not None and not isinstance(link, OSError):
            link = link.__cause__ or link.__context__
        error = link or _short_write(cause)
        if error is not None:
            return " " + write_failure(error)
    return ": " + _first_line(causes[0])


def _dcp_load(state: dict, folder: str) -> None:
    """DCP reads folder's entries of `state` (one part: {"model": ...} or {"optimizer": ...}) into its
    tensors, or a CheckpointError names why not. DCP reads only the entries `state` asks for, so an entry
    of the checkpoint that `state` lacks would be dropped without a word: that is refused too."""
    (part,) = state
    try:
        stored = dcp.FileSystemReader(folder).read_metadata().state_dict_metadata
        wanted = flatten_state_dict(state)[0].keys()
        unread = [key for key in stored if key.startswith(f"{part}.") and key not in wanted
                  and not key.startswith(f"{part}.param_groups.")]  # (a group's settings come from the config)
        if not unread:
            with warnings.catch_warnings():  # (one process reading a sharded checkpoint is meant: DCP warns it guessed)
                warnings.filterwarnings("ignore", "torch.distributed is disabled", UserWarning)
                dcp.load(state, checkpoint_id=folder)
    except (Exception, CheckpointException) as e:
        raise CheckpointError(f"{folder} could not be read into this run{_dcp_failure(e)}; use an intact "
                              "checkpoint of the same model (resume falls back to an older one)") from None
    if unread:
        raise CheckpointError(f"{folder} holds {len(unread)} entries this run's {part} has no place for (first: "
                              f"{unread[0]}), which a load would drop; resume with the settings that wrote it")


def _raise_if_any(error: str | None, out_dir: str) -> None:
    """Every rank raises rank 0's error (or the first rank's it gathered); a collective."""
    error = broadcast_from_main(error)
    if error:
        raise CheckpointError(f"{error}; then resume with --init_from=resume. The previous checkpoints in "
                              f"{out_dir} are untouched")


def _relative_files(folder: str) -> list[str]:
    """Every file under folder, by its path relative to it ("model/__0_0.distcp")."""
    return sorted(os.path.relpath(os.path.join(root, name), folder)
                  for root, _, names in os.walk(folder) for name in names)


def _file_record(path: str) -> dict:
    return {"bytes": os.path.getsize(path), "sha256": file_sha256(path)}


def _symlink(target: str, link: str) -> None:
    """Atomically make `link` a relative symbolic link to target (a folder beside it)."""
    tmp = link + ".tmp"
    if os.path.lexists(tmp):
        os.remove(tmp)
    os.symlink(target, tmp)
    os.replace(tmp, link)


def dcp_folder(path: str, part: str) -> str:
    """The folder of a sharded checkpoint's DCP checkpoint of `part` ("model" or "optimizer"); both are
    the folder itself in checkpoints written before the two were separate."""
    return os.path.join(path, part) if os.path.isdir(os.path.join(path, part)) else path


def verify_manifest(path: str, only: str = "") -> str | None:
    """None when every file manifest.json lists (under `only`, "model/", and meta.pt; all by default) has
    its size and sha256; else why not."""
    try:
        with open(os.path.join(path, MANIFEST)) as f:
            files = json.load(f)["files"]
    except FileNotFoundError:
        return "it has no manifest.json (a save that did not complete)"
    except (OSError, ValueError, KeyError) as e:
        return f"its manifest.json is unreadable ({type(e).__name__}: {e})"
    if any(name.startswith(only) for name in files):  # (earlier checkpoints' files are not in folders)
        files = {name: record for name, record in files.items() if name.startswith(only) or name == META}
    for name, record in files.items():
        file = os.path.join(path, name)
        if not os.path.isfile(file):
            return f"{name} is missing"
        if os.path.getsize(file) != record["bytes"]:
            return f"{name} has {os.path.getsize(file)} bytes, the manifest records {record['bytes']} (cut short)"
        if file_sha256(file) != record["sha256"]:
            return f"{name}'s sha256 differs from the manifest's (corrupt)"
    return None


def load_sharded_meta(path: str, verify: bool = True, only: str = "") -> dict:
    """A sharded checkpoint's meta.pt (verified against the manifest first, the files under `only`:
    all by default), with "path": the folder."""
    problem = verify_manifest(path, only) if verify else None
    if problem:
        raise CheckpointError(f"{path}: {problem}")
    try:
        meta = torch.load(os.path.join(path, META), map_location="cpu", weights_only=True)
    except Exception as e:
        raise CheckpointError(f"{path}/{META} is not readable ({_first_line(e)}); use an intact checkpoint "
                              "(resume falls back to an older one)") from e
    return meta | {"path": path}


def initialize_optimizer_state(optimizer: torch.optim.Optimizer) -> None:
    """Create every parameter's optimizer state (a step on zero gradients at learning rate 0, as
    torch.distributed.checkpoint.state_dict does, MARS-exact's stash included) so that a checkpoint's
    state can be read into it."""
    params = [p for group in optimizer.param_groups for p in group["params"] if p.requires_grad]
    if any(optimizer.state.get(p) for p in params):  # (not `optimizer.state`: Schedule-Free's train() fills it
        return                                      # with empty dicts, and DCP would then load nothing into it)

    def zero_gradients() -> None:
        for p in params:
            p.grad = torch.zeros_like(p)

    zero_gradients()
    if needs_second_gradient(optimizer):  # the loop's order: stash, let go of p.grad, the step's own gradient
        optimizer.stash_grad_for_next_step()  # (the stash keeps p.grad's tensor: the step must not see it again)
        optimizer.zero_grad(set_to_none=True)
        zero_gradients()
    lrs = [group["lr"] for group in optimizer.param_groups]
    for group in optimizer.param_groups:
        group["lr"] = 0.0
    optimizer.step()
    for group, lr in zip(optimizer.param_groups, lrs):
        group["lr"] = lr
    optimizer.zero_grad(set_to_none=True)


def load_sharded_state(path: str, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> None:
    """Read a sharded checkpoint's model and optimizer state into this run's (any world size, sharded
    or not): DCP reads each rank's part of every tensor."""
    initialize_optimizer_state(optimizer)
    state = {"model": get_model_state_dict(model), "optimizer": get_optimizer_state_dict(model, optimizer)}
    for part, value in state.items():
        _dcp_load({part: value}, dcp_folder(path, part))
    set_model_state_dict(model, state["model"])
    set_optimizer_state_dict(model, optimizer, state["optimizer"])


def named_optimizer_state(state_dict: dict, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> dict:
    """An optimizer state_dict keyed by parameter index (torch's, a single-file checkpoint's) keyed by
    parameter name instead (DCP's), for this optimizer's parameter order."""
    names = {id(p): name for name, p in model.named_parameters()}
    order = [names[id(p)] for group in optimizer.param_groups for p in group["params"]]
    initialize_optimizer_state(optimizer)
    return {"state": {order[i]: value for i, value in state_dict["state"].items()},
            "param_groups": [{**group, "params": [order[i] for i in group["params"]]}
                             for group in state_dict["param_groups"]]}
