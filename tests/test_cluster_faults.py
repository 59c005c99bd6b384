"""
The faults a shared cluster produces, reproduced for real: a full file system (a small tmpfs where
this machine lets us mount one, and always a file-size limit, which makes torch's zip writer fail
the same way), a read-only out_dir, two runs started in one out_dir at once (two real processes),
and a checkpoint whose bytes changed after it was written (ckpt.pt, the path users pass on).
"""

import contextlib
import glob
import json
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

from checkpoint import checksum_path, load_latest, step_path
from conftest import REPO, run_train, tiny_run_args

SMALL = dict(vocab_size=128, max_iters=12, eval_interval=6, optimizer="mars")  # a ~100 KB checkpoint


@contextlib.contextmanager
def small_filesystem(folder: str, size: str):
    """A real tmpfs of `size` mounted at folder (needs root or CAP_SYS_ADMIN: skips otherwise)."""
    os.makedirs(folder)
    if subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", folder], capture_output=True).returncode:
        pytest.skip("cannot mount a tmpfs here (not root); the file-size-limit test covers the full disk")
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", folder], check=True)


def fill(folder: str, leave_bytes: int) -> str:
    """Fill the file system of folder up to leave_bytes of free space; returns the filler's path."""
    filler = os.path.join(folder, "filler")
    free = shutil.disk_usage(folder).free
    with open(filler, "wb") as f:
        with contextlib.suppress(OSError):
            f.write(b"\0" * max(free - leave_bytes, 0))
    return filler


def assert_named_error(proc: subprocess.CompletedProcess, *fragments: str) -> None:
    assert proc.returncode == 2, (proc.returncode, proc.stderr[-2000:])
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    for fragment in fragments:
        assert fragment in proc.stderr, (fragment, proc.stderr[-2000:])


def assert_run_intact(out: str, step: int) -> None:
    """config.json parses, no temporary file is left, and the newest checkpoint (step) verifies and loads."""
    json.load(open(os.path.join(out, "config.json")))
    assert not glob.glob(os.path.join(out, "*.tmp")), os.listdir(out)
    path, ckpt = load_latest(out)
    assert path == step_path(out, step) and ckpt["step"] == step


def run_under_file_size_limit(args: list[str], limit_bytes: int) -> subprocess.CompletedProcess:
    """train.py with RLIMIT_FSIZE (ulimit -f): a write past limit_bytes fails with EFBIG, as on a full disk."""
    command = f'ulimit -f {limit_bytes // 1024} && exec "$@"'
    return subprocess.run(["bash", "-c", command, "bash", sys.executable, str(REPO / "train.py"), *args],
                          capture_output=True, text=True, cwd=REPO, timeout=300,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})


def test_a_checkpoint_larger_than_the_file_size_limit_is_named_and_nothing_is_lost(tiny_dataset, tmp_path):
    out = str(tmp_path / "run")
    run_train(tiny_run_args(tiny_dataset, out, **{**SMALL, "max_iters": 6}))
    limit = os.path.getsize(step_path(out, 6)) // 2
    proc = run_under_file_size_limit(tiny_run_args(tiny_dataset, out, init_from="resume", **SMALL), limit)
    assert_named_error(proc, "could not write checkpoint", "File too large", "free disk space")
    assert_run_intact(out, 6)
    assert not os.path.exists(step_path(out, 12))
    run_train(tiny_run_args(tiny_dataset, out, init_from="resume", **SMALL))  # with room again, it goes on
    assert_run_intact(out, 12)


