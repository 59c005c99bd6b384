"""
Checkpoints, by concept:

  file.py        single-file checkpoints: what one holds, atomic checksummed saves, rotation, verified reads
  sharded.py     sharded checkpoints (data_parallel=fsdp), written and read through torch.distributed.checkpoint
  resume.py      loading either format, the newest that loads, the checks a resume passes, restoring the state
  evaluation.py  the model a checkpoint, a run or a folder of runs holds, for eval/, sample.py and the export

Re-exported here: the names train.py, sample.py, eval/, experiments/ and the tests import from `checkpoint`.
Every other public name of the single checkpoint.py this package replaced (model_from_checkpoint, verify_checksum,
load_sharded_state, ...) lives in one of the four files: `from checkpoint import verify_checksum` raises an
ImportError naming it ("checkpoint.verify_checksum moved: import it from checkpoint.file"; MOVED). A private or
unknown name is a plain AttributeError.
"""

from checkpoint.evaluation import load_model
from checkpoint.file import CheckpointError, FileCheckpoints, checksum_path, has_checkpoint, save_checkpoint, step_path
from checkpoint.resume import RunState, check_resumable, load_checkpoint, load_latest, restore_training_state, run_meta
from checkpoint.sharded import ShardedCheckpoints, _dcp_failure, _dcp_load, verify_manifest

__all__ = [
    "CheckpointError", "FileCheckpoints", "RunState", "ShardedCheckpoints", "_dcp_failure", "_dcp_load",
    "check_resumable", "checksum_path", "has_checkpoint", "load_checkpoint", "load_latest", "load_model",
    "restore_training_state", "run_meta", "save_checkpoint", "step_path", "verify_manifest",
]


# The public names of the single checkpoint.py that moved into this package's files without a re-export here, by
# the file that defines them now (a fixed historical fact; tests/test_checkpoints.py checks each is defined there).
MOVED = {
    "file": ("LATEST", "BEST", "CHECKSUMS", "tensor_records", "tensor_sha256", "verify_records", "rotate",
             "step_checkpoints", "remove_checkpoint", "recorded_checksum", "verify_checksum", "unreadable"),
    "sharded": ("META", "MANIFEST", "dcp_folder", "load_sharded_meta", "initialize_optimizer_state",
                "load_sharded_state", "named_optimizer_state"),
    "resume": ("STATE_KEYS", "RESUME_ONLY_KEYS", "stored_model_args"),
    "evaluation": ("model_from_checkpoint", "is_run_folder", "tokenizer_of"),
}


def __getattr__(name: str):
    """An old `from checkpoint import <name>` (or checkpoint.<name>) names the file that holds it now. An
    ImportError, not an AttributeError: `from checkpoint import x` turns an AttributeError into its own
    "cannot import name", dropping the message."""
    module = next((f"checkpoint.{file}" for file, names in MOVED.items() if name in names), None)
    if module is None:
        raise AttributeError(f"module 'checkpoint' has no attribute '{name}'", name=name)
    raise ImportError(f"checkpoint.{name} moved: import it from {module} (from {module} import {name})",
                      name=__name__)
