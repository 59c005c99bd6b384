"""train.py end to end on a tiny model: learning, accumulation, DDP, resume, preemption, failures."""

import contextlib
import functools
import json
import math
import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time

import pytest
import torch

from conftest import REPO, run_train, scenario_result, tiny_run_args
from config import TrainConfig
from checkpoint import save_checkpoint
from optim.schedule import scheduled_lr, set_learning_rates
from runlog import RunLog


def read_metrics(out_dir, kind: str) -> list[dict]:
    with open(os.path.join(out_dir, "metrics.jsonl")) as f:
        return [row for row in map(json.loads, f) if row["type"] == kind]


def load_weights(out_dir) -> dict:
    return torch.load(os.path.join(out_dir, "ckpt.pt"), weights_only=True)["model"]


def test_training_lowers_loss_and_writes_outputs(tiny_dataset, tmp_path):
    out = str(tmp_path / "run")
    proc = run_train(tiny_run_args(tiny_dataset, out, max_iters=30, eval_interval=10, vocab_size=50304))
    val = read_metrics(out, "val")
    assert [r["step"] for r in val] == [0, 10, 20, 30]
    assert re.search(r"^step 20: saved \S*ckpt_0000020\.pt in \d+\.\d s$", proc.stdout, re.MULTILINE), proc.stdout
    assert val[-1]["val_loss"] < val[0]["val_loss"] - 2.0  # starts near ln(50304) = 10.8
    train = read_metrics(out, "train")
    assert all(k in train[0] for k in ("loss", "lr", "grad_norm", "clip_rate", "tokens_per_s", "ms_per_step"))
    with open(os.path.join(out, "metrics.jsonl")) as f:  # (this process's CPU time on every row: core-seconds)
        cpu = [json.loads(line)["process_cpu_s"] for line in f]
    assert all(0 < a <= b for a, b in zip(cpu, cpu[1:])) and cpu[-1] > cpu[0]
    info = json.load(open(os.path.join(out, "config.json")))
    assert info["config"]["max_iters"] == 30 and info["code_version"] and info["grad_accum_steps"] == 1
    ckpt = torch.load(os.path.join(out, "ckpt.pt"), weights_only=True)
    assert ckpt["step"] == 30 and ckpt["tokens_seen"] == 30 * 256 and ckpt["config"]["seed"] == 7
    assert ckpt["best_val_loss"] == pytest.approx(min(r["val_loss"] for r in val))


def test_gradient_accumulation_equals_one_big_batch(tiny_dataset, tmp_path):
    # The same global batch as 1 micro-step of 8 or 4 micro-steps of 2: same gradients, so the
    # same weights after a few steps (to float rounding; SGD-like first steps amplify nothing here).
    # And 4 micro-steps of 2 with the loss through model.LinearCrossEntropy (fused_cross_entropy): the same.
    outs = []
    for micro, fused in ((8, False), (2, False), (2, True)):
        out = str(tmp_path / f"micro{micro}{'_fused' if fused else ''}")
        run_train(tiny_run_args(tiny_dataset, out, micro_batch_size=micro, max_iters=3, grad_clip=0.0,
                                fused_cross_entropy=fused))
        outs.append(load_weights(out))
    for other in outs[1:]:
        for name in outs[0]:
            torch.testing.assert_close(outs[0][name], other[name], rtol=1e-4, atol=2e-6)
    assert any(not torch.equal(outs[1][name], outs[2][name]) for name in outs[1])  # the fused loss ran: its rounding


