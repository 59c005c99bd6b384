"""scripts/sweep.py end to end on CPU: a grid of 2 points x 2 seeds (plus a diverging point), its table,
CSV and plot; a rerun that trains nothing; the coordinate search moving its centre."""

import csv
import os

import pytest

from conftest import tiny_run_args
from scripts import sweep


def tiny(tiny_dataset, tmp_path) -> list[str]:
    args = tiny_run_args(tiny_dataset, str(tmp_path / "unused"), max_iters=4, eval_interval=2, log_interval=2)
    return [a for a in args if not a.startswith("--out_dir")]


def test_grid_with_seeds_table_plot_rerun_and_divergence(tiny_dataset, tmp_path, monkeypatch):
    monkeypatch.chdir(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
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


def test_bad_sweep_arguments_are_named(tmp_path):
    with pytest.raises(SystemExit) as e:
        sweep.main([str(tmp_path), "--grid", "learning_rate"])
    assert e.value.code == 2
