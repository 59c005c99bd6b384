"""No run lost to a bad checkpoint: the newest ckpt_keep checkpoints kept with checksums, resume
skipping a corrupt one, SIGKILL at several points (inside the checkpoint write too) then resume
ending bit-identical to an uninterrupted run, a full disk named without damage, and train.py's
named errors for bad input (no traceback, nothing written)."""

import glob
import json
import os
import subprocess
import sys
from fractions import Fraction

import pytest
import torch
import torch.distributed.checkpoint as dcp

from checkpoint import CheckpointError, checksum_path, load_checkpoint, load_latest, load_model, step_path
from conftest import PYTHON, REPO, flip_middle_byte, run_train, tiny_run_args
from files import file_sha256
from model import GPT, GPTConfig

STEPS = 10
COMMON = dict(max_iters=STEPS, lr_decay_iters=STEPS, ckpt_interval=2, eval_interval=100, log_interval=1)

# Runs train.py after arranging a SIGKILL (a power cut: no cleanup) at one point of the checkpoint
# code, on the `save`-th checkpoint this process writes.
KILL_SCRIPT = """
import os, signal, sys
import checkpoint.file as single_file, train
where, save = sys.argv[1], int(sys.argv[2])
saves = [0]

def die():
    os.kill(os.getpid(), signal.SIGKILL)

real_save, real_write, real_link, real_remove = single_file.save_checkpoint, single_file._ErrorKeepingWriter.write, single_file._link, os.remove

def counting_save(*args, **kwargs):
    saves[0] += 1
    return real_save(*args, **kwargs)

def write(self, data):
    if where == "inside the write" and saves[0] == save and len(data) > 100:
        real_write(self, data[: len(data) // 2])
        die()
    if where == "disk full" and saves[0] == save:
        raise OSError(28, "No space left on device")
    return real_write(self, data)

def link(target, name):
    if where == "before ckpt.pt moves" and saves[0] == save:
        die()
    return real_link(target, name)

def remove(path):
    if where == "while removing old ones" and saves[0] == save:
        die()
    return real_remove(path)

single_file.save_checkpoint, single_file._ErrorKeepingWriter.write, single_file._link = counting_save, write, link
os.remove = remove
train.main(sys.argv[3:])
"""