@pytest.mark.quick
def test_gradient_accumulation_gradients_directly(tiny_dataset):
    from data.loader import TokenWindows, TrainBatches
    from model import GPT, GPTConfig

    torch.manual_seed(0)
    model = GPT(GPTConfig(block_size=32, n_layer=2, n_head=2, n_embd=32))
    batches = TrainBatches(TokenWindows(tiny_dataset, "train", 32, 50304), seed=1, sequences_per_step=8)

    def grads(micro: int) -> list[torch.Tensor]:
        model.zero_grad(set_to_none=True)
        for m in range(8 // micro):
            x, y = batches.micro_batch(0, m, micro, rank=0, world_size=1)
            (model(x, y)[1] / (8 // micro)).backward()
        return [p.grad.clone() for p in model.parameters()]

    for a, b in zip(grads(8), grads(2)):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-7)


def two_rank_scenarios(tiny_dataset: str, folder) -> list[tuple]:
    """For conftest.two_ranks: the 2-rank half of test_two_process_ddp_matches_one_process."""
    return [("train_ddp", "ranks:train", dict(args=tiny_run_args(tiny_dataset, str(folder / "train_ddp"),
                                                                 micro_batch_size=2, max_iters=8)))]


def test_two_process_ddp_matches_one_process(tiny_dataset, tmp_path, two_ranks, two_ranks_folder, rel=1e-4):
    """rel: fp32 on CPU; tests/test_cuda.py runs it in bf16, where other micro-batch shapes round otherwise."""
    single, ddp = str(tmp_path / "single"), str(two_ranks_folder / "train_ddp")
    run_train(tiny_run_args(tiny_dataset, single, micro_batch_size=4, max_iters=8))
    assert scenario_result(two_ranks, "train_ddp")["status"] == 0
    a, b = read_metrics(single, "train"), read_metrics(ddp, "train")
    assert [r["step"] for r in a] == [r["step"] for r in b]
    for ra, rb in zip(a, b):
        assert ra["loss"] == pytest.approx(rb["loss"], rel=rel)
    for ra, rb in zip(read_metrics(single, "val"), read_metrics(ddp, "val")):
        assert ra["val_loss"] == pytest.approx(rb["val_loss"], rel=rel)
    info = json.load(open(os.path.join(ddp, "config.json")))
    assert info["world_size"] == 2 and info["grad_accum_steps"] == 2


@pytest.mark.parametrize("model", ["small", "llama-124m"])
def test_resume_is_bit_exact(tiny_dataset, tmp_path, model):
    straight, halves = str(tmp_path / "straight"), str(tmp_path / "halves")
    # the schedule must not depend on max_iters
    common = dict(lr_decay_iters=12, eval_interval=4, dropout=0.1, model=model)
    run_train(tiny_run_args(tiny_dataset, straight, max_iters=12, **common))
    run_train(tiny_run_args(tiny_dataset, halves, max_iters=6, **common))
    with pytest.raises(AssertionError, match="already exists"):  # a new run never overwrites a checkpoint
        run_train(tiny_run_args(tiny_dataset, halves, max_iters=12, **common))
    run_train(tiny_run_args(tiny_dataset, halves, max_iters=12, init_from="resume", **common))
    a, b = load_weights(straight), load_weights(halves)
    assert all(torch.equal(a[k], b[k]) for k in a)
    sa = torch.load(os.path.join(straight, "ckpt.pt"), weights_only=True)["optimizer"]["state"]
    sb = torch.load(os.path.join(halves, "ckpt.pt"), weights_only=True)["optimizer"]["state"]
    assert all(torch.equal(sa[i]["exp_avg_sq"], sb[i]["exp_avg_sq"]) for i in sa)


def test_interrupted_checkpoint_write_leaves_previous_loadable(tmp_path, monkeypatch):
    save_checkpoint(str(tmp_path), {"step": 1, "w": torch.ones(3)}, keep=2)

    def crash_mid_write(obj, f, *args, **kwargs):
        f.write(b"PK\x03\x04 half a checkpoint")
        raise KeyboardInterrupt

    monkeypatch.setattr(torch, "save", crash_mid_write)
    with pytest.raises(KeyboardInterrupt):
        save_checkpoint(str(tmp_path), {"step": 2, "w": torch.zeros(3)}, keep=2)
    monkeypatch.undo()
    state = torch.load(tmp_path / "ckpt.pt", weights_only=True)
    assert state["step"] == 1 and torch.equal(state["w"], torch.ones(3))


def test_sigterm_saves_a_checkpoint_and_the_run_resumes(tiny_dataset, tmp_path):
    out = str(tmp_path / "run")
    args = tiny_run_args(tiny_dataset, out, max_iters=100000, eval_interval=100000, log_interval=1)
    proc = subprocess.Popen([sys.executable, str(REPO / "train.py")] + args, cwd=REPO, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            env=dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1"))
    for line in proc.stdout:  # wait until training is under way
        if line.startswith("step 3/"):
            break
    proc.send_signal(signal.SIGTERM)
    output, _ = proc.communicate(timeout=120)
    assert proc.returncode == 128 + signal.SIGTERM, output  # 143: preempted, not finished (0)
    assert "stopped by SIGTERM" in output
    step = torch.load(os.path.join(out, "ckpt.pt"), weights_only=True)["step"]
    assert step >= 3
    run_train(tiny_run_args(tiny_dataset, out, max_iters=step + 2, init_from="resume", eval_interval=100000))
    assert torch.load(os.path.join(out, "ckpt.pt"), weights_only=True)["step"] == step + 2


def requeue_signal_during_the_imports(args: list[str], **env: str) -> tuple[int, str]:
    """train.py sent SIGUSR1 while a real python3 still imports torch; (its exit status, its output)."""
    proc = subprocess.Popen([sys.executable, str(REPO / "train.py")] + args, cwd=REPO, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            env=dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1", **env))
    time.sleep(0.5)  # (torch's import alone takes seconds)
    proc.send_signal(signal.SIGUSR1)
    output, _ = proc.communicate(timeout=120)
    return proc.returncode, output


def test_a_requeue_signal_during_the_imports_is_kept_for_the_first_step(tiny_dataset, tmp_path):
    """SIGUSR1 (SLURM's requeue signal) during the imports: kept, not fatal (its default action ends the
    process, and SLURM then records the job failed, never requeued); the run stops at its first step with a
    checkpoint, exit status 128 + SIGUSR1 outside a SLURM job."""
    out = str(tmp_path / "run")
    status, output = requeue_signal_during_the_imports(tiny_run_args(tiny_dataset, out))
    assert status == 128 + signal.SIGUSR1, output
    assert "stopped by SIGUSR1 at step 1" in output, output
    assert torch.load(os.path.join(out, "ckpt.pt"), weights_only=True)["step"] == 1


def test_a_requeue_signal_in_the_last_step_of_a_slurm_job_finishes_the_run_without_a_requeue(tiny_dataset,
                                                                                               tmp_path):
    """The same signal seen at the last step (a run of one step) inside a SLURM job: the run has finished, so
    it exits 0, neither requeueing the job (whose next life would find nothing to do) nor asking for a resume."""
    out = str(tmp_path / "run")
    status, output = requeue_signal_during_the_imports(tiny_run_args(tiny_dataset, out, max_iters=1),
                                                       SLURM_JOB_ID="999999")
    assert status == 0 and "the run finished at step 1; SIGUSR1 came during its last steps" in output, output
    assert not any(said in output for said in ("requeued SLURM", "not requeueing", "could not requeue",
                                                "resume with")), output
    assert torch.load(os.path.join(out, "ckpt.pt"), weights_only=True)["step"] == 1


def test_nan_loss_stops_and_keeps_the_last_good_checkpoint(tiny_dataset, tmp_path):
    out = str(tmp_path / "run")
    run_train(tiny_run_args(tiny_dataset, out, max_iters=4))
    before = open(os.path.join(out, "ckpt.pt"), "rb").read()
    # An absurd learning rate blows the weights up: the loss turns inf/NaN within a few steps.
    proc = run_train(tiny_run_args(tiny_dataset, out, max_iters=40, init_from="resume", learning_rate=1e30,
                                   grad_clip=0.0, eval_interval=2), check=False)
    assert proc.returncode != 0
    assert "training loss is nan" in proc.stderr and "ckpt.pt still holds the last good state" in proc.stderr
    assert open(os.path.join(out, "ckpt.pt"), "rb").read() == before


def test_bad_config_and_missing_data_fail_before_any_work(tiny_dataset, tmp_path):
    proc = run_train(tiny_run_args(tiny_dataset, str(tmp_path / "a"), lerning_rate=1.0), check=False)
    assert proc.returncode != 0 and "'lerning_rate'" in proc.stderr and "'learning_rate'" in proc.stderr
    proc = run_train(tiny_run_args(str(tmp_path / "nowhere"), str(tmp_path / "b")), check=False)
    assert proc.returncode != 0 and "no 'train' token shards" in proc.stderr
    proc = run_train(tiny_run_args(tiny_dataset, str(tmp_path / "c"), micro_batch_size=3), check=False)
    assert proc.returncode != 0 and "not a multiple" in proc.stderr
    assert not os.path.exists(tmp_path / "a") and not os.path.exists(tmp_path / "c")


def test_lr_schedules():
    cfg = TrainConfig(learning_rate=1.0, min_lr=0.1, warmup_iters=10, max_iters=110)
    lr = functools.partial(scheduled_lr, base_lr=1.0, floor=0.1, cfg=cfg, total_iters=110)
    assert lr(0) == 0 and lr(5) == 0.5
    assert lr(10) == 1.0
    assert lr(60) == pytest.approx(0.55)  # halfway through the cosine
    assert lr(110) == pytest.approx(0.1) and lr(500) == pytest.approx(0.1)
    wsd = TrainConfig(learning_rate=1.0, min_lr=0.0, warmup_iters=10, lr_schedule="wsd", wsd_decay_frac=0.2)
    lr = functools.partial(scheduled_lr, base_lr=1.0, floor=0.0, cfg=wsd, total_iters=110)
    assert lr(50) == 1.0 and lr(88) == 1.0
    assert lr(99) == pytest.approx(0.5)
    assert scheduled_lr(1000, 1.0, 0.0, TrainConfig(lr_schedule="constant", warmup_iters=0), 10) == 1.0


def test_other_groups_end_at_a_scaled_or_the_absolute_min_lr():
    model = torch.nn.Linear(2, 2)
    optimizer = torch.optim.SGD([dict(params=[model.weight], lr=1.0), dict(params=[model.bias], lr=0.2)])
    for group in optimizer.param_groups:
        group["base_lr"] = group["lr"]
    for mode, side_floor in (("scaled", 0.2 * 0.1), ("absolute", 0.1)):
        cfg = TrainConfig(learning_rate=1.0, min_lr=0.1, warmup_iters=10, max_iters=110, min_lr_groups=mode)
        assert set_learning_rates(optimizer, 5, cfg, 110) == 0.5
        assert [g["lr"] for g in optimizer.param_groups] == [0.5, 0.1]  # warmup: from each base lr
        set_learning_rates(optimizer, 110, cfg, 110)
        assert [g["lr"] for g in optimizer.param_groups] == pytest.approx([0.1, side_floor])


@pytest.mark.parametrize("model", ["small", "llama-124m"])
def test_hellaswag_in_the_loop(tiny_dataset, tmp_path, model):
    examples = [dict(ind=i, activity_label="Cooking", ctx_a="A man cracks an egg into a bowl.", ctx_b="he",
                     ctx="", endings=["whisks it.", "flies away [title] now.", "sings.", "eats the bowl."],
                     label=i % 4, split="val", source_id=f"x{i}") for i in range(6)]
    path = tmp_path / "hellaswag.jsonl"
    path.write_text("".join(json.dumps(e) + "\n" for e in examples))
    out = str(tmp_path / "run")
    run_train(tiny_run_args(tiny_dataset, out, max_iters=4, vocab_size=50304, hellaswag_interval=2,  # (GPT-2 tokens)
                            hellaswag_file=str(path), hellaswag_examples=5, model=model))
    rows = read_metrics(out, "hellaswag")
    assert [r["step"] for r in rows] == [0, 2, 4] and all(r["count"] == 5 for r in rows)
    assert all(0.0 <= r["acc_norm"] <= 1.0 and r["acc"] * 5 == round(r["acc"] * 5) for r in rows)


def test_eval_only_scores_the_checkpoint_and_writes_nothing(tiny_dataset, tmp_path):
    out = str(tmp_path / "run")
    run_train(tiny_run_args(tiny_dataset, out, max_iters=6, eval_interval=6))
    final_val = read_metrics(out, "val")[-1]["val_loss"]
    files = {name: open(os.path.join(out, name), "rb").read() for name in os.listdir(out)}
    proc = run_train(tiny_run_args(tiny_dataset, out, max_iters=6, eval_only=True))
    assert f"at step 6: val loss {final_val:.4f}" in proc.stdout
    assert {name: open(os.path.join(out, name), "rb").read() for name in os.listdir(out)} == files
    proc = run_train(tiny_run_args(tiny_dataset, str(tmp_path / "none"), eval_only=True), check=False)
    assert proc.returncode != 0 and "needs a checkpoint" in proc.stderr


def test_resume_refuses_another_optimizer_state(tiny_dataset, tmp_path):
    out = str(tmp_path / "run")
    run_train(tiny_run_args(tiny_dataset, out, max_iters=2))
    proc = run_train(tiny_run_args(tiny_dataset, out, max_iters=4, init_from="resume", optimizer="mars"), check=False)
    assert proc.returncode != 0 and "'optimizer': ('adamw', 'mars')" in proc.stderr


def test_resume_beyond_the_run_length_is_refused_and_writes_nothing(tiny_dataset, tmp_path):
    # The loop stops when its step reaches max_iters; from a checkpoint past it, it would never stop.
    out = str(tmp_path / "run")
    run_train(tiny_run_args(tiny_dataset, out, max_iters=4, eval_interval=4))

    def run_files() -> dict[str, bytes]:  # (not the lock file: it names the last process to open the run)
        return {name: open(os.path.join(out, name), "rb").read() for name in os.listdir(out)
                if not name.endswith(".lock")}

    files = run_files()
    for length, key in (("max_iters=2", "max_iters"), ("max_tokens=512", "max_tokens")):  # 512 tokens: 2 steps
        proc = run_train(tiny_run_args(tiny_dataset, out, init_from="resume", **{key: int(length.split("=")[1])}),
                         check=False, timeout=60)
        assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
        assert f"at step 4, beyond this run's 2 steps ({length}); raise {key}" in proc.stderr
    assert run_files() == files


def test_nan_before_the_first_checkpoint_says_there_is_none(tiny_dataset, tmp_path):
    out = str(tmp_path / "run")
    proc = run_train(tiny_run_args(tiny_dataset, out, max_iters=40, eval_interval=40, learning_rate=1e30,
                                   grad_clip=0.0), check=False)
    assert proc.returncode == 2 and "training loss is nan" in proc.stderr, proc.stderr
    assert "before the run's first checkpoint" in proc.stderr and "--init_from=scratch" in proc.stderr
    assert "still holds the last good state" not in proc.stderr
    assert not [name for name in os.listdir(out) if name.startswith("ckpt")]


def test_resume_compares_the_precision_auto_stands_for(tiny_dataset, tmp_path):
    out = str(tmp_path / "run")
    run_train(tiny_run_args(tiny_dataset, out, max_iters=2))  # dtype auto: float32 on CPU
    proc = run_train(tiny_run_args(tiny_dataset, out, max_iters=4, init_from="resume", dtype="bfloat16"),
                     check=False)
    assert proc.returncode == 2 and "'dtype': ('auto', 'bfloat16')" in proc.stderr, proc.stderr
    proc = run_train(tiny_run_args(tiny_dataset, out, max_iters=4, init_from="resume", dtype="float32"))
    assert "'dtype': ('auto', 'float32')" in proc.stdout  # printed as a change, not refused
    assert torch.load(os.path.join(out, "ckpt.pt"), weights_only=True)["step"] == 4


def read_lines_in_background(stream) -> "queue.Queue[str | None]":
    """The stream's lines, as they come, in a queue (None at its end): read with a timeout."""
    lines = queue.Queue()

    def pump():
        for line in stream:
            lines.put(line)
        lines.put(None)

    threading.Thread(target=pump, daemon=True).start()
    return lines


def wait_for_line(lines: "queue.Queue[str | None]", text: str, timeout: float, seen: list[str]) -> str | None:
    """The first line containing text within timeout seconds (None: none came); every line read goes to seen."""
    deadline = time.monotonic() + timeout
    while (left := deadline - time.monotonic()) > 0:
        try:
            line = lines.get(timeout=left)
        except queue.Empty:
            return None
        if line is None:
            return None
        seen.append(line)
        if text in line:
            return line
    return None


def environment_of(pid: int) -> dict[str, str]:
    with open(f"/proc/{pid}/environ", "rb") as f:
        return dict(item.split("=", 1) for item in f.read().decode(errors="replace").split("\0") if "=" in item)


def test_a_frozen_rank_stops_the_run_within_step_timeout(tiny_dataset, tmp_path):
    """SIGSTOP one of two torchrun ranks (gloo): the other reports it and exits within step_timeout,
    not at the 60-minute collective timeout."""
    step_timeout = 3
    args = tiny_run_args(tiny_dataset, str(tmp_path / "run"), max_iters=100000, eval_interval=100000,
                         log_interval=1, micro_batch_size=4, step_timeout=step_timeout)
    proc = subprocess.Popen([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
                             str(REPO / "train.py")] + args, cwd=REPO, text=True, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, env=dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1"))
    lines, seen, workers = read_lines_in_background(proc.stdout), [], []
    try:
        assert wait_for_line(lines, "step 3/", 120, seen), "".join(seen)  # training is under way
        with open(f"/proc/{proc.pid}/task/{proc.pid}/children") as f:
            workers = [int(pid) for pid in f.read().split()]
        rank1 = next(pid for pid in workers if environment_of(pid).get("RANK") == "1")
        os.kill(rank1, signal.SIGSTOP)
        frozen_at = time.monotonic()
        report = wait_for_line(lines, "no step completed", step_timeout + 60, seen)
        reported_after = time.monotonic() - frozen_at
        assert report, "".join(seen)
        assert reported_after < step_timeout + 3 and "rank 0" in report and "frozen or dead" in report, report
        os.kill(rank1, signal.SIGKILL)  # as torchrun would, 30 s later: a stopped process ignores its SIGTERM
        assert proc.wait(timeout=60) != 0
    finally:
        if proc.poll() is None:  # a failed assertion: end what is left (torchrun has not reaped its workers)
            for pid in [*workers, proc.pid]:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            proc.wait()


def test_a_log_line_reaches_a_log_file_at_once(tmp_path, monkeypatch):
    """The console is a file under SLURM (its --output) and nohup, which Python buffers in blocks: a run's line
    must be in the file when it is printed (tail -f, and a job killed after `scontrol requeue` loses nothing)."""
    path = tmp_path / "job.out"
    with open(path, "w", buffering=1 << 16) as console:
        monkeypatch.setattr(sys, "stdout", console)
        RunLog(enabled=True).print("step 10/600 | loss 3.1416")
        assert path.read_text() == "step 10/600 | loss 3.1416\n"


def test_a_resume_from_the_run_folder_alone_uses_the_runs_own_config(tiny_dataset, tmp_path):
    """`--init_from=resume --out_dir=X` with no config file continues the run in X with the config its config.json
    records (its data, model and optimizer), the overrides on the line applied on top, and lands where the run
    trained straight would."""
    straight, halves = str(tmp_path / "straight"), str(tmp_path / "halves")
    common = dict(lr_decay_iters=8, eval_interval=4, optimizer="muon")
    run_train(tiny_run_args(tiny_dataset, straight, max_iters=8, **common))
    run_train(tiny_run_args(tiny_dataset, halves, max_iters=4, **common))
    proc = run_train([f"--out_dir={halves}", "--init_from=resume", "--max_iters=8"])
    assert f"resuming {halves} with its own config" in proc.stdout
    a, b = load_weights(straight), load_weights(halves)
    assert all(torch.equal(a[k], b[k]) for k in a)
    recorded = json.load(open(os.path.join(halves, "config.json")))["config"]
    assert (recorded["optimizer"], recorded["max_iters"], recorded["data_dir"]) == ("muon", 8, tiny_dataset)
