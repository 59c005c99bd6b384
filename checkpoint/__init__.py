"""
Checkpoints, by concept:

  file.py        single-file checkpoints: what one holds, atomic checksummed saves, rotation, verified reads
  sharded.py     sharded checkpoints (data_parallel=fsdp), written and read through torch.distributed.checkpoint
  resume.py      loading either format, the newest that loads, the checks a resume passes, restoring the state
  evaluation.py  the model a checkpoint, a run or a folder of runs holds, for eval/, sample.py and the export

Re-exported here: the names train.py, sample.py, eval/, experiments/ and the tests import from `checkpoint`; every
other name is imported from the file that defines it.
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

