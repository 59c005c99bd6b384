"""
Reading a run's checkpoints back, of either format, and resuming the run from one: the newest that
verifies and loads (load_latest), the checks that it can continue this run (check_resumable), and
its state restored into this run's model and optimizer at any world size and parallelism
(restore_training_state). eval/, sample.py and export read their model through load_checkpoint and
load_latest too (checkpoint/evaluation.py).
"""

import glob
import os
from dataclasses import dataclass, fields
from typing import Any

import torch
from torch.distributed.tensor import DTensor
from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict, set_optimizer_state_dict

from checkpoint.file import LATEST, CheckpointError, _to_stderr, load_file, step_checkpoints
from checkpoint.sharded import load_sharded_meta, load_sharded_state, named_optimizer_state
from config import TrainConfig
from config.models import ARCHITECTURE_NAMES, GPTConfig
from optim.contract import GroupState
from runtime import device_type, resolve_dtype

# Settings that shape the optimizer and grad-scaler state whatever the optimizer: a resume cannot
# change them (each optimizer declares its own in the registry, optim/__init__.py).
STATE_KEYS = ("optimizer", "dtype", "weight_averaging")
# Keys that differ between a run and its own resume.
RESUME_ONLY_KEYS = ("init_from", "eval_only")


def load_checkpoint(path: str, verify: bool = True, log=_to_stderr, only: str = "") -> dict:
    """A checkpoint's contents, of either format: a file's (load_file: memory-mapped on the CPU, verified
    against the checksums inside it) or a sharded checkpoint's meta.pt with "path", its folder
    (load_sharded_meta: verified against its manifest); its tensors under `only` ("model/": the model's
    alone) verified, all by default; verify=False skips that (a resume's other ranks: rank 0 has verified
    it). Or a CheckpointError naming what is wrong with it."""
    if not os.path.exists(path):
        raise CheckpointError(f"no checkpoint at {path}; check the path (train.py writes <out_dir>/ckpt.pt, or "
                              "<out_dir>/ckpt_<step>/ under data_parallel=fsdp)")
    if os.path.isdir(path):
        return load_sharded_meta(path, verify, only)
    return load_file(path, verify, log, only)


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


def stored_model_args(ckpt: dict) -> dict:
    """The GPTConfig arguments a checkpoint was saved with; a field newer than the checkpoint takes its default
    (a run from before the Llama presets is a GPT-2)."""
    return {f.name: ckpt["model_args"].get(f.name, f.default) for f in fields(GPTConfig)}


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
    # (a key the new config does not have is another optimizer's, recorded by older runs: not a change; a state key
    # the checkpoint's config lacks, from before the key existed, had its default)
    recorded = {k: TrainConfig.__dataclass_fields__[k].default for k in STATE_KEYS} | ckpt["config"]
    changed = {k: (v, config[k]) for k, v in recorded.items()
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
    """What a checkpoint holds besides the model and optimizer state_dicts (checkpoint/file.py lists it)."""
    return dict(scaler=scaler.state_dict(), step=run.step, tokens_seen=run.step * config["total_batch_size"],
                best_val_loss=run.best_val_loss, config=config, model_args=model_args, rng=rng,
                loader=dict(seed=config["seed"], next_step=run.step), data_fingerprint=fingerprint,
                code_version=code_version)


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

