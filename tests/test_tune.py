"""experiments/tune.py: the coordinate descent on a synthetic loss (a bowl whose minimum it must walk to, moves
smaller than the seed noise refused, the search capped at AdamW's run count, seeds 2-4 and the sensitivity
at the tuned point, tuning.md and tuned.json), and bad input refused by name before any run. The real
training path under it is experiments.sweep's (tests/test_sweep.py); scripts/tune_mini.sh's DRY_RUN runs it."""

import argparse
import json
import math
import os
import subprocess

import pytest

from conftest import PYTHON, REPO
from errors import InputError
from experiments import sweep, tune
from optim import load_config

START = {"learning_rate": "0.002", "weight_decay": "0.1", "warmup_iters": "25", "beta2": "0.95"}
KEYS = list(START)


def bowl(values: dict[str, str]) -> float:
    """A loss whose minimum is at 4x the start's learning rate (four steps of 2^(1/2) up) and a warmup of 6, flat
    in the weight decay, and 0.004 lower at beta2 0.99: less than the noise below."""
    lr_steps = math.log(float(values["learning_rate"]) / 0.008, math.sqrt(2))
    warmup_steps = tune.WARMUPS.index(int(values["warmup_iters"])) - tune.WARMUPS.index(6)
    return 2.0 + 0.05 * lr_steps ** 2 + 0.03 * abs(warmup_steps) - (0.004 if values["beta2"] == "0.99" else 0.0)


class SyntheticTuner(tune.Tuner):
    """A Tuner whose runs are the bowl plus a seed's offset (spread 0.01 over seeds 1-3); it records every
    (point, seed) it was asked for."""

    SEED_OFFSET = {1: 0.0, 2: 0.01, 3: -0.01, 4: 0.005}

    def __init__(self, check: bool = False):
        super().__init__("unused", [], {}, jobs=2, report_only=False, check=check)
        self.asked: list[tuple[sweep.Point, int]] = []

    def scores(self, points, seeds):
        self.asked += [(p, s) for p in points for s in seeds]
        at = {p: dict(START, warmup_iters="6") | dict(p.values) for p in points}  # (keys not tuned: the bowl's floor)
        return {p: sweep.Score([bowl(at[p]) + self.SEED_OFFSET[s] for s in seeds], 0) for p in points}


def test_coordinate_descent_walks_to_the_minimum_and_ignores_moves_within_the_noise():
    tuner = SyntheticTuner()
    result = tuner.tune(tune.RecipeTuning("adamw", KEYS, dict(START)), budget=None, max_rounds=4)
    assert result.noise == pytest.approx(0.01)
    # the walk along the learning rate (0.002 -> 0.008, four steps) and the warmup (25 -> 6); beta2's 0.004 gain
    # is within the noise, the weight decay is flat
    assert result.centre == {"learning_rate": "0.008", "weight_decay": "0.1", "warmup_iters": "6", "beta2": "0.95"}
    first = [t for t in result.tried if t.round == 1]
    assert [t.key for t in first] == KEYS and result.tried[-1].round == 2  # round 2 moved nothing: the end
    assert set(first[0].losses) == {"0.001414", "0.002", "0.002828", "0.004", "0.005657", "0.008", "0.01131",
                                    "0.016"}
    # seeds 2-4 at the tuned point, and seed 1 at 0.5x and 2x its learning rate
    tuned = tuner.point(result, result.centre)
    assert {(tuned, s) for s in (1, 2, 3, 4)} <= set(tuner.asked)
    assert result.final.losses == pytest.approx([2.0, 2.01, 1.99, 2.005])
    assert result.sensitivity == {"0.5x": pytest.approx(2.2), "2x": pytest.approx(2.2)}
    # the search's runs: every run asked for but seeds 2-4 at the tuned point and the two sensitivity runs
    sensitivity = {(tuner.point(result, result.centre | {"learning_rate": lr}), 1) for lr in ("0.004", "0.016")}
    assert result.search_runs == set(tuner.asked) - {(tuned, s) for s in (2, 3, 4)} - sensitivity
    assert len(result.search_runs) == 22


class ReplayTuner(SyntheticTuner):
    """--report-only over a folder where the points `missing` never ran (a value the ladder gained afterwards) and
    the points `diverged` diverged."""

    def __init__(self, missing: set, diverged: set = frozenset()):
        super().__init__()
        self.report_only, self.missing, self.diverged = True, missing, diverged

    def scores(self, points, seeds):
        scores = super().scores(points, seeds)
        return {p: sweep.Score([], len(seeds)) if p in self.diverged else sweep.Score([], 0) if p in self.missing
                else score for p, score in scores.items()}


