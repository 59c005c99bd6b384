"""
train.py under a real SLURM (tests/slurm_cluster.py starts a one-node cluster; no mock): a tiny run
submitted with scripts/slurm/train.sbatch finishes, its log where docs/slurm.md says; the requeue signal
(scancel --signal=USR1, as a preemption sends it) reaches both ranks that srun started, which save one
checkpoint and requeue the job once, and the job's second life resumes and ends bit for bit where an
uninterrupted run ends; so does the time limit's; a job requeued max_requeues times stops, named; a
crashing run is never requeued, and one SLURM itself keeps restarting is refused, named; a sweep runs
as a job array whose task requeues itself alone. Skipped where SLURM is not installed (.ci/run installs
it and sets REQUIRE_SLURM, which turns the skip into a failure).
"""

import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import time

import pytest
import torch

import slurm_cluster
from checkpoint import load_model
from conftest import PYTHON, REPO, run_train, tiny_run_args
from experiments import sweep

# ~3 s of steps: a signal sent at the first training row (step 10) comes while the run trains
LONG = dict(max_iters=300, eval_interval=150, log_interval=10)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    reason = slurm_cluster.missing()
    if reason:
        if os.environ.get("REQUIRE_SLURM"):
            pytest.fail(f"REQUIRE_SLURM is set, but {reason}")
        pytest.skip(reason)
    running = slurm_cluster.SlurmCluster(tmp_path_factory.mktemp("slurm")).start()
    yield running
    running.stop()


def submit(cluster, folder, args: list[str], *sbatch_options: str, from_folder: bool = False) -> tuple[str, str]:
    """sbatch scripts/slurm/train.sbatch (on CPU: one task, no GPUs); (job id, its log). From the repository,
    the log folder/job-<id>.out; from_folder: from folder itself (MARS_REPO naming the repository), the log
    where the script's own --output puts it."""
    if from_folder:
        where, options = str(folder), [f"--export=ALL,MARS_REPO={REPO}"]
    else:
        where, options = str(REPO), [f"--output={os.path.join(folder, 'job-%j.out')}"]
    proc = cluster.run("sbatch", "--parsable", "--ntasks-per-node=1", "--gpus-per-node=0", "--cpus-per-task=1",
                       *options, *sbatch_options, str(REPO / "scripts" / "slurm" / "train.sbatch"), *args, cwd=where)
    job = proc.stdout.strip().split(";")[0]
    log = f"slurm-mars-gpt2-{job}.out" if from_folder else f"job-{job}.out"
    return job, os.path.join(folder, log)


def wait_for(condition, timeout: float, what: str, cluster=None, job: str = "", log: str = ""):
    deadline = time.time() + timeout
    while not (value := condition()):
        if time.time() > deadline:
            detail = open(log).read()[-3000:] if log and os.path.exists(log) else ""
            state = cluster.job_state(job) if cluster and job else ""
            raise AssertionError(f"timed out waiting for {what} (job {job} {state}):\n{detail}")
        time.sleep(0.3)
    return value


REQUEUE_SEEN: dict[str, float] = {}  # job -> when it was first seen waiting after a requeue


def start_requeued(cluster, job: str) -> None:
    """Start a requeued job 2 s after it is seen waiting instead of SLURM's ~2 minutes: at once, slurmd may
    still be ending its last life and refuse the launch ("Job credential revoked"), failing the job. (Waiting is
    PENDING after a restart, whatever its reason: the reason turns from the last life's to BeginTime only at the
    scheduler's next pass, up to a minute later.)"""
    if cluster.job_state(job) != "PENDING" or cluster.job_field(job, "Restarts") in ("", "0"):
        return
    if time.time() - REQUEUE_SEEN.setdefault(job, time.time()) >= 2:
        cluster.run("scontrol", "update", f"jobid={job}", "StartTime=now", check=False)
        del REQUEUE_SEEN[job]


def finished(cluster, job: str, log: str, timeout: float = 240) -> str:
    """Wait for the job to end, starting a requeued job soon (start_requeued); its state."""
    def ended():
        start_requeued(cluster, job)
        state = cluster.job_state(job)
        return state if state in ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT") else None
    return wait_for(ended, timeout, "the job to end", cluster, job, log)