def test_a_full_file_system_during_a_save_is_named_and_nothing_is_lost(tiny_dataset, tmp_path):
    with small_filesystem(str(tmp_path / "disk"), "8m") as disk:
        out = os.path.join(disk, "run")
        run_train(tiny_run_args(tiny_dataset, out, **{**SMALL, "max_iters": 6}))
        filler = fill(disk, leave_bytes=os.path.getsize(step_path(out, 6)) // 2)
        proc = run_train(tiny_run_args(tiny_dataset, out, init_from="resume", **SMALL), check=False)
        assert_named_error(proc, "could not write checkpoint", "No space left on device", "free disk space")
        assert_run_intact(out, 6)
        os.remove(filler)
        run_train(tiny_run_args(tiny_dataset, out, init_from="resume", **SMALL))
        assert_run_intact(out, 12)


def test_a_full_file_system_at_start_keeps_config_json(tiny_dataset, tmp_path):
    with small_filesystem(str(tmp_path / "disk"), "8m") as disk:
        out = os.path.join(disk, "run")
        run_train(tiny_run_args(tiny_dataset, out, **{**SMALL, "max_iters": 6}))
        config_before = open(os.path.join(out, "config.json")).read()
        fill(disk, leave_bytes=0)
        proc = run_train(tiny_run_args(tiny_dataset, out, init_from="resume", **SMALL), check=False)
        assert_named_error(proc, "cannot write the run's outputs", "No space left on device")
        assert open(os.path.join(out, "config.json")).read() == config_before  # not truncated in place
        assert_run_intact(out, 6)


def test_a_read_only_out_dir_is_named(tiny_dataset, tmp_path):
    with small_filesystem(str(tmp_path / "disk"), "8m") as disk:
        out = os.path.join(disk, "run")
        run_train(tiny_run_args(tiny_dataset, out, **{**SMALL, "max_iters": 6}))
        subprocess.run(["mount", "-o", "remount,ro", disk], check=True)
        proc = run_train(tiny_run_args(tiny_dataset, out, init_from="resume", **SMALL), check=False)
        assert_named_error(proc, "Read-only file system", "make the folder writable")
        assert_run_intact(out, 6)


def test_a_second_run_in_the_same_out_dir_is_refused_while_the_first_runs(tiny_dataset, tmp_path):
    out = str(tmp_path / "run")
    args = tiny_run_args(tiny_dataset, out, max_iters=1_000_000, lr_decay_iters=100, eval_interval=50,
                         log_interval=5)
    first = subprocess.Popen([sys.executable, str(REPO / "train.py"), *args], cwd=REPO, text=True,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, env={**os.environ, "OMP_NUM_THREADS": "1"})
    try:
        metrics = os.path.join(out, "metrics.jsonl")
        deadline = time.time() + 120
        while not (os.path.exists(metrics) and os.path.getsize(metrics)) and first.poll() is None:
            assert time.time() < deadline, "the first run never logged"
            time.sleep(0.2)
        second = run_train(args, check=False)
        assert_named_error(second, f"{out} is in use by another run (pid {first.pid} on", "choose another out_dir")
    finally:
        first.send_signal(signal.SIGTERM)  # preemption: the first run saves and stops
        first.communicate(timeout=120)
    rows = [json.loads(line) for line in open(os.path.join(out, "metrics.jsonl"))]  # every row whole
    assert rows and json.load(open(os.path.join(out, "config.json")))["argv"][1:] == args
    run_train(tiny_run_args(tiny_dataset, out, init_from="resume", max_iters=rows[-1]["step"] + 10,
                            lr_decay_iters=100, eval_interval=50, log_interval=5))  # the lock went with the process


def test_ckpt_pt_is_verified_where_users_pass_it(tiny_dataset, tmp_path):
    """ckpt.pt (a hard link to the newest ckpt_<step>.pt) with a flipped byte: sample.py refuses it; a
    copy without any checksum loads with a warning saying so."""
    out = str(tmp_path / "run")
    run_train(tiny_run_args(tiny_dataset, out, max_iters=6))  # GPT-2's vocabulary: sample.py prompts with <|endoftext|>
    latest = os.path.join(out, "ckpt.pt")
    copy = str(tmp_path / "elsewhere.pt")
    shutil.copy(latest, copy)
    with open(latest, "r+b") as f:
        f.seek(os.path.getsize(latest) // 2)
        byte = f.read(1)
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([byte[0] ^ 0xFF]))
    sample = [sys.executable, str(REPO / "sample.py"), "--device", "cpu", "--num_samples", "1", "--max_new_tokens", "2"]
    proc = subprocess.run(sample + ["--checkpoint", latest], capture_output=True, text=True, cwd=REPO)
    assert_named_error(proc, "ckpt.pt", "differs from the recorded")
    assert not os.path.exists(checksum_path(copy))
    proc = subprocess.run(sample + ["--checkpoint", copy], capture_output=True, text=True, cwd=REPO)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "no checksum recorded" in proc.stderr