def test_report_only_leaves_out_the_values_the_search_never_ran(tmp_path):
    """A value on the ladder the search never ran (MARS-exact's beta2 0.9999, added after its search): the replay
    neither prints it as a divergence ('inf') nor counts it as a run, and an unrun sensitivity run says 'not run';
    a run that diverged beside it stays a divergence, and a run."""
    full = SyntheticTuner().tune(tune.RecipeTuning("adamw", KEYS, dict(START)), budget=None, max_rounds=4)
    tuner = SyntheticTuner()
    never = {tuner.point(full, dict(START) | {"learning_rate": "0.016"}),  # the walk's last step ahead, round 1
             tuner.point(full, full.centre | {"learning_rate": "0.016"})}  # the 2x sensitivity run
    diverged = {tuner.point(full, dict(START) | {"learning_rate": "0.01131"})}  # (the same step's other value)
    replayed = ReplayTuner(never, diverged).tune(tune.RecipeTuning("adamw", KEYS, dict(START)), None, 4)
    assert replayed.centre == full.centre and "0.016" in full.tried[0].losses
    assert "0.016" not in replayed.tried[0].losses and len(replayed.search_runs) == len(full.search_runs) - 1
    assert replayed.tried[0].losses["0.01131"] == math.inf
    assert replayed.sensitivity == {"0.5x": full.sensitivity["0.5x"]}
    text = tune.write_outputs(str(tmp_path), [replayed])
    assert text.count("inf") == 1 and "0.01131: inf" in text and "| 2.2000 | not run |" in text, text


def test_a_search_stops_at_adamws_run_count_and_says_so(tmp_path):
    tuner = SyntheticTuner()
    anchor = tuner.tune(tune.RecipeTuning("adamw", KEYS, dict(START)), budget=None, max_rounds=4)
    other = tuner.tune(tune.RecipeTuning("lion", KEYS, dict(START)), budget=6, max_rounds=4)
    assert other.capped == 6 and len(other.search_runs) <= 6
    assert other.final.losses and other.sensitivity  # the capped search still reports its point
    text = tune.write_outputs(str(tmp_path), [anchor, other])
    assert "| lion | 6 (capped) |" in text or f"| lion | {len(other.search_runs)} (capped) |" in text
    assert "The search stopped at AdamW's 6 runs." in text
    assert json.loads((tmp_path / "tuned.json").read_text())["adamw"]["learning_rate"] == "0.008"
    assert "**0.008: 2.0000**" in text


def test_a_later_command_naming_fewer_recipes_keeps_the_others_tuned_points(tmp_path):
    """tuned.json, which the next stage reads every recipe's point from, keeps a recipe an earlier command tuned
    when a later one names only others (RECIPES=adamw,soap after all five)."""
    tuner = SyntheticTuner()
    anchor = tuner.tune(tune.RecipeTuning("adamw", KEYS, dict(START)), budget=None, max_rounds=4)
    lion = tuner.tune(tune.RecipeTuning("lion", KEYS, dict(START)), budget=6, max_rounds=4)
    tune.write_outputs(str(tmp_path), [anchor, lion])
    tune.write_outputs(str(tmp_path), [anchor])
    assert set(json.loads((tmp_path / "tuned.json").read_text())) == {"adamw", "lion"}


