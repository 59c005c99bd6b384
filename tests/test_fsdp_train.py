"""
train.py under data_parallel=fsdp (torchrun, gloo): a corrupt sharded checkpoint refused by the readers of
its model and skipped by resume with its reason; a rank killed in the middle of a save; activation
checkpointing; in-loop HellaSwag. Resume from every kind of checkpoint, for every optimizer, is
tests/test_resume_matrix.py.
"""

import json
import os
import signal
import subprocess
import sys
import time

import torch

from checkpoint import load_model, verify_manifest
from conftest import PYTHON, REPO, flip_middle_byte, run_train, tiny_run_args

COMMON = dict(lr_decay_iters=12, eval_interval=4, optimizer="mars", micro_batch_size=4)


def weights(path: str) -> dict:
    return load_model(path)[0].state_dict()


def test_a_corrupt_sharded_checkpoint_is_skipped_with_its_reason(tiny_dataset, tmp_path):
    """A sharded run copied with cp -r: a byte of rank 1's optimizer shard flipped, sample.py still reads
    the model (it verifies the model's files alone); a byte of rank 0's model shard flipped, sample and
    the HF export refuse it by name, with no traceback; resume skips it with its reason, names a save
    killed midway (ckpt_<step>.tmp) and continues from the older checkpoint."""
    out, copy = str(tmp_path / "run"), str(tmp_path / "copy")
    sharded = dict(COMMON, data_parallel="fsdp", vocab_size=50304)  # GPT-2's vocabulary: sample.py's tokenizer's
    proc = run_train(tiny_run_args(tiny_dataset, out, max_iters=8, **sharded), nproc=2)
    assert "Warning" not in proc.stderr, proc.stderr[-3000:]  # nothing on the console a user cannot act on
    subprocess.run(["cp", "-r", out, copy], check=True)
    newest = os.path.join(copy, "ckpt_0000008")
    readers = {
        "sample": [PYTHON, str(REPO / "sample.py"), "--device", "cpu", "--num_samples", "1",
                   "--max_new_tokens", "2", "--checkpoint", newest],
        "export": [PYTHON, "-m", "eval.export_hf", "--out", str(tmp_path / "hf"), "--checkpoint", newest],
    }
    flip_middle_byte(os.path.join(newest, "optimizer", "__1_0.distcp"))
    proc = subprocess.run(readers["sample"], capture_output=True, text=True, cwd=REPO)
    assert proc.returncode == 0, proc.stderr[-2000:]
    flip_middle_byte(os.path.join(newest, "model", "__0_0.distcp"))
    for command in readers.values():
        proc = subprocess.run(command, capture_output=True, text=True, cwd=REPO)
        assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
        assert "model/__0_0.distcp's sha256 differs from the manifest's" in proc.stderr, proc.stderr[-2000:]

    os.makedirs(os.path.join(copy, "ckpt_0000010.tmp"))  # a save killed midway: never a candidate
    proc = run_train(tiny_run_args(tiny_dataset, copy, max_iters=10, init_from="resume", **sharded), nproc=2)
    output = proc.stdout + proc.stderr
    assert "skipping checkpoint" in output and "__0_0.distcp's sha256 differs" in output, output[-3000:]
    assert "ckpt_0000010.tmp is a save that did not complete" in output, output[-3000:]
    assert "resuming" in output and "ckpt_0000004 at step 4" in output


def test_activation_checkpointing_changes_no_number(tiny_dataset, tmp_path):
    """Each block's activations recomputed in the backward pass, dropout included: the same weights."""
    plain, recomputed = str(tmp_path / "plain"), str(tmp_path / "recomputed")
    common = dict(max_iters=6, eval_interval=6, dropout=0.1)
    run_train(tiny_run_args(tiny_dataset, plain, **common))
    run_train(tiny_run_args(tiny_dataset, recomputed, activation_checkpointing=True, **common))
    a, b = weights(os.path.join(plain, "ckpt.pt")), weights(os.path.join(recomputed, "ckpt.pt"))
    assert all(torch.equal(a[k], b[k]) for k in a)