def training(out: str, rows: int = 1):
    """A condition: this life of the run has logged `rows` training rows (metrics.jsonl grows)."""
    path = os.path.join(out, "metrics.jsonl")
    start = os.path.getsize(path) if os.path.exists(path) else 0
    return lambda: os.path.exists(path) and open(path).read()[start:].count('"type": "train"') >= rows


def weights(out: str) -> dict:
    return load_model(os.path.join(out, "ckpt.pt"))[0].state_dict()


def test_a_run_submitted_with_the_sbatch_script_finishes(cluster, tiny_dataset, tmp_path):
    """Submitted from another folder (MARS_REPO names the repository) with the script's own --output: the
    log is slurm-<job name>-<job id>.out where it was submitted, as docs/slurm.md says; the checkpoint in
    out_dir."""
    out = str(tmp_path / "run")
    job, log = submit(cluster, tmp_path, tiny_run_args(tiny_dataset, out, max_iters=20), from_folder=True)
    assert finished(cluster, job, log) == "COMPLETED", open(log).read()[-3000:]
    text = open(log).read()
    assert f"job {job} (restart 0)" in text and "step 20: saved" in text, text[-3000:]
    assert os.path.exists(os.path.join(out, "ckpt_0000020.pt")) and cluster.job_field(job, "Restarts") == "0"


def test_the_requeue_signal_reaches_both_srun_ranks_which_save_requeue_once_and_resume_bit_for_bit(
        cluster, tiny_dataset, tmp_path):
    """scancel --signal=USR1 (a preemption) to a job of two ranks that srun starts (--ntasks-per-node=2, no
    torchrun: they join one gloo group from SLURM's variables): both stop, one checkpoint, the job requeued
    once by itself, and its second life resumes (--init_from=auto) and finishes where an uninterrupted run
    of two ranks (one thread each, as the job's) does."""
    out, straight = str(tmp_path / "run"), str(tmp_path / "straight")
    once = LONG | dict(eval_interval=LONG["max_iters"])  # (no scheduled save before the last step's)
    args = tiny_run_args(tiny_dataset, out, micro_batch_size=4, **once)
    job, log = submit(cluster, tmp_path, args, "--ntasks-per-node=2")
    wait_for(training(out), 120, "training", cluster, job, log)
    cluster.run("scancel", "--signal=USR1", job)
    assert finished(cluster, job, log) == "COMPLETED", open(log).read()[-3000:]
    text = open(log).read()
    assert text.count(f"job {job} (restart 1)") == 1, text[-3000:]
    first_life, second_life = text.split(f"job {job} (restart 1)")
    # each rank got the signal itself (srun passes it to every task), and the one checkpoint is the stop's
    assert first_life.count("stopped by SIGUSR1 (it reached 2 of 2 ranks)") == 1, first_life[-3000:]
    assert first_life.count(": saved ") == 1, first_life[-3000:]
    stopped = re.search(r"stopped by SIGUSR1 .* at step (\d+)", first_life)[1]
    assert re.search(rf"resuming \S+ at step {stopped}\b", second_life), second_life[-3000:]
    assert f"requeued SLURM job {job} (requeue 1 of at most 20)" in text, text[-3000:]
    assert text.count(f"requeued SLURM job {job}") == 1 and cluster.job_field(job, "Restarts") == "1"
    assert '"world_size": 2' in open(os.path.join(out, "config.json")).read()
    run_train(tiny_run_args(tiny_dataset, straight, micro_batch_size=4, **once), nproc=2)
    a, b = weights(straight), weights(out)
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_a_job_requeued_max_requeues_times_stops_named(cluster, tiny_dataset, tmp_path):
    """max_requeues=1: the first USR1 requeues, the second life's saves and stops, naming the cap."""
    out = str(tmp_path / "run")
    job, log = submit(cluster, tmp_path, tiny_run_args(tiny_dataset, out, max_requeues=1, **LONG))
    wait_for(training(out), 120, "training", cluster, job, log)
    cluster.run("scancel", "--signal=USR1", job)

    def second_life() -> bool:
        start_requeued(cluster, job)
        return cluster.job_field(job, "Restarts") == "1" and cluster.job_state(job) == "RUNNING"

    wait_for(second_life, 120, "the second life", cluster, job, log)
    wait_for(training(out), 120, "training in the second life", cluster, job, log)
    cluster.run("scancel", "--signal=USR1", job)
    state = finished(cluster, job, log)
    text = open(log).read()
    assert "not requeueing SLURM job" in text and "requeued 1 times (max_requeues=1)" in text, text[-3000:]
    assert state == "FAILED" and cluster.job_field(job, "Restarts") == "1"  # exit 138: stopped by the signal
    assert text.count("stopped by SIGUSR1") == 2 and os.path.exists(os.path.join(out, "ckpt.pt"))