@pytest.mark.parametrize("arguments, message", [
    (["--recipes", "muon", "--keys", "learning_rate,beta2"],
     "recipe muon: config key 'beta2' is a setting of"),  # (AdamW, tuned first, reads beta2; Muon does not)
    (["--recipes", "adamw", "--grad_clip=-1"], "config key 'grad_clip' must not be negative, got -1"),
    (["--recipes", "adamw", "--keys", "learning_rate,dropout"], "no ladder of values for 'dropout'"),
    (["--recipes", "sgd"], "no mini recipe 'sgd'"),
    (["--recipes", "adamw", "--check", "--start-from", "no/tuned.json"], "cannot read no/tuned.json"),
])
def test_bad_input_is_refused_by_name_before_any_run(arguments, message, tmp_path):
    folder = tmp_path / "tune"
    proc = subprocess.run([PYTHON, "-m", "experiments.tune", str(folder), "config/mini.py", *arguments], cwd=REPO,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and message in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
    assert not os.path.exists(folder)  # nothing run, nothing written


def test_a_better_value_beyond_a_flat_step_is_taken():
    """Seed noise can make the loss along a walk uneven: the next step no better than the centre, the one after
    it better by more than the noise. Both were run; the centre moves to the better."""
    along = {"0.001414": 2.2, "0.002": 2.1, "0.002828": 2.0, "0.004": 1.995, "0.005657": 1.95, "0.008": 1.99,
             "0.01131": 2.2}

    class Uneven(SyntheticTuner):
        def scores(self, points, seeds):
            self.asked += [(p, s) for p in points for s in seeds]
            return {p: sweep.Score([along[dict(p.values)["learning_rate"]] + self.SEED_OFFSET[s] for s in seeds], 0)
                    for p in points}

    result = Uneven().tune(tune.RecipeTuning("adamw", ["learning_rate"], {"learning_rate": "0.002"}), None, 4)
    assert result.centre == {"learning_rate": "0.005657"}, result.tried
    assert result.sensitivity == {"0.5x": pytest.approx(2.0), "2x": pytest.approx(2.2)}  # 0.002828 and 0.01131


def test_a_capped_search_tries_no_key_after_the_cap():
    """Where AdamW's run count stops a search, no later key of that round or any other is tried."""
    tuner = SyntheticTuner()
    start = dict(START, warmup_iters="200")
    result = tuner.tune(tune.RecipeTuning("lion", KEYS, start), budget=6, max_rounds=4)
    assert result.capped == 6 and [t.key for t in result.tried] == ["learning_rate"], result.tried
    assert result.centre["warmup_iters"] == "200"


def test_a_rerun_starts_from_the_recorded_start_not_from_a_config_since_tuned(tmp_path):
    """start.json fixes each recipe's starting point when its tuning begins: once config/mini_adamw.py holds the
    tuned values, the committed search still resumes along its own path. --report-only in a folder where no tuning
    began (a mistyped one) is refused and writes nothing: its report would name every start as tuned."""
    folder = tmp_path / "tune"
    command = [PYTHON, "-m", "experiments.tune", str(folder), "config/mini.py", "--recipes", "adamw", "--keys",
               "learning_rate,warmup_iters", "--report-only"]
    refused = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=120)
    assert refused.returncode == 2 and "holds no tuning" in refused.stderr and not folder.exists(), refused.stderr
    folder.mkdir()
    (folder / "start.json").write_text(json.dumps({"adamw": {"learning_rate": "0.002", "warmup_iters": "25"}}))
    out = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=120, check=True).stdout
    assert "start: learning_rate=0.002, warmup_iters=25" in out
    assert json.loads((folder / "start.json").read_text())["adamw"] == {"learning_rate": "0.002", "warmup_iters": "25"}
    assert tune.start_values(["config/mini.py"], ["config/mini_adamw.py"], ["learning_rate", "warmup_iters"]) == {
        "learning_rate": "0.005657", "warmup_iters": "150"}  # (what a tuning begun today would record instead)
    unbegun = subprocess.run([*command[:6], "adamw,muon", *command[7:]], cwd=REPO, capture_output=True, text=True,
                             timeout=120)
    assert unbegun.returncode == 2 and "holds no tuning of muon" in unbegun.stderr, unbegun.stderr


def test_the_transfer_check_walks_the_learning_rate_past_its_edge_and_ends_at_seeds_1_to_3(tmp_path):
    """--check at a new point: one round over the learning rate from the carried point, a value that wins at the
    grid's edge extending the grid (the walk to 4x the start), the tuned point at seeds 1-3 and no sensitivity runs."""
    tuner = SyntheticTuner(check=True)
    result = tuner.tune(tune.RecipeTuning("adamw", ["learning_rate"], {"learning_rate": "0.002"}), None, 1)
    assert result.centre == {"learning_rate": "0.008"} and max(map(float, result.tried[0].losses)) > 0.008
    tuned = tuner.point(result, result.centre)
    assert result.final.losses == pytest.approx([2.0, 2.01, 1.99]) and not result.sensitivity
    assert {s for p, s in tuner.asked if p == tuned} == {1, 2, 3}
    row = next(line for line in tune.write_outputs(str(tmp_path), [result]).splitlines() if line.startswith("| adamw"))
    assert row.split(" | ")[6:8] == ["not run", "not run"], row  # (not "inf", which reads as diverged)
    assert tune.check_keys(["config/mini.py"], "adamw") == ["learning_rate", "weight_decay"]
    assert tune.check_keys(["config/mini.py"], "muon") == ["learning_rate"]


