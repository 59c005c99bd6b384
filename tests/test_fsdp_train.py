"""
train.py under data_parallel=fsdp (torchrun, gloo): sharded checkpoints through DCP, written
asynchronously, resumed bit-exact; read back by one process and by load_model; a corrupt one skipped
with its reason.
"""

import json
import os
import shutil

import torch

from checkpoint import load_model
from conftest import run_train, tiny_run_args

COMMON = dict(lr_decay_iters=12, eval_interval=4, optimizer="mars", micro_batch_size=4)


def weights(path: str) -> dict:
    return load_model(path)[0].state_dict()


def test_sharded_checkpoints_resume_bit_exact_and_load_anywhere(tiny_dataset, tmp_path):
    straight, halves, single = (str(tmp_path / name) for name in ("straight", "halves", "single"))
    run_train(tiny_run_args(tiny_dataset, straight, max_iters=12, data_parallel="fsdp", **COMMON), nproc=2)
    assert sorted(os.listdir(straight)) == ["ckpt_0000008", "ckpt_0000012", "config.json", "metrics.jsonl", "run.lock"]
    files = json.load(open(os.path.join(straight, "ckpt_0000012", "manifest.json")))["files"]
    assert {"__0_0.distcp", "__1_0.distcp", ".metadata", "meta.pt"} <= files.keys()  # each rank wrote its own

    # asynchronous saves, then a resume: bit for bit the uninterrupted run
    run_train(tiny_run_args(tiny_dataset, halves, max_iters=6, data_parallel="fsdp", async_checkpoint=True,
                            **COMMON), nproc=2)
    run_train(tiny_run_args(tiny_dataset, halves, max_iters=12, data_parallel="fsdp", init_from="resume", **COMMON),
              nproc=2)
    a, b = weights(os.path.join(straight, "ckpt_0000012")), weights(os.path.join(halves, "ckpt_0000012"))
    assert all(torch.equal(a[k], b[k]) for k in a)

    # a copy (cp -r) of the sharded run, resumed by one process: the same weights
    shutil.copytree(halves, single, symlinks=True)
    shutil.rmtree(os.path.join(single, "ckpt_0000012"))
    run_train(tiny_run_args(tiny_dataset, single, max_iters=12, init_from="resume", **COMMON))
    c = weights(os.path.join(single, "ckpt_0000012.pt"))
    assert max(((a[k] - c[k]).norm() / a[k].norm()).item() for k in a) < 1e-6


def test_a_corrupt_sharded_checkpoint_is_skipped_with_its_reason(tiny_dataset, tmp_path):
    out = str(tmp_path / "run")
    run_train(tiny_run_args(tiny_dataset, out, max_iters=8, data_parallel="fsdp", **COMMON), nproc=2)
    shard = os.path.join(out, "ckpt_0000008", "__1_0.distcp")
    data = bytearray(open(shard, "rb").read())
    data[len(data) // 2] ^= 0xFF  # one flipped byte in the middle of rank 1's shard
    open(shard, "wb").write(bytes(data))
    os.makedirs(os.path.join(out, "ckpt_0000010.tmp"))  # a save killed midway: never a candidate
    proc = run_train(tiny_run_args(tiny_dataset, out, max_iters=10, data_parallel="fsdp", init_from="resume",
                                   **COMMON), nproc=2)
    output = proc.stdout + proc.stderr
    assert "skipping checkpoint" in output and "__1_0.distcp's sha256 differs" in output, output[-3000:]
    assert "resuming" in output and "ckpt_0000004 at step 4" in output


def test_activation_checkpointing_changes_no_number(tiny_dataset, tmp_path):
    """Each block's activations recomputed in the backward pass, dropout included: the same weights."""
    plain, recomputed = str(tmp_path / "plain"), str(tmp_path / "recomputed")
    common = dict(max_iters=6, eval_interval=6, dropout=0.1)
    run_train(tiny_run_args(tiny_dataset, plain, **common))
    run_train(tiny_run_args(tiny_dataset, recomputed, activation_checkpointing=True, **common))
    a, b = weights(os.path.join(plain, "ckpt.pt")), weights(os.path.join(recomputed, "ckpt.pt"))
    assert all(torch.equal(a[k], b[k]) for k in a)
