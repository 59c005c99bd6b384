"""
Checkpoints, by concept:

  file.py        single-file checkpoints: what one holds, atomic checksummed saves, rotation, verified reads
  sharded.py     sharded checkpoints (data_parallel=fsdp), written and read through torch.distributed.checkpoint
  resume.py      loading either format, the newest that loads, the checks a resume passes, restoring the state
  evaluation.py  the model a checkpoint, a run or a folder of runs holds, for eval/, sample.py and the export

Re-exported here: the names train.py, sample.py, eval/, experiments/ and the tests import from `checkpoint`.
Every other public name of the single checkpoint.py this package replaced (model_from_checkpoint, verify_checksum,
load_sharded_state, ...) lives in one of the four files: `from checkpoint import verify_checksum` raises an
ImportError naming it ("checkpoint.verify_checksum moved: import it from checkpoint.file"), found by looking the
name up in the files themselves, so the message cannot go stale. A private or unknown name is a plain
AttributeError.
"""

import ast
import os

from checkpoint.evaluation import load_model
from checkpoint.file import CheckpointError, FileCheckpoints, checksum_path, has_checkpoint, save_checkpoint, step_path
from checkpoint.resume import RunState, check_resumable, load_checkpoint, load_latest, restore_training_state, run_meta
from checkpoint.sharded import ShardedCheckpoints, _dcp_failure, _dcp_load, verify_manifest

__all__ = [
    "CheckpointError", "FileCheckpoints", "RunState", "ShardedCheckpoints", "_dcp_failure", "_dcp_load",
    "check_resumable", "checksum_path", "has_checkpoint", "load_checkpoint", "load_latest", "load_model",
    "restore_training_state", "run_meta", "save_checkpoint", "step_path", "verify_manifest",
]


SUBMODULES = ("file", "sharded", "resume", "evaluation")  # (the files of this package, in this docstring's order)


def _defined_in(submodule: str) -> set[str]:
    """The names a file of this package defines at its top level (def, class, assignment), not those it
    imports: where a name lives, whichever other files import it."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), f"{submodule}.py")
    with open(path) as f:
        tree = ast.parse(f.read(), path)
    names = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    return names


def moved_to(name: str) -> str | None:
    """The module that now defines a public name checkpoint.py used to ('checkpoint.file'), or None."""
    if name.startswith("_"):
        return None
    for submodule in SUBMODULES:
        if name in _defined_in(submodule):
            return f"checkpoint.{submodule}"
    return None


def __getattr__(name: str):
    """An old `from checkpoint import <name>` (or checkpoint.<name>) names the file that holds it now. An
    ImportError, not an AttributeError: `from checkpoint import x` turns an AttributeError into its own
    "cannot import name", dropping the message."""
    module = moved_to(name)
    if module is None:
        raise AttributeError(f"module 'checkpoint' has no attribute '{name}'", name=name)
    raise ImportError(f"checkpoint.{name} moved: import it from {module} (from {module} import {name})",
                      name=__name__)
