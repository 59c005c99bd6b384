"""
The model a checkpoint holds, for eval/, sample.py and the export: loaded on the device asked for,
in eval mode, its bytes alone read and verified, with the tokenizer it was trained with. A path may
name a checkpoint (ckpt.pt, ckpt_<step>.pt, a sharded ckpt_<step>/), a run's out_dir (its newest
checkpoint that verifies) or a folder of runs (the quickstart's out/quickstart: its newest run).
"""

import os
import re

import torch
from torch.distributed.checkpoint.state_dict import get_model_state_dict

from checkpoint.file import LATEST, CheckpointError, _to_stderr, has_checkpoint
from checkpoint.resume import load_checkpoint, load_latest, stored_model_args
from checkpoint.sharded import MANIFEST, _dcp_load, dcp_folder, is_sharded_checkpoint
from model import GPT, GPTConfig


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
    are verified. path may be a run's out_dir (its newest checkpoint that verifies) or a folder of runs
    (its newest run: run_in)."""
    path = run_in(path) if holds_runs(path) else path
    if is_run_folder(path) and (runs := runs_in(path)):  # (an older quickstart's out/quickstart, say)
        raise CheckpointError(f"{path} is a run's folder and also holds runs ({listing(runs)}): point at the one to "
                              f"use, {path}/{LATEST} or e.g. {os.path.join(path, runs[-1])}")
    if is_run_folder(path):  # what a user pointing at a run means: its newest checkpoint that verifies
        newest, ckpt = load_latest(path, log=_to_stderr, only="model/")
        _to_stderr(f"{path} is a run's folder: using its newest verified checkpoint, {newest}")
    else:
        ckpt = load_checkpoint(path, only="model/")
    return model_from_checkpoint(ckpt, device), tokenizer_of(ckpt)


def is_run_folder(path: str) -> bool:
    """A train.py out_dir (checkpoints inside it), as against a checkpoint or a sharded checkpoint's folder."""
    return os.path.isdir(path) and not os.path.exists(os.path.join(path, MANIFEST)) and has_checkpoint(path)


def tokenizer_of(ckpt: dict) -> str:
    """The tokenizer a checkpoint's run trained on (runs from before the setting: gpt2)."""
    return ckpt.get("config", {}).get("tokenizer", "gpt2")


def holds_runs(path: str) -> bool:
    """A folder that is neither a checkpoint nor a run's out_dir: one that holds runs (the quickstart's
    out/quickstart: each `bash scripts/quickstart.sh` a run in it named by its start time), or nothing usable."""
    return os.path.isdir(path) and not is_run_folder(path) and not is_sharded_checkpoint(path)


def runs_in(folder: str) -> list[str]:
    """The names of the runs (out_dirs with a checkpoint) directly inside folder, sorted."""
    return sorted(name for name in os.listdir(folder) if is_run_folder(os.path.join(folder, name)))


def run_in(folder: str) -> str:
    """The run a folder of runs stands for: its only run, or its newest where their names are dates (the
    quickstart's out/quickstart/<YYYYmmdd-HHMMSS>), named on stderr; else a CheckpointError that names the
    runs to choose from, or says that there is none."""
    runs = runs_in(folder)
    if not runs:
        unsaved = sorted(name for name in os.listdir(folder)
                         if os.path.isfile(os.path.join(folder, name, "config.json")))  # (runs write it first)
        raise CheckpointError(
            f"{folder} holds no checkpoint and no run with one"
            + (f" (its runs {listing(unsaved)} have not saved one yet: a run saves every ckpt_interval steps)"
               if unsaved else "")
            + f"; point at a checkpoint (<out_dir>/{LATEST}, or <out_dir>/ckpt_<step>/ under data_parallel=fsdp), "
            "a run's out_dir or a folder of runs such as out/quickstart (bash scripts/quickstart.sh trains one)")
    if len(runs) > 1 and not dated(runs):
        raise CheckpointError(f"{folder} holds {len(runs)} runs ({listing(runs)}) and their names do not say which "
                              f"is the newest: point at the one to use, e.g. {os.path.join(folder, runs[-1])}")
    run = os.path.join(folder, runs[-1])
    _to_stderr(f"{folder} holds {len(runs)} runs ({listing(runs)}): using the newest, {run}" if len(runs) > 1
               else f"{folder} holds one run: using {run}")
    return run


def dated(names: list[str]) -> bool:
    """Names that are dates of one pattern (20261127-120000, 2026-11-27_12-00), whose order is their time's."""
    shapes = {re.sub(r"\d", "0", name) for name in names}
    shape = shapes.pop() if len(shapes) == 1 else ""
    return shape.count("0") >= 8 and set(shape) <= set("0-_.:T")


def listing(names: list[str]) -> str:
    """Names for a message, the middle of a long list left out."""
    return ", ".join(names if len(names) <= 6 else [*names[:3], "...", *names[-2:]])
