"""
Sharded checkpoints (data_parallel=fsdp), through torch.distributed.checkpoint (DCP).

A sharded run writes ckpt_<step>/ instead of a file, a folder every rank writes its own
shards into through DCP, so no rank gathers the model: DCP's files
(model and optimizer state, any world size can read them back), meta.pt (everything else a
checkpoint holds, checkpoint/file.py) and, written last, manifest.json (each file's size and sha256,
by relative name, so a copied folder verifies). It is written as ckpt_<step>.tmp/ and renamed when
complete; ckpt_best links to the best one. Resume, eval, sample and export read either format, at any
world size and parallelism.
"""

import json
import os
import re
import shutil
import warnings
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint._nested_dict import flatten_state_dict  # (DCP's own key names)
from torch.distributed.checkpoint.api import CheckpointException
from torch.distributed.tensor import DTensor
from torch.distributed.checkpoint.state_dict import (
    get_model_state_dict, get_optimizer_state_dict, set_model_state_dict, set_optimizer_state_dict,
)

from checkpoint.file import CheckpointError, _rank, _save, _short_write, rotate
from errors import write_failure
from files import atomic_write, file_sha256, fsync_directory
from optim.contract import needs_second_gradient
from runtime import broadcast_from_main

META = "meta.pt"  # what a sharded checkpoint holds besides the state_dicts (run_meta: checkpoint/resume.py)
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


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return f"{type(e).__name__}: {text.splitlines()[0][:300] if text else ''}"


def _dcp_failure(e: BaseException) -> str:
    """Why a DCP call failed, for a message: ' (No space left on device); free disk space ...' for the
    first rank's OSError, else ': <its first line>'. DCP raises a CheckpointException (a BaseException)
    that carries each failed rank's exception. A write that failed inside torch's zip writer is a
    RuntimeError ("unexpected pos ...") with the file's OSError down its chain; another rank's exception
    reaches this rank pickled, which drops the chain, so the RuntimeError alone is named as a short write
    (a full disk, a quota or a file-size limit) when no rank's own OSError is at hand."""
    causes = [cause for cause, _ in e.failures.values()] if isinstance(e, CheckpointException) else [e]
    for cause in causes:  # a rank's own OSError first (a file-size limit is not a full disk) ...
        link = cause
        while link is not None and not isinstance(link, OSError):
            link = link.__cause__ or link.__context__
        if link is not None:
            return " " + write_failure(link)
    for cause in causes:  # ... then another rank's short write, whose cause did not travel
        if (error := _short_write(cause)) is not None:
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


def is_sharded_checkpoint(path: str) -> bool:
    """A folder that is a sharded checkpoint, complete or not (ckpt_<step>/, ckpt_<step>.tmp/, a copy renamed)."""
    return (bool(re.fullmatch(r"ckpt_\d+(\.tmp)?", os.path.basename(os.path.normpath(path))))
            or any(os.path.exists(os.path.join(path, *name)) for name in
                   [(MANIFEST,), (META,), (".metadata",), ("model", ".metadata")]))


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