def worker_of_rank(launcher_pid: int, rank: int) -> int | None:
    """The pid of torchrun's worker process for `rank` (from /proc: its parent and its RANK variable)."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                parent = int(f.read().rsplit(")", 1)[1].split()[1])
            with open(f"/proc/{entry}/environ", "rb") as f:
                environment = f.read().split(b"\0")
        except OSError:  # exited meanwhile
            continue
        if parent == launcher_pid and f"RANK={rank}".encode() in environment:
            return int(entry)
    return None


def test_a_rank_killed_in_the_middle_of_a_sharded_save_loses_nothing(tiny_dataset, tmp_path):
    """SIGKILL to rank 1 while ckpt_0000004 is being written (a model large enough that a save takes a
    while): the run fails, the half-written folder is never taken for a checkpoint, ckpt_0000002 still
    verifies, and the run resumes from it to the end."""
    out = str(tmp_path / "run")
    args = tiny_run_args(tiny_dataset, out, max_iters=6, data_parallel="fsdp", ckpt_interval=2, **COMMON) + [
        "--n_embd=128"]
    launcher = subprocess.Popen([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
                                 str(REPO / "train.py"), *args], cwd=REPO, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, env=dict(os.environ, OMP_NUM_THREADS="1"))
    saving = os.path.join(out, "ckpt_0000004.tmp")
    deadline = time.time() + 240
    while not os.path.isdir(saving) and launcher.poll() is None and time.time() < deadline:
        time.sleep(0.002)
    victim = worker_of_rank(launcher.pid, 1)
    assert victim is not None, launcher.communicate()[0].decode()[-3000:]
    os.kill(victim, signal.SIGKILL)
    output = launcher.communicate(timeout=240)[0].decode()
    assert launcher.returncode != 0, output[-3000:]
    assert not os.path.exists(os.path.join(out, "ckpt_0000004")), "the save completed before the kill: no fault"
    assert verify_manifest(os.path.join(out, "ckpt_0000002")) is None

    proc = run_train(args + ["--init_from=resume"], nproc=2)
    output = proc.stdout + proc.stderr
    assert "ckpt_0000002 at step 2" in output, output[-3000:]
    assert sorted(name for name in os.listdir(out) if name.startswith("ckpt")) == ["ckpt_0000004", "ckpt_0000006"]
    assert verify_manifest(os.path.join(out, "ckpt_0000006")) is None


def test_hellaswag_in_the_loop_sharded_scores_as_one_process(tiny_dataset, tmp_path):
    """In-loop HellaSwag under FSDP on 2 ranks: 5 examples split 3 / 2, so the ranks' shares take 3 and 2
    forwards of 4 sequences (a sharded forward is a collective: without the padding forwards rank 0
    waits for rank 1 forever); the scores equal one process's."""
    test_train = __import__("test_train")
    path = tmp_path / "hellaswag.jsonl"
    examples = [dict(ind=i, activity_label="Cooking", ctx_a="A man cracks an egg into a bowl.", ctx_b="he",
                     ctx="", endings=["whisks it.", "flies away [title] now.", "sings.", "eats the bowl."],
                     label=i % 4, split="val", source_id=f"x{i}") for i in range(5)]
    path.write_text("".join(json.dumps(e) + "\n" for e in examples))
    scores = {}
    for nproc, data_parallel in ((2, "fsdp"), (0, "ddp")):
        out = str(tmp_path / data_parallel)
        # (GPT-2's vocabulary: HellaSwag's text becomes GPT-2 tokens)
        run_train(tiny_run_args(tiny_dataset, out, max_iters=2, vocab_size=50304, hellaswag_interval=2,
                                hellaswag_file=str(path), data_parallel=data_parallel, **COMMON),
                  nproc=nproc, timeout=240)
        scores[data_parallel] = [(r["step"], r["count"], r["acc"], r["acc_norm"])
                                 for r in test_train.read_metrics(out, "hellaswag")]
    assert [row[:2] for row in scores["fsdp"]] == [(0, 5), (2, 5)]
    assert scores["fsdp"] == scores["ddp"]