def run_with_fault(where: str, save: int, args: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run([PYTHON, "-c", KILL_SCRIPT, where, str(save), *args], capture_output=True, text=True,
                          cwd=REPO, env=dict(os.environ, OMP_NUM_THREADS="1"), timeout=300)


def weights(out_dir) -> dict:
    return torch.load(os.path.join(out_dir, "ckpt.pt"), weights_only=True)["model"]


@pytest.fixture(scope="module")
def uninterrupted(tiny_dataset, tmp_path_factory) -> str:
    out = str(tmp_path_factory.mktemp("uninterrupted") / "run")
    run_train(tiny_run_args(tiny_dataset, out, **COMMON))
    return out


def test_the_newest_checkpoints_are_kept_with_checksums(uninterrupted, tiny_dataset, tmp_path):
    names = sorted(os.path.basename(p) for p in glob.glob(os.path.join(uninterrupted, "ckpt*")))
    assert names == ["ckpt.pt", "ckpt_0000008.pt", "ckpt_0000010.pt"]
    assert os.path.samefile(os.path.join(uninterrupted, "ckpt.pt"), os.path.join(uninterrupted, "ckpt_0000010.pt"))
    out = str(tmp_path / "best")
    run_train(tiny_run_args(tiny_dataset, out, **{**COMMON, "eval_interval": 2, "ckpt_keep": 1,
                                                  "ckpt_keep_best": True}))
    best = torch.load(os.path.join(out, "ckpt_best.pt"), weights_only=True)
    assert best["best_val_loss"] == torch.load(os.path.join(out, "ckpt.pt"), weights_only=True)["best_val_loss"]
    assert len(glob.glob(os.path.join(out, "ckpt_0*.pt"))) == 1


@pytest.mark.parametrize("where, save, resumed_step", [
    ("inside the write", 3, 4),  # the 3rd save (step 6) dies half-written: step 4 is the last durable one
    ("before ckpt.pt moves", 2, 4),  # step 4 is complete, its checksums inside, before ckpt.pt points at it
    ("while removing old ones", 3, 6),
])
def test_sigkill_then_resume_ends_bit_identical(where, save, resumed_step, uninterrupted, tiny_dataset, tmp_path):
    out = str(tmp_path / "run")
    killed = run_with_fault(where, save, tiny_run_args(tiny_dataset, out, **COMMON))
    assert killed.returncode == -9, killed.stderr[-2000:]
    resumed = run_train(tiny_run_args(tiny_dataset, out, init_from="resume", **COMMON))
    assert f"ckpt_{resumed_step:07d}.pt at step {resumed_step}" in resumed.stdout
    got, want = weights(out), weights(uninterrupted)
    assert all(torch.equal(got[k], want[k]) for k in want)


def test_sigkill_between_checkpoints_then_resume_ends_bit_identical(uninterrupted, tiny_dataset, tmp_path):
    out = str(tmp_path / "run")
    proc = subprocess.Popen([sys.executable, str(REPO / "train.py")] + tiny_run_args(tiny_dataset, out, **COMMON),
                            cwd=REPO, text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            env=dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1"))
    for line in proc.stdout:
        if line.startswith("step 5/"):
            proc.kill()
            break
    proc.wait(timeout=60)
    run_train(tiny_run_args(tiny_dataset, out, init_from="resume", **COMMON))
    got, want = weights(out), weights(uninterrupted)
    assert all(torch.equal(got[k], want[k]) for k in want)


def test_resume_skips_a_corrupt_checkpoint_and_names_it(uninterrupted, tiny_dataset, tmp_path):
    out = str(tmp_path / "run")
    run_train(tiny_run_args(tiny_dataset, out, **{**COMMON, "max_iters": 8}))
    newest = os.path.join(out, "ckpt_0000008.pt")
    with open(newest, "r+b") as f:  # a copy cut short (ckpt.pt is the same file)
        f.truncate(os.path.getsize(newest) // 2)
    resumed = run_train(tiny_run_args(tiny_dataset, out, init_from="resume", **COMMON))
    assert "skipping checkpoint" in resumed.stdout and "ckpt_0000008.pt" in resumed.stdout
    assert "ckpt_0000006.pt at step 6" in resumed.stdout
    got, want = weights(out), weights(uninterrupted)
    assert all(torch.equal(got[k], want[k]) for k in want)


def test_no_usable_checkpoint_is_a_named_error(tiny_dataset, tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    (out / "ckpt.pt").write_bytes(b"PK\x03\x04 a checkpoint cut short")  # an old-style run's only checkpoint
    proc = run_train(tiny_run_args(tiny_dataset, str(out), init_from="resume"), check=False)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "no usable checkpoint" in proc.stderr and "ckpt.pt is unreadable: " in proc.stderr
    assert "not a torch zip archive" in proc.stderr and "no checksum recorded" in proc.stderr


def test_an_unpicklable_checkpoint_is_named_without_torchs_unsafe_advice(tiny_dataset, tmp_path):
    """A checkpoint whose pickle names a class torch's weights_only loader refuses: said so, with its size and
    checksum, not torch's advice to load it with weights_only=False (unsafe, and wrong for a damaged file)."""
    out = tmp_path / "run"
    out.mkdir()
    torch.save({"model": {}, "model_args": {}, "payload": Fraction(1, 3)}, out / "ckpt.pt")
    proc = run_train(tiny_run_args(tiny_dataset, str(out), init_from="resume"), check=False)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "ckpt.pt is unreadable: " in proc.stderr and "its contents do not unpickle (UnpicklingError)" in proc.stderr
    assert "weights_only" not in proc.stderr, proc.stderr


def test_a_finished_run_resumed_says_it_is_complete_and_its_folder_samples(tiny_dataset, tmp_path):
    out, settings = str(tmp_path / "run"), dict(max_iters=4, eval_interval=2, vocab_size=50304)  # (GPT-2's: sampled)
    run_train(tiny_run_args(tiny_dataset, out, **settings))
    again = run_train(tiny_run_args(tiny_dataset, out, init_from="auto", **settings))
    assert f"the run in {out} is complete: its checkpoint is at step 4 of 4" in again.stdout, again.stdout
    # sample.py pointed at the run's folder (not a checkpoint in it) samples from its newest verified checkpoint
    proc = subprocess.run([PYTHON, "sample.py", "--checkpoint", out, "--max_new_tokens=4", "--num_samples=1"],
                          cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert f"{out} is a run's folder: using its newest verified checkpoint, {out}/ckpt_0000004.pt" in proc.stderr


def test_a_full_disk_is_named_and_the_previous_checkpoint_survives(tiny_dataset, tmp_path):
    out = str(tmp_path / "run")
    proc = run_with_fault("disk full", 2, tiny_run_args(tiny_dataset, out, **COMMON))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    assert "could not write checkpoint" in proc.stderr and "No space left on device" in proc.stderr
    path, ckpt = load_latest(out)
    assert ckpt["step"] == 2 and path.endswith("ckpt_0000002.pt")
    assert not glob.glob(os.path.join(out, "*.tmp"))


# ----------------------------------------------------------------------------- bad input to train.py


def config_file(tmp_path, text: str) -> str:
    path = tmp_path / "bad_config.py"
    path.write_text(text)
    return str(path)


@pytest.mark.parametrize("bad, message", [
    (dict(n_head=5, n_embd=128), "n_embd=128 is not divisible by n_head=5"),
    (dict(learning_rate=-1), "'learning_rate' must be positive"),
    (dict(beta2=1.5), "'beta2' must be in [0, 1)"),
    (dict(block_size=100_000, total_batch_size=800_000), "hold no window of block_size + 1"),
    (dict(micro_batch_size=3), "not a multiple of micro_batch_size * block_size"),
    (dict(optimizer="adam"), "choose one of adamw, mars, muon"),
])
def test_bad_settings_are_named_before_any_work(bad, message, tiny_dataset, tmp_path):
    out = tmp_path / "run"
    proc = run_train(tiny_run_args(tiny_dataset, str(out)) + [f"--{k}={v}" for k, v in bad.items()], check=False)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr and message in proc.stderr, proc.stderr
    assert not out.exists()


def test_a_config_file_with_a_syntax_error_is_named(tiny_dataset, tmp_path):
    path = config_file(tmp_path, "n_layer = 2\nlearning_rate = 3e-4 +\n")
    proc = run_train([path] + tiny_run_args(tiny_dataset, str(tmp_path / "run")), check=False)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert f"config file {path}, line 2" in proc.stderr


def test_resuming_with_another_model_size_is_refused(tiny_dataset, tmp_path):
    out = str(tmp_path / "run")
    run_train(tiny_run_args(tiny_dataset, out, max_iters=2))
    # (run.lock, the out_dir lock, is no output: it names whichever process holds it, this one too)
    outputs = lambda: {p: open(p, "rb").read() for p in glob.glob(os.path.join(out, "*")) if not p.endswith("run.lock")}
    before = outputs()
    proc = run_train(tiny_run_args(tiny_dataset, out, max_iters=4, init_from="resume", n_layer=3), check=False)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr and "differs from the config's" in proc.stderr
    assert outputs() == before


def flip_byte_of(path: str, tensor: torch.Tensor) -> None:
    """Flip one byte in the middle of a tensor's bytes where they lie in the checkpoint file."""
    data = bytearray(open(path, "rb").read())
    raw = tensor.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()
    at = data.find(raw)
    assert at >= 0 and data.find(raw, at + 1) < 0  # found, once
    data[at + len(raw) // 2] ^= 0xFF
    open(path, "wb").write(bytes(data))


def test_a_copied_checkpoint_verifies_for_every_reader(tiny_dataset, tmp_path):
    """A run folder copied with cp -r (ckpt.pt a plain file, no longer the hard link), a byte of the model's
    weights flipped: sample and the HF export (eval/ reads through the same load_model) refuse it by name,
    with no traceback. A byte of the
    optimizer state flipped in the copy's newest checkpoint: those readers still load the model, which
    they alone read and verify; resume skips it, naming the tensor, and continues from the older one."""
    out, copy = str(tmp_path / "run"), str(tmp_path / "copy")
    model = dict(eval_interval=3, vocab_size=50304)  # GPT-2's vocabulary: sample.py writes with GPT-2's tokenizer
    run_train(tiny_run_args(tiny_dataset, out, max_iters=6, **model))
    subprocess.run(["cp", "-r", out, copy], check=True)
    latest, newest = os.path.join(copy, "ckpt.pt"), step_path(copy, 6)
    assert not os.path.samefile(latest, newest)
    flip_byte_of(latest, torch.load(latest, weights_only=True)["model"]["transformer.h.0.mlp.c_fc.weight"])
    readers = {
        "sample": [PYTHON, str(REPO / "sample.py"), "--device", "cpu", "--num_samples", "1",
                   "--max_new_tokens", "2", "--checkpoint"],
        "export": [PYTHON, "-m", "eval.export_hf", "--out", str(tmp_path / "hf"), "--checkpoint"],
    }
    for command in readers.values():
        proc = subprocess.run(command + [latest], capture_output=True, text=True, cwd=REPO)
        assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
        assert "model/transformer.h.0.mlp.c_fc.weight differs from the recorded sha256" in proc.stderr

    flip_byte_of(newest, torch.load(newest, weights_only=True)["optimizer"]["state"][0]["exp_avg"])
    proc = subprocess.run(readers["sample"] + [newest], capture_output=True, text=True, cwd=REPO)
    assert proc.returncode == 0 and "warning" not in proc.stderr, proc.stderr[-2000:]
    proc = run_train(tiny_run_args(tiny_dataset, copy, max_iters=9, init_from="resume", **model))
    output = proc.stdout + proc.stderr
    assert "skipping checkpoint" in output and "optimizer/state/0/exp_avg differs" in output, output[-3000:]
    assert f"resuming {step_path(copy, 3)} at step 3" in output, output[-3000:]


def test_sample_and_eval_pointed_at_a_folder_of_runs_take_its_newest_run(tiny_dataset, tmp_path, capsys):
    """The quickstart's out_dir holds one run per `bash scripts/quickstart.sh`, each in a folder named by its
    start time. sample.py pointed at it (eval/ and the export read through the same load_model) takes the
    newest run that has a checkpoint, naming it on stderr. A folder whose runs' names do not tell the newest
    lists them to choose from; one with no run says so and how to get one; neither with a traceback."""
    import sample

    runs = tmp_path / "quickstart"
    older, newer, unsaved = (str(runs / name) for name in ("20261127-090000", "20261127-101500", "20261127-113000"))
    settings = dict(max_iters=2, eval_interval=2, tokenizer="bytes", vocab_size=320)  # (sample.py reads bytes)
    run_train(tiny_run_args(tiny_dataset, older, seed=1, **settings))
    run_train(tiny_run_args(tiny_dataset, newer, seed=2, **settings))
    os.makedirs(unsaved)  # a run started later that has not saved a checkpoint yet: passed over
    subprocess.run(["cp", os.path.join(newer, "config.json"), unsaved], check=True)

    model, tokenizer = load_model(str(runs))
    assert f"holds 2 runs (20261127-090000, 20261127-101500): using the newest, {newer}" in capsys.readouterr().err
    assert tokenizer == "bytes"
    assert all(torch.equal(v, load_model(newer)[0].state_dict()[k]) for k, v in model.state_dict().items())
    args = ["--device", "cpu", "--num_samples", "1", "--max_new_tokens", "4", "--checkpoint"]
    assert sample.main(args + [str(runs)]) == sample.main(args + [newer]) != sample.main(args + [older])

    sweep = tmp_path / "sweep"  # runs named by their settings, as a sweep names them
    os.makedirs(sweep)
    os.symlink(older, sweep / "lr_3e-3_seed1")
    os.symlink(newer, sweep / "lr_3e-3_seed2")
    with pytest.raises(CheckpointError, match=r"holds 2 runs \(lr_3e-3_seed1, lr_3e-3_seed2\) and their names do "
                                              r"not say which is the newest: point at the one to use"):
        load_model(str(sweep))

    waiting = tmp_path / "waiting"  # its one run has not saved yet
    os.makedirs(waiting)
    os.symlink(unsaved, waiting / "20261127-113000")
    empty = tmp_path / "empty"
    os.makedirs(empty)
    capsys.readouterr()
    for folder, message in [(empty, "holds no checkpoint and no run with one; point at a checkpoint"),
                            (waiting, "its runs 20261127-113000 have not saved one yet")]:
        with pytest.raises(SystemExit) as exit:
            sample.main(args + [str(folder)])
        err = capsys.readouterr().err
        assert exit.value.code == 2 and message in err and "Traceback" not in err, err


@pytest.mark.quick
def test_a_checkpoint_from_before_the_checksums_inside_is_verified_by_its_file(tmp_path):
    """A checkpoint written before the checksums inside (its file's sha256 in a .sha256 beside it) still
    loads verified, and a flipped byte is named; with neither, it loads with a warning."""
    path = str(tmp_path / "ckpt_0000001.pt")
    torch.save(dict(model={"w": torch.arange(1000.0)}, model_args={}, step=1), path)
    with open(checksum_path(path), "w") as f:
        f.write(file_sha256(path) + "\n")
    assert load_checkpoint(path)["step"] == 1
    flip_byte_of(path, torch.arange(1000.0))
    with pytest.raises(CheckpointError, match="differs from the recorded"):
        load_checkpoint(path)
    os.remove(checksum_path(path))
    warnings = []
    assert load_checkpoint(path, log=warnings.append)["step"] == 1 and "no checksum recorded" in warnings[0]


@pytest.mark.quick
def test_a_sharded_checkpoint_from_before_model_and_optimizer_were_separate_still_loads(tmp_path):
    """Sharded checkpoints first held one DCP checkpoint of the model and optimizer together in the
    folder itself: load_model reads and verifies it still (one process, no process group)."""
    config = GPTConfig(n_layer=1, n_head=2, n_embd=16, block_size=8, vocab_size=64)
    model, folder = GPT(config), str(tmp_path / "ckpt_0000002")
    dcp.save({"model": model.state_dict(), "optimizer": {"state": {}}}, checkpoint_id=folder)
    torch.save(dict(model_args=vars(config), step=2, config={"tokenizer": "gpt2"}), os.path.join(folder, "meta.pt"))
    files = {name: {"bytes": os.path.getsize(os.path.join(folder, name)),
                    "sha256": file_sha256(os.path.join(folder, name))} for name in os.listdir(folder)}
    with open(os.path.join(folder, "manifest.json"), "w") as f:
        json.dump({"files": files}, f)
    loaded, tokenizer = load_model(folder)
    assert tokenizer == "gpt2" and loaded.lm_head.weight is loaded.transformer.wte.weight
    assert all(torch.equal(v, loaded.state_dict()[k]) for k, v in model.state_dict().items())
    flip_middle_byte(os.path.join(folder, "__0_0.distcp"))
    with pytest.raises(CheckpointError, match="__0_0.distcp's sha256 differs"):
        load_model(folder)


def test_a_sharded_checkpoint_entry_the_run_has_no_place_for_is_refused_named(tmp_path):
    """DCP reads only the entries a state dict asks for, so an entry of the checkpoint that the run's state
    lacks (state another setting or version of an optimizer kept) would be dropped without a word: the load
    refuses it, naming it, before reading anything; the same state with a place for it loads it."""
    from checkpoint import _dcp_load

    folder = str(tmp_path / "optimizer")
    dcp.save({"optimizer": {"state": {"w": {"exp_avg": torch.ones(3), "last_grad": torch.full((3,), 2.0)}}}},
             checkpoint_id=folder, no_dist=True)
    lacking = {"optimizer": {"state": {"w": {"exp_avg": torch.zeros(3)}}}}
    with pytest.raises(CheckpointError, match=r"holds 1 entries this run's optimizer has no place for \(first: "
                                              r"optimizer\.state\.w\.last_grad\), which a load would drop"):
        _dcp_load(lacking, folder)
    assert torch.equal(lacking["optimizer"]["state"]["w"]["exp_avg"], torch.zeros(3))  # nothing read
    whole = {"optimizer": {"state": {"w": {"exp_avg": torch.zeros(3), "last_grad": torch.zeros(3)}}}}
    _dcp_load(whole, folder)
    assert torch.equal(whole["optimizer"]["state"]["w"]["last_grad"], torch.full((3,), 2.0))