@pytest.mark.parametrize("crash", ["nan_loss", "missing_data"])
def test_a_crashing_run_is_not_requeued(cluster, tiny_dataset, tmp_path, crash):
    """A NaN loss (a learning rate of 1e6) or an error (its data folder gone) stops the run with its error;
    the job fails and stays failed. Requeued by SLURM itself all the same (scontrol requeue, as a cluster's
    RequeueExit or a node failure would), the crashed job's next life beyond max_requeues (here 0) refuses
    to start, naming the count and the cap: a run that fails at every start is not restarted for ever."""
    out = str(tmp_path / "run")
    if crash == "nan_loss":
        args, error = tiny_run_args(tiny_dataset, out, learning_rate=1e6, grad_clip=0.0, warmup_iters=0,
                                    max_iters=40), "training loss is"
    else:
        args, error = tiny_run_args(str(tmp_path / "gone"), out, max_iters=40, max_requeues=0), str(tmp_path / "gone")
    job, log = submit(cluster, tmp_path, args)
    assert finished(cluster, job, log) == "FAILED"
    time.sleep(2)
    assert cluster.job_state(job) == "FAILED" and cluster.job_field(job, "Restarts") == "0"
    assert error in open(log).read() and "Traceback" not in open(log).read(), open(log).read()[-3000:]
    if crash == "missing_data":
        cluster.run("scontrol", "requeue", job)
        wait_for(lambda: cluster.job_field(job, "Restarts") == "1", 60, "the requeue", cluster, job, log)
        assert finished(cluster, job, log) == "FAILED", open(log).read()[-3000:]
        text = open(log).read()
        assert f"SLURM job {job} has been restarted 1 times, more than max_requeues=0" in text, text[-3000:]
        assert cluster.job_field(job, "Restarts") == "1" and "Traceback" not in text


def training_process(out: str) -> int | None:
    """The pid of the python process that srun started to train into out (from /proc: its command line)."""
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:  # exited meanwhile
            continue
        if os.path.basename(argv[0]).startswith(b"python") and f"--out_dir={out}".encode() in argv:
            return int(entry)
    return None


def waiting_or_gone(pid: int, signum: int) -> bool:
    """Whether the signal waits to be delivered to the (stopped) process, or the process has exited."""
    try:
        with open(f"/proc/{pid}/status") as f:
            masks = [int(line.split()[1], 16) for line in f if line.startswith(("SigPnd:", "ShdPnd:"))]
    except OSError:
        return True
    return any(mask >> (signum - 1) & 1 for mask in masks)


