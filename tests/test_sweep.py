"""experiments/sweep.py end to end on CPU: a grid of 2 points x 2 seeds (plus a diverging point), its table,
CSV and plot; a rerun that trains nothing; the coordinate search moving its centre. Bad arguments stop
it before anything runs; Ctrl-C stops its runs with a checkpoint and says how to go on. A SLURM task of
a sweep imports no torch."""

import contextlib
import csv
import functools
import os
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from checkpoint import has_checkpoint
from conftest import PYTHON, REPO, tiny_run_args
from experiments import sweep


def tiny(tiny_dataset, tmp_path, **overrides) -> list[str]:
    settings = dict(max_iters=4, eval_interval=2, log_interval=2) | overrides
    args = tiny_run_args(tiny_dataset, str(tmp_path / "unused"), **settings)
    return [a for a in args if not a.startswith(("--out_dir=", "--seed="))]  # the sweep sets them per run


def sweep_command(*args: str, python: str = PYTHON) -> list[str]:
    """python -m experiments.sweep ARGS, as a user runs it (from the repository root)."""
    return [python, "-m", "experiments.sweep", *args]


def test_grid_with_seeds_table_plot_rerun_and_divergence(tiny_dataset, tmp_path, monkeypatch):
    monkeypatch.chdir(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    monkeypatch.setattr(sys, "executable", PYTHON)  # the runs start with the preloaded python3 (conftest)
    folder = str(tmp_path / "sweep")
    argv = [folder, *tiny(tiny_dataset, tmp_path), "--grid", "learning_rate=1e-3,3e-3,1e30", "--grad_clip=0",
            "--seeds", "1,2", "--jobs", "2"]
    text = sweep.main(argv)
    with open(os.path.join(folder, "sweep.csv")) as f:
        rows = list(csv.DictReader(f))
    by_lr = {r["learning_rate"]: r for r in rows}
    assert set(by_lr) == {"1e-3", "3e-3", "1e30"}
    assert by_lr["1e-3"]["seeds"] == "2" and by_lr["1e30"]["diverged"] == "2" and by_lr["1e30"]["seeds"] == "0"
    assert float(by_lr["3e-3"]["mean best val loss"]) < float(by_lr["1e-3"]["mean best val loss"])
    assert os.path.exists(os.path.join(folder, "run", "learning_rate=1e30", "seed1", sweep.DIVERGED))
    assert "| **run** | **3e-3** | **2** | **0** |" in text
    assert os.path.getsize(os.path.join(folder, "sweep.png")) > 10_000
    logs = {p: os.path.getmtime(p) for p in
            [os.path.join(folder, "run", f"learning_rate={lr}", f"seed{s}", "train.log")
             for lr in ("1e-3", "3e-3", "1e30") for s in (1, 2)]}
    assert sweep.main(argv) == text  # finished and diverged runs are not run again
    assert all(os.path.getmtime(p) == t for p, t in logs.items())


def test_a_recipe_can_have_its_own_grid():
    points = sweep.grid_points(["a", "b"], {"a:learning_rate": ["1", "2"], "b:learning_rate": ["3"], "seed_x": ["0"]})
    assert [(p.recipe, p.values) for p in points] == [
        ("a", (("learning_rate", "1"), ("seed_x", "0"))), ("a", (("learning_rate", "2"), ("seed_x", "0"))),
        ("b", (("learning_rate", "3"), ("seed_x", "0")))]


def test_coordinate_search_moves_the_centre_to_the_best_value(tiny_dataset, tmp_path, monkeypatch):
    monkeypatch.chdir(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    trained = []

    def fake_run(points):  # the loss is lowest at learning_rate=c, weight_decay=x
        trained.extend(points)
        return {p: sweep.Score([{"a": 3.0, "b": 2.0, "c": 1.0}[dict(p.values)["learning_rate"]] +
                                {"x": 0.0, "y": 0.5}[dict(p.values)["weight_decay"]]], 0) for p in points}

    results = sweep.coordinate_search("unused", "r", {"learning_rate": ["a", "b", "c"], "weight_decay": ["x", "y"]},
                                      rounds=3, run=fake_run)
    best = min(results, key=lambda p: results[p].mean)
    assert dict(best.values) == {"learning_rate": "c", "weight_decay": "x"}
    # round 1 from the centre (b, y): learning rates at y, then decays at c; round 2 confirms; no round 3
    assert [dict(p.values)["learning_rate"] for p in trained[:3]] == ["a", "b", "c"]
    assert len(trained) == 10


# bad arguments: what the error must say
BAD_ARGUMENTS = {
    "--seeds 1,x": "argument --seeds: 'x' is not a whole number",
    "--jobs 0": "argument --jobs: must be at least 1",
    "--grid learning_rate": "cannot read --grid 'learning_rate': write key=value1,value2",
    "--grid learning_rate=3e-3,": "cannot read --grid 'learning_rate=3e-3,'",
    "--grid lerning_rate=3e-3": "unknown config key 'lerning_rate' (did you mean 'learning_rate'?)",
    "--grid learning_rate=fast": "config key 'learning_rate' must be float, got 'fast'",
    "--seed=7": "--seed=7: the sweep sets seed for each run itself (seeds: --seeds",
    "--recipes mini:adopt,sgd": "--recipes: no mini recipe 'sgd'; the mini recipes are adamw,",
    "--recipes maxi": "--recipes maxi: give mini (every mini recipe) or mini:NAME,NAME",
}


@pytest.fixture(scope="module")
def bad_sweeps(tiny_dataset, tmp_path_factory) -> dict[str, tuple[subprocess.CompletedProcess, str]]:
    """Each bad argument's finished sweep and its folder (run a few at a time: each start imports torch)."""
    root = tmp_path_factory.mktemp("bad_sweeps")

    def run(bad: str) -> tuple[subprocess.CompletedProcess, str]:
        folder = str(root / f"sweep{list(BAD_ARGUMENTS).index(bad)}")
        command = sweep_command(folder, *tiny(tiny_dataset, root), *bad.split())
        return subprocess.run(command, capture_output=True, text=True, cwd=REPO, timeout=120), folder

    with ThreadPoolExecutor(max_workers=2) as pool:
        return dict(zip(BAD_ARGUMENTS, pool.map(run, BAD_ARGUMENTS)))


@pytest.mark.parametrize("bad", BAD_ARGUMENTS)
def test_bad_sweep_arguments_stop_it_before_anything_runs(bad, bad_sweeps):
    proc, folder = bad_sweeps[bad]
    assert proc.returncode == 2 and BAD_ARGUMENTS[bad] in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
    assert not os.path.exists(folder)  # no run started, no folder made


def test_recipes_mini_chooses_every_registry_optimizers_mini_recipes():
    """--recipes mini (scripts/mini_sweep.sh's, RECIPES unset): every mini recipe of every registry optimizer, as
    the resume matrix trains each; mini:NAME,NAME those alone, in that order."""
    from config.cells import MINI_RECIPES
    from optim import OPTIMIZERS

    every = [name for spec in OPTIMIZERS.values() for name in MINI_RECIPES[spec.name]]
    assert list(sweep.chosen_mini_recipes("mini")) == every and len(every) >= len(OPTIMIZERS)
    assert list(sweep.chosen_mini_recipes("mini:soap,adamw")) == ["soap", "adamw"]


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["ctrl_c", "sigterm"])
def test_ctrl_c_stops_the_runs_and_says_how_to_go_on(sig, tiny_dataset, tmp_path):
    """SIGINT (Ctrl-C) or SIGTERM (a scheduler's preemption) to the sweep alone: the running run saves a
    checkpoint and stops, no other starts, and the sweep exits 128 + the signal saying how to resume."""
    folder = tmp_path / "sweep"
    endless = tiny(tiny_dataset, tmp_path, max_iters=100_000, eval_interval=100_000, log_interval=1)
    # The real python3, so that its runs are in its process group, which the test kills if the stop fails (a
    # preloaded command's runs are children of the preload server, out of the group's reach); and SIGINT at
    # its default, as in a terminal's foreground (a shell starts a background job, `pytest ... &` in a script,
    # with SIGINT ignored, and Python keeps an inherited ignore: Ctrl-C would never reach the sweep).
    proc = subprocess.Popen(sweep_command(str(folder), *endless, "--seeds", "1,2", python=sys.executable),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO, start_new_session=True,
                            preexec_fn=functools.partial(signal.signal, signal.SIGINT, signal.SIG_DFL))
    log = folder / "run" / "base" / "seed1" / "train.log"
    try:
        deadline = time.time() + 60
        while not (log.exists() and "step 1/" in log.read_text()):  # training, its stop handler installed
            assert proc.poll() is None, proc.stderr.read()
            assert time.time() < deadline, "no training step within a minute"
            time.sleep(0.1)
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=30)
    finally:
        with contextlib.suppress(ProcessLookupError):  # a sweep that ignored the signal, and its run
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 128 + sig and "Traceback" not in err, err
    assert "1 stopped with a checkpoint" in err and "Rerun the same command to go on" in err
    assert "stopped by SIGTERM" in log.read_text() and has_checkpoint(str(log.parent))
    assert not (folder / "run" / "base" / "seed2").exists()


def test_a_sweeps_slurm_task_imports_neither_torch_nor_the_report():
    """A SLURM task of a sweep (python3 -m experiments.sweep --slurm-task) only waits on its train.py: its
    imports leave out torch (seconds, a minute on a busy shared file system, while the requeue signal it
    ignores once running would end it; and 400 MB held beside the run). The real python3: the preloaded
    one has torch already."""
    heavy = "{'torch', 'numpy', 'matplotlib', 'experiments.report'}"
    code = f"import sys, experiments.sweep; print(sorted({heavy} & set(sys.modules)))"
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and proc.stdout.strip() == "[]", (proc.stdout, proc.stderr[-2000:])