def test_stretch_runs_each_recipe_at_that_many_times_its_budget_with_its_own_schedule_stretched(tmp_path):
    """--stretch 4: AdamW's 256 steps with a warmup of 150 become 1024 with 600, Muon's warmup of 0 stays 0, each
    evaluation at the same fraction of the run."""
    args = argparse.Namespace(folder=str(tmp_path / "tune"), recipes="muon", keys="", check=True, start_from="",
                              stretch=4.0, report_only=False)
    _, recipe_args, _ = tune.planned_tunings(args, ["config/mini.py"])
    adamw, muon = (load_config(sweep.recipe_arguments(["config/mini.py"], recipe_args[name])) for name in ("adamw",
                                                                                                            "muon"))
    assert (adamw.max_iters, adamw.warmup_iters, adamw.eval_interval) == (1024, 600, 128)
    assert (muon.max_iters, muon.warmup_iters, muon.lr_schedule) == (1024, 0, "wsd")


def test_a_check_starts_each_recipe_at_the_point_another_check_tuned_and_a_rerun_at_its_recorded_start(tmp_path):
    """--start-from (the width-192 point from the 4x-tokens check's tuned.json): a recipe the file names starts at
    its values there, the keys it leaves out and the recipes it does not name at their configs'; start.json records
    it, so a rerun after the file changed still goes on from where the search began."""
    carried = tmp_path / "tuned.json"
    carried.write_text(json.dumps({"adamw": {"learning_rate": "0.032"}, "soap": {"learning_rate": "0.01"}}))
    args = argparse.Namespace(folder=str(tmp_path / "tune"), recipes="adamw,muon", keys="", check=True,
                              start_from=str(carried), stretch=4.0, report_only=False)
    _, _, starts = tune.planned_tunings(args, ["config/mini.py"])
    assert starts["adamw"] == {"learning_rate": "0.032", "weight_decay": "0.1"}
    assert starts["muon"] == {"learning_rate": "0.05657"} and "soap" not in starts
    os.makedirs(args.folder)
    with open(os.path.join(args.folder, "start.json"), "w") as f:
        json.dump(starts, f)
    carried.write_text(json.dumps({"adamw": {"learning_rate": "0.064"}}))
    assert tune.planned_tunings(args, ["config/mini.py"])[2]["adamw"]["learning_rate"] == "0.032"
    carried.write_text("{not json")
    with pytest.raises(InputError, match="is not the JSON a tuning writes"):
        tune.planned_tunings(args, ["config/mini.py"])


def test_the_tuned_point_is_linked_in_the_mini_reproductions_layout_once_seeds_1_to_4_finished(tmp_path, monkeypatch):
    monkeypatch.setattr(sweep, "finished_run", lambda folder: os.path.isfile(os.path.join(folder, "metrics.jsonl")))
    root, first, moved = str(tmp_path), sweep.Point("adamw", (("learning_rate", "0.004"),)), \
        sweep.Point("adamw", (("learning_rate", "0.008"),))
    for point in (first, moved):
        for seed in (1, 2, 3, 4):
            os.makedirs(point.seed_folder(root, seed))
            if (point, seed) != (first, 4):
                open(os.path.join(point.seed_folder(root, seed), "metrics.jsonl"), "w").close()
    tune.link_tuned(root, "adamw", first)  # seed 4 not finished: no links yet
    assert not os.path.exists(tmp_path / "tuned")
    open(os.path.join(first.seed_folder(root, 4), "metrics.jsonl"), "w").close()
    tune.link_tuned(root, "adamw", first)
    links = [tmp_path / "tuned" / "adamw" / "base" / f"seed{s}" for s in (1, 2, 3, 4)]
    assert [os.path.realpath(link) for link in links] == [os.path.realpath(first.seed_folder(root, s))
                                                         for s in (1, 2, 3, 4)]
    tune.link_tuned(root, "adamw", moved)  # a rerun whose tuned point moved
    assert [os.path.realpath(link) for link in links] == [os.path.realpath(moved.seed_folder(root, s))
                                                         for s in (1, 2, 3, 4)]
    assert not os.path.isabs(os.readlink(links[0]))  # relative: the folder can be moved or unpacked elsewhere
    os.remove(os.path.join(first.seed_folder(root, 4), "metrics.jsonl"))
    tune.link_tuned(root, "adamw", first)  # moved back, to a point whose seed 4 has not finished: no links
    assert not any(os.path.lexists(link) for link in links)