def test_the_time_limit_signal_requeues_a_run_too_long_for_one_life(cluster, tiny_dataset, tmp_path):
    """--time=1 --signal=USR1@40: SLURM itself signals the run before its minute is up (its clock checks
    every ~30 s, so the signal comes 10-40 s early, at most 50 s into the job); the run saves and requeues,
    and a later life ends it. The run is too long for its life without burning the minute's CPU: stopped
    (SIGSTOP, as a step that takes long) once it trains, and continued when SLURM's USR1 waits for it (or
    50 s into the job, if it came just before the stop)."""
    out = str(tmp_path / "run")
    args = tiny_run_args(tiny_dataset, out, max_iters=300, eval_interval=150, log_interval=10)
    submitted = time.time()
    job, log = submit(cluster, tmp_path, args, "--time=1", "--signal=USR1@40")
    trains = training(out)
    # (on a loaded machine the signal, 20-50 s into the job, may come before the first training row: then the run
    # stops at its first step, saves and requeues, and its next life waits for finished() to start it)
    wait_for(lambda: trains() or int(cluster.job_field(job, "Restarts") or 0) >= 1, 120, "training", cluster, job, log)
    pid = training_process(out)  # (None if the signal came first and the run has stopped already)
    if pid is not None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGSTOP)
        try:
            wait_for(lambda: waiting_or_gone(pid, signal.SIGUSR1) or time.time() > submitted + 50, 120,
                     "SLURM's USR1", cluster, job, log)
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
    assert finished(cluster, job, log, timeout=300) == "COMPLETED", open(log).read()[-3000:]
    text = open(log).read()
    assert "stopped by SIGUSR1" in text and f"requeued SLURM job {job}" in text and "resuming" in text, text[-3000:]
    assert int(cluster.job_field(job, "Restarts")) >= 1 and os.path.exists(os.path.join(out, "ckpt_0000300.pt"))
    straight = str(tmp_path / "straight")  # the same run uninterrupted, one thread as the job's task
    run_train(tiny_run_args(tiny_dataset, straight, max_iters=300, eval_interval=150, log_interval=10))
    a, b = weights(straight), weights(out)
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_a_paper_run_script_submits_itself_with_slurm_1(cluster, tiny_dataset, tmp_path):
    """SLURM=1 bash scripts/run.sh gpt2_small_mars: a row of the paper's table is one command that submits
    scripts/slurm/train.sbatch; here its dry run (DRY_RUN=1: 2 steps on the CPU) runs as the job."""
    env = {**cluster.env, "SLURM": "1", "DRY_RUN": "1", "DATA_DIR": tiny_dataset, "OUT_ROOT": str(tmp_path / "runs"),
           "SBATCH_ARGS": f"--cpus-per-task=1 --output={tmp_path}/job-%j.out"}
    proc = subprocess.run(["bash", "scripts/run.sh", "gpt2_small_mars"], env=env, cwd=REPO, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    job = re.search(r"Submitted batch job (\d+)", proc.stdout)[1]
    log = str(tmp_path / f"job-{job}.out")
    assert finished(cluster, job, log) == "COMPLETED", open(log).read()[-3000:]
    assert cluster.job_field(job, "JobName") == "gpt2_small_mars"
    assert os.path.exists(tmp_path / "runs" / "dry_run" / "gpt2_small_mars" / "ckpt_0000002.pt")


GRID = ["--grid", "learning_rate=1e-3,3e-3", "--seeds", "1"]


def sweep_on(cluster, folder: str, base: list[str], *options: str, grid: list[str] = GRID) -> str:
    """python -m experiments.sweep FOLDER BASE GRID OPTIONS; its output."""
    proc = subprocess.run([PYTHON, "-m", "experiments.sweep", folder, *base, *grid, *options], env=cluster.env, cwd=REPO,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


def array_ended(cluster, output: str, runs: int) -> None:
    """The job array the sweep says it submitted, with `runs` tasks, waited for to its end."""
    match = re.search(r"submitted job array (\d+): (\d+) run", output)
    assert match and int(match[2]) == runs, output
    wait_for(lambda: cluster.run("squeue", "-h", "-j", match[1], check=False).stdout.strip() == "", 300,
             f"job array {match[1]}")


def test_a_sweep_runs_as_a_job_array_and_a_rerun_submits_only_what_is_missing(cluster, tiny_dataset, tmp_path,
                                                                              monkeypatch):
    """2 learning rates as one job array: 2 runs, whose table equals the same sweep run locally; a run's folder
    deleted, the rerun submits that run alone; then the rerun writes the table."""
    base = [a for a in tiny_run_args(tiny_dataset, "unused", max_iters=6, eval_interval=3)
            if not a.startswith(("--out_dir=", "--seed="))]
    local, remote = str(tmp_path / "local"), str(tmp_path / "remote")
    monkeypatch.chdir(REPO)
    monkeypatch.setattr(sys, "executable", PYTHON)  # the local runs start with the preloaded python3 (conftest)
    table = sweep.main([local, *base, *GRID, "--jobs", "2"])
    array_ended(cluster, sweep_on(cluster, remote, base, "--slurm=--cpus-per-task=1"), runs=2)

    def rows(text: str) -> list[str]:
        return [line for line in text.splitlines() if line.startswith("| ")]

    assert rows(sweep_on(cluster, remote, base, "--slurm")) == rows(table)
    shutil.rmtree(os.path.join(remote, "run", "learning_rate=3e-3", "seed1"))
    array_ended(cluster, sweep_on(cluster, remote, base, "--slurm=--cpus-per-task=1"), runs=1)
    assert rows(sweep_on(cluster, remote, base, "--slurm")) == rows(table)
    assert len(os.listdir(os.path.join(remote, "slurm"))) == 2 + 3  # two task lists, three task logs


def test_a_sweep_task_sent_the_requeue_signal_requeues_itself_alone(cluster, tiny_dataset, tmp_path):
    """A sweep's job array; SIGUSR1 to its task's batch script alone (scancel --batch: the script passes it on
    through srun to the run): the run saves and requeues its own task (<array>_0: the array's id alone would
    requeue every task), and its next life resumes and finishes; then the sweep's rerun writes its table."""
    grid = ["--grid", "learning_rate=1e-3", "--seeds", "1"]
    base = [a for a in tiny_run_args(tiny_dataset, "unused", **LONG) if not a.startswith(("--out_dir=", "--seed="))]
    root = str(tmp_path / "sweep")
    output = sweep_on(cluster, root, base, "--slurm=--cpus-per-task=1", grid=grid)
    array = re.search(r"submitted job array (\d+): 1 run", output)[1]
    task = f"{array}_0"
    run = os.path.join(root, "run", "learning_rate=1e-3", "seed1")
    wait_for(training(run), 120, "training", cluster, task)
    cluster.run("scancel", "--signal=USR1", "--batch", task)
    # (the run's train.py output; the task's own log holds srun's)
    assert finished(cluster, task, os.path.join(run, "train.log")) == "COMPLETED"
    log = open(os.path.join(run, "train.log")).read()
    assert f"requeued SLURM job {task} (requeue 1 of" in log and "resuming" in log, log[-3000:]
    assert cluster.job_field(task, "Restarts") == "1"
    rerun = sweep_on(cluster, root, base, "--slurm", grid=grid)
    assert "submitted" not in rerun and os.path.exists(os.path.join(root, "sweep.md")), rerun


def test_a_plain_scancel_saves_and_stops_without_requeueing(cluster, tiny_dataset, tmp_path):
    """scancel (SIGTERM to every rank, SIGKILL KillWait seconds later): the run saves its step and stops;
    the job ends cancelled, never requeued, and the checkpoint resumes."""
    out = str(tmp_path / "run")
    job, log = submit(cluster, tmp_path, tiny_run_args(tiny_dataset, out, **LONG))
    wait_for(training(out), 120, "training", cluster, job, log)
    cluster.run("scancel", job)
    assert finished(cluster, job, log) == "CANCELLED"
    wait_for(lambda: "stopped by SIGTERM" in open(log).read(), 60, "the stop", cluster, job, log)
    text = open(log).read()
    assert "requeued" not in text and cluster.job_field(job, "Restarts") == "0", text[-3000:]
    step = int(re.findall(r"stopped by SIGTERM at step (\d+)", text)[-1])
    assert os.path.exists(os.path.join(out, f"ckpt_{step:07d}.pt"))


def test_the_ranks_come_from_slurms_variables_when_torchruns_are_absent(cluster, monkeypatch):
    """srun's task 9 of 16 on node[3-4]: rank 9, the rendezvous at node3 on the job's port; the GPU is the
    task's place on its node, or 0 when SLURM shows the task one GPU alone."""
    from runtime import adopt_slurm_ranks

    monkeypatch.setenv("SLURM_CONF", cluster.env["SLURM_CONF"])
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.setenv(name, "")
        monkeypatch.delenv(name)  # (absent now, and absent again after the test)
    monkeypatch.setenv("SLURM_STEP_NUM_TASKS", "16")
    monkeypatch.setenv("SLURM_PROCID", "9")
    monkeypatch.setenv("SLURM_LOCALID", "1")
    monkeypatch.setenv("SLURM_STEP_NODELIST", "node[3-4]")
    monkeypatch.setenv("SLURM_JOB_ID", "12345")
    for visible, local_rank in (("0,1,2,3,4,5,6,7", "1"), ("5", "0")):
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
        monkeypatch.delenv("RANK", raising=False)  # (set by the previous round)
        adopt_slurm_ranks()
        assert [os.environ[k] for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")] == [
            "9", "16", local_rank, "node3", "32345"]