def test_a_runs_core_time_leaves_out_the_time_it_was_stopped(tmp_path):
    rows = [dict(type="val", step=0, tokens=0, val_loss=5.0, time=100.0)]
    rows += [dict(type="train", step=s, ms_per_step=430.0, time=100.0 + s / 8 * 3.5) for s in (8, 16)]  # 3.5 s apart
    rows += [dict(type="train", step=24, ms_per_step=430.0, time=5000.0), dict(type="val", step=32, tokens=1, val_loss=4.0, time=5004.0)]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    assert tune.core_seconds(str(tmp_path)) == pytest.approx(3.5 + 3.5 + tune.RUN_GAP + 4.0)
    # train.py's process CPU time, where two rows of one process hold it: 1.75 s of CPU in the 3.5 s a second run
    # shared the core; across a resume (another pid, its CPU clock started again) the wall clock counts, even where
    # the new process's CPU time already exceeds the old one's
    for row, cpu, pid in zip(rows, (10.0, 11.75, 13.5, 20.0, 21.5), (7, 7, 7, 9, 9)):
        row |= dict(process_cpu_s=cpu, pid=pid)
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    assert tune.core_seconds(str(tmp_path)) == pytest.approx(1.75 + 1.75 + tune.RUN_GAP + 1.5)


def test_no_recipe_is_held_to_a_stricter_threshold_than_adamws(tmp_path):
    """A recipe whose three seeds spread more than AdamW's moves where it beats AdamW's noise: a 0.004 gain at
    beta2 0.98, within this recipe's own noise (0.01), beats a noise cap of 0.003."""

    class Gentle(SyntheticTuner):
        def scores(self, points, seeds):
            return {p: sweep.Score([score - (0.004 if dict(p.values)["beta2"] == "0.98" else 0.0)
                                    for score in s.losses], 0) for p, s in super().scores(points, seeds).items()}

    own = Gentle().tune(tune.RecipeTuning("lion", KEYS, dict(START)), None, 4)
    capped = Gentle().tune(tune.RecipeTuning("lion", KEYS, dict(START)), None, 4, noise_cap=0.003)
    assert (own.threshold, own.centre["beta2"]) == (pytest.approx(0.01), "0.95")
    assert (capped.noise, capped.threshold, capped.centre["beta2"]) == (pytest.approx(0.01), 0.003, "0.98")
    assert f"| lion | {len(capped.search_runs)} | 0.0100 (0.0030) |" in tune.write_outputs(str(tmp_path), [capped])


def test_runs_without_their_recorded_start_are_refused_by_name(tmp_path):
    """A tuning folder whose start.json is lost (runs unpacked without it) would resume from the configs' present
    values, a different path: refused, with nothing run or written."""
    folder = tmp_path / "tune"
    os.makedirs(folder / "adamw" / "learning_rate=0.002,warmup_iters=25" / "seed1")
    proc = subprocess.run([PYTHON, "-m", "experiments.tune", str(folder), "config/mini.py", "--recipes", "adamw",
                           "--keys", "learning_rate,warmup_iters"], cwd=REPO, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 2 and "has no start for adamw: restore the start.json" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr and not (folder / "start.json").exists()


def test_a_run_where_a_tuned_link_goes_is_refused_by_name(tmp_path, monkeypatch):
    monkeypatch.setattr(sweep, "finished_run", lambda folder: True)
    os.makedirs(tmp_path / "tuned" / "adamw" / "base" / "seed1")  # a run trained there
    with pytest.raises(tune.InputError, match="is a run, where the tuning links its tuned point's seed 1"):
        tune.link_tuned(str(tmp_path), "adamw", sweep.Point("adamw", (("learning_rate", "0.004"),)))


def test_every_mini_recipes_search_resolves_before_any_run(tmp_path):
    # every recipe's keys have a ladder, are read by its optimizer, and each first point resolves as train.py's
    args = argparse.Namespace(folder=str(tmp_path / "tune"), recipes="", keys="", check=False, start_from="",
                              stretch=1.0, report_only=False)
    _, _, starts = tune.planned_tunings(args, ["config/mini.py"])
    from config.cells import mini_recipes
    assert set(starts) == set(mini_recipes())
    assert "weight_decay" not in starts["scion"] and starts["kron"]["kron_precond_lr"] == "0.8"
