"""
Phase-1 tuning of the mini reproduction's recipes as Wen et al. (2025, "Fantastic Pretraining Optimizers and
Where to Find Them") tune: coordinate descent on one seed over the learning rate, the weight decay, the
warmup, the second-moment (or momentum, or EMA) rate and each optimizer's own keys, AdamW first.

    python -m experiments.tune out/mini_tune --jobs 2                         # AdamW, then every mini recipe
    python -m experiments.tune out/mini_tune --recipes mars_approx,muon --jobs 2   # AdamW, then these two
    python -m experiments.tune out/mini_tune --report-only                     # tuning.md from what has run

Per recipe (the registry's mini recipes, optim/__init__.py: the keys it tunes are `learning_rate`,
`weight_decay` and its MiniRecipe.tune):

1. The seed noise: the recipe's own point (config/mini.py, config/mini_<x>.py) at seeds 1, 2 and 3; the
   standard deviation of their best validation losses, or AdamW's where that is smaller, is the threshold of
   every move below (no recipe is held to a stricter rule than the AdamW it is compared with: three seeds
   measure a noise loosely, and a noisier optimizer would otherwise stay where a quieter one moves).
2. Rounds over the keys, on seed 1. For each key, the centre's two neighbours on the key's ladder (LADDERS;
   the learning rate: the centre times 2^(-1/2) and 2^(1/2)); while the best value tried beats the centre by
   more than the threshold, the centre moves there and the next two values beyond it are tried. A round in which
   no key moved ends the search, as does --max-rounds.
3. The tuned point at seeds 2, 3 and 4 (its mean over seeds 1-4 is its result), and its sensitivity as the
   benchmarks report it: seed 1 at 0.5x and 2x its learning rate (two steps down and up its ladder).

AdamW is always tuned first, and no other recipe's search (steps 1-2) runs more runs than AdamW's did: a
search that reaches that number stops there, and tuning.md says so. Every run is a point of experiments.sweep
(<folder>/<recipe>/<key=value,...>/seed<N>/, every tuned key in its name), so a rerun of the same command
reads the finished runs, resumes unfinished ones from their checkpoints and takes the same path again; a
diverged run is recorded, never retried, and never chosen. Every point the search can reach first (each
key's ladder around the recipe's point, the learning rate at 0.5x and 2x) is resolved as train.py resolves
it before any run, so a key the recipe's optimizer does not read, or a value out of its range, stops the
command by name with nothing run.

Written to the folder as the recipes finish: tuning.md (per recipe: the noise, every key's tried values
per round, the tuned point, seeds 1-4, the sensitivity, the runs), tuning.csv (every run: recipe, values,
seed, best validation loss), tuned.json (the tuned values per recipe, for config/mini_<x>.py) and tuned/:
the tuned points' runs as links in scripts/mini_paper.sh's layout (tuned/<recipe>/base/seed<N>), so that,
once config/mini_<x>.py holds the tuned values, the tuned table is

    python -m experiments.budget_ladder out/mini_tune/tuned --jobs 2    # AdamW's ladder; its 1x rung is linked

The edge rule (marin #4923: a tuned value on its grid's edge extends the grid) is step 2's walk: a move to the
best value tried tries the two beyond it, so a tuned value is never at the edge of what was tried, but at the
end of a key's finite ladder (LADDERS), which tuning.md shows.

At a new size or budget (the scale points, docs/reproducing.md), --stretch F runs every recipe at F times its
budget with its schedule stretched (experiments.budget_ladder's rule) and --check makes the search the transfer
check: from each recipe's tuned point (its config, or config files and overrides given), one round over the
learning rate (and AdamW's weight decay), the tuned point at seeds 1-3, no sensitivity runs:

    python -m experiments.tune out/scale/tokens4x config/mini.py --stretch 4 --check \
        --recipes adamw,mars_approx,mars_exact,mars_m,muon --jobs 2

start.json records each recipe's starting point when its tuning begins, and a rerun starts from it: the
recipes' configs can take the tuned values without changing the path a resumed search takes.
"""

from __future__ import annotations

if not __package__:  # run as a file: the repository's modules (errors, optim, ...) are not importable
    raise SystemExit("experiments/tune.py is a module of the experiments package: "
                     "run python -m experiments.tune from the repository root")

import argparse
import csv
import json
import math
import os
import signal
import statistics
import sys
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from errors import InputError, at_least, exit_on_input_error
from experiments import sweep

if TYPE_CHECKING:
    from config.cells import MiniRecipe
    from experiments.report import Run

BASE = "config/mini.py"
ANCHOR = "adamw"  # tuned first; its search's run count caps every other recipe's
NOISE_SEEDS, SEARCH_SEED, FINAL_SEEDS = (1, 2, 3), 1, (2, 3, 4)
CHECK_SEEDS = (2, 3)  # --check's tuned point: seeds 1-3, as the scale issue's points are run
LR_STEP = math.sqrt(2)  # the learning rate's ladder: a factor of 2^(1/2) between neighbours
RUN_GAP = 60.0  # seconds: metrics rows are seconds apart; a longer gap is a stopped and resumed run
WARMUPS = (0, 6, 12, 25, 50, 100, 150, 200)  # steps, of the mini run's 256
LADDERS = {  # each tuned key's values, in order; a recipe's own value joins its ladder where it falls
    "weight_decay": (0.0, 1e-3, 3e-3, 1e-2, 3e-2, 0.1, 0.3, 1.0, 3.0),
    "warmup_iters": WARMUPS,
    "sf_warmup_steps": WARMUPS,
    "beta1": (0.8, 0.85, 0.9, 0.95, 0.98),
    "beta2": (0.9, 0.95, 0.98, 0.99, 0.995, 0.999, 0.9999),  # (0.9999: ADOPT's own default)
    "muon_momentum": (0.8, 0.85, 0.9, 0.95, 0.98),
    "gamma": (0.00625, 0.0125, 0.025, 0.05, 0.1, 0.2),
    "beta3": (0.99, 0.995, 0.999, 0.9995, 0.9999),
    "alpha": (2.0, 4.0, 8.0, 16.0),
    "precondition_frequency": (1, 3, 10, 30, 100),
    "dion_momentum": (0.8, 0.85, 0.9, 0.95, 0.98),
    "rank_fraction": (0.125, 0.25, 0.5, 1.0),
    "ortho_fraction": (0.125, 0.25, 0.5, 1.0),
    "normuon_beta2": (0.9, 0.95, 0.98, 0.99, 0.995, 0.999),
    "soap_beta2": (0.8, 0.9, 0.95, 0.98, 0.99),
    "scion_momentum": (0.02, 0.05, 0.1, 0.2, 0.5),  # the new gradient's weight: 1 - beta
    "kron_precond_lr": (0.05, 0.1, 0.2, 0.4, 0.8, 1.0),  # (1: the largest normalised step that keeps q positive)
    "prodigy_d_coef": (0.25, 0.5, 1.0, 2.0, 4.0),
    "sophia_rho": (0.01, 0.02, 0.04, 0.08, 0.16),
    "adam_lr": (7.5e-4, 1.5e-3, 3e-3, 6e-3, 1.2e-2),
    # the mini model's largest logit is about 18 (results/mini_2026): a tau above it never clips
    "qk_clip_tau": (6.25, 12.5, 25.0, 50.0, 100.0),
    # an average's horizon (experiments.compare's SETTING_KEYS): an EMA's decay per point; a uniform average's first
    # step, its tail the last half, quarter, eighth, sixteenth of the mini's 256 steps (at a point a step)
    "ema_decay": (0.8, 0.9, 0.95, 0.98, 0.99, 0.995),
    "averaging_start": (0, 129, 193, 225, 241),
}


def text(value: float) -> str:
    """A value as it is written in a run's folder name and passed to train.py (4 significant digits)."""
    return f"{value:.4g}"


def neighbour(key: str, value: str, direction: int, start: dict[str, str]) -> str | None:
    """The next value of key's ladder below (direction -1) or above (+1) value; None past its end. The learning
    rate's ladder is the recipe's own rate times powers of LR_STEP (computed from it, so no rounding drifts)."""
    if key == "learning_rate":
        steps = round(math.log(float(value) / float(start[key]), LR_STEP)) + direction
        return text(float(start[key]) * LR_STEP ** steps)
    ladder = sorted({float(v) for v in LADDERS[key]} | {float(value)})
    i = ladder.index(float(value)) + direction
    return text(ladder[i]) if 0 <= i < len(ladder) else None


def ladder_ahead(key: str, value: str, direction: int, start: dict[str, str], count: int) -> list[str]:
    """The next `count` values of key's ladder past value in direction (fewer at its end)."""
    ahead = []
    while len(ahead) < count and (value := neighbour(key, value, direction, start)) is not None:
        ahead.append(value)
    return ahead


@dataclass
class Tried:
    round: int
    key: str
    losses: dict[str, float]  # value -> seed-1 best validation loss (inf: diverged)
    centre: str  # the key's value after this step


@dataclass
class RecipeTuning:
    recipe: str
    keys: list[str]
    start: dict[str, str]
    centre: dict[str, str] = field(default_factory=dict)
    noise: float = 0.0
    threshold: float = 0.0  # what a move must beat: the noise, or AdamW's where that is smaller
    start_losses: list[float] = field(default_factory=list)
    tried: list[Tried] = field(default_factory=list)
    search_runs: set = field(default_factory=set)  # (point, seed) of steps 1-2
    capped: int = 0  # AdamW's run count, when the search stopped there
    final: sweep.Score | None = None
    sensitivity: dict[str, float] = field(default_factory=dict)  # "0.5x"/"2x" -> seed-1 loss


class Tuner:
    """One tuning folder: runs points (experiments.sweep's folders and launcher) and keeps what each recipe did."""

    def __init__(self, root: str, base: list[str], recipes: dict[str, list[str]], jobs: int, report_only: bool,
                 check: bool = False):
        self.root, self.base, self.recipes, self.jobs = root, base, recipes, jobs
        self.report_only = report_only
        # --check: the transfer check at a new size or budget: the tuned point at seeds 1-3, no sensitivity runs
        self.final_seeds, self.sensitivity = (CHECK_SEEDS, False) if check else (FINAL_SEEDS, True)
        self.launcher = sweep.Launcher()

    def point(self, tuning: RecipeTuning, values: dict[str, str]) -> sweep.Point:
        return sweep.Point(tuning.recipe, tuple((k, values[k]) for k in tuning.keys))

    def scores(self, points: list[sweep.Point], seeds: tuple[int, ...]) -> dict[sweep.Point, sweep.Score]:
        """Each point's score over seeds, after running what has not run (--report-only: what has run)."""
        if not self.report_only:
            sweep.run_points(self.root, points, list(seeds), self.base, self.recipes, self.jobs, [], self.launcher)
        return {p: sweep.score(self.root, p, list(seeds)) for p in points}

    def unrun(self, tuning: RecipeTuning, centre: dict[str, str], key: str, values: list[str]) -> list[str]:
        """--report-only: the values of key whose seed-1 run, the other keys at the centre, neither finished nor
        diverged (a value the ladder gained after the search ran, or one running now; not a divergence, which is
        a run); [] otherwise."""
        if not self.report_only:
            return []
        scores = self.scores([self.point(tuning, centre | {key: v}) for v in values], (SEARCH_SEED,))
        return [v for v, score in zip(values, scores.values()) if not score.losses and not score.diverged]

    def losses(self, tuning: RecipeTuning, centre: dict[str, str], key: str, values: list[str]) -> dict[str, float]:
        """Seed 1's loss at each value of key, the other keys at the centre (inf: diverged or not run)."""
        points = [self.point(tuning, centre | {key: v}) for v in values]
        scores = self.scores(points, (SEARCH_SEED,))
        return {v: scores[p].mean for v, p in zip(values, points)}

    def tune(self, tuning: RecipeTuning, budget: int | None, max_rounds: int, noise_cap: float | None = None
             ) -> RecipeTuning:
        """Steps 1-3 of the module's docstring for one recipe; budget: the most runs steps 1-2 may make;
        noise_cap: AdamW's noise, the largest threshold a move must beat."""
        centre = dict(tuning.start)
        start = self.point(tuning, centre)
        tuning.start_losses = self.scores([start], NOISE_SEEDS)[start].losses
        tuning.search_runs |= {(start, s) for s in NOISE_SEEDS}
        tuning.noise = statistics.stdev(tuning.start_losses) if len(tuning.start_losses) > 1 else 0.0
        tuning.threshold = tuning.noise if noise_cap is None else min(tuning.noise, noise_cap)
        best_loss = self.scores([start], (SEARCH_SEED,))[start].mean

        def try_values(key: str, values: list[str]) -> dict[str, float] | None:
            """Seed 1 at these values of key, unless that would pass the budget (None); --report-only: those that
            ran. The search ran all of a step's values or capped before any, so where some ran the others joined the
            ladder since, and the budget counts those that ran; where none ran, all of them (it may have capped)."""
            unrun = self.unrun(tuning, centre, key, values)
            ran = [v for v in values if v not in unrun]
            counted = ran if ran and unrun else values
            new = {(self.point(tuning, centre | {key: v}), SEARCH_SEED) for v in counted} - tuning.search_runs
            if budget is not None and len(tuning.search_runs | new) > budget:
                tuning.capped = budget
                return None
            tuning.search_runs |= {(self.point(tuning, centre | {key: v}), SEARCH_SEED) for v in ran}
            return self.losses(tuning, centre, key, ran)

        for round_ in range(1, max_rounds + 1):
            moved = False
            for key in tuning.keys:
                below, above = (neighbour(key, centre[key], d, tuning.start) for d in (-1, +1))
                losses = try_values(key, [v for v in (below, above) if v is not None])
                if losses is None:
                    break
                losses[centre[key]] = best_loss
                candidate = min(losses, key=losses.get)
                # move to the best value tried while it beats the centre by more than the threshold, and try the
                # next two values beyond it (together: two cores)
                while candidate != centre[key] and best_loss - losses[candidate] > tuning.threshold:
                    direction = 1 if float(candidate) > float(centre[key]) else -1
                    centre[key], best_loss, moved = candidate, losses[candidate], True
                    ahead = [v for v in ladder_ahead(key, candidate, direction, tuning.start, 2) if v not in losses]
                    step = try_values(key, ahead) if ahead else {}
                    if step is None:
                        break
                    losses |= step
                    candidate = min(losses, key=losses.get)
                tuning.tried.append(Tried(round_, key, losses, centre[key]))
                if tuning.capped:  # (no key after it either: the search stops where the budget ran out)
                    break
            if tuning.capped or not moved:
                break
        tuning.centre = centre
        tuned = self.point(tuning, centre)
        tuning.final = self.scores([tuned], (SEARCH_SEED, *self.final_seeds))[tuned]
        link_tuned(self.root, tuning.recipe, tuned, (SEARCH_SEED, *self.final_seeds))
        # the sensitivity: two steps of 2^(1/2) on the learning rate's ladder each way
        for label, direction in (("0.5x", -1), ("2x", +1)) if self.sensitivity else ():
            lr = ladder_ahead("learning_rate", centre["learning_rate"], direction, tuning.start, 2)[-1]
            if not self.unrun(tuning, centre, "learning_rate", [lr]):
                tuning.sensitivity[label] = self.losses(tuning, centre, "learning_rate", [lr])[lr]
        return tuning


def start_values(base: list[str], recipe_args: list[str], keys: list[str]) -> dict[str, str]:
    """Each tuned key's value in the recipe's own config, as its folder name writes it."""
    from optim import load_config

    cfg = load_config(sweep.recipe_arguments(base, recipe_args))
    values = {}
    for k in keys:
        if not hasattr(cfg, k) and not hasattr(cfg.hyperparameters, k):  # the config's own error, naming the key
            load_config([*sweep.recipe_arguments(base, recipe_args), f"--{k}={text(LADDERS[k][0])}"])
        values[k] = text(getattr(cfg, k) if hasattr(cfg, k) else getattr(cfg.hyperparameters, k))
    return values


def default_keys(base: list[str], mini: MiniRecipe) -> list[str]:
    """The learning rate, the weight decay where the recipe's optimizer has one (Scion's constrained step and the
    hyperball optimizers' fixed norms take its place) and the recipe's own keys (config/cells.py)."""
    from optim import load_config

    cfg = load_config(sweep.recipe_arguments(base, mini.args.split()))
    decay = ["weight_decay"] if hasattr(cfg.hyperparameters, "weight_decay") else []
    return ["learning_rate", *decay, *mini.tune]


def check_keys(base: list[str], recipe: str) -> list[str]:
    """--check's keys: the learning rate, and the anchor's weight decay (the scale issue's transfer check)."""
    return ["learning_rate", "weight_decay"] if recipe == ANCHOR else ["learning_rate"]


def recorded_starts(root: str) -> dict[str, dict[str, str]]:
    """start.json's starting points per recipe ({} in a new folder)."""
    path = os.path.join(root, "start.json")
    return read_points(path) if os.path.exists(path) else {}


def read_points(path: str) -> dict[str, dict[str, str]]:
    """A points file (start.json, tuned.json): recipe -> key -> value as folder names write it."""
    try:
        with open(path) as f:
            points = json.load(f)
    except OSError as e:
        raise InputError(f"cannot read {path}: {e.strerror}") from None
    except json.JSONDecodeError as e:
        raise InputError(f"{path} is not the JSON a tuning writes ({e}): restore it from the run's archive") from None
    if not isinstance(points, dict) or not all(isinstance(v, dict) for v in points.values()):
        raise InputError(f"{path} is not a points file (recipe -> key -> value): name a tuning's tuned.json")
    return {recipe: {k: str(v) for k, v in values.items()} for recipe, values in points.items()}


def link_tuned(root: str, recipe: str, tuned: sweep.Point, seeds: tuple[int, ...] = (SEARCH_SEED, *FINAL_SEEDS)
               ) -> None:
    """<root>/tuned/<recipe>/base/seed<N>: links to the tuned point's seeds (1-4), once all have finished
    (before that, --report-only's tuned point is only where an unfinished search stands)."""
    settled = all(sweep.finished_run(tuned.seed_folder(root, seed)) for seed in seeds)
    folder = os.path.join(root, "tuned", recipe, "base")
    for seed in seeds:
        link, target = os.path.join(folder, f"seed{seed}"), os.path.relpath(tuned.seed_folder(root, seed), folder)
        if os.path.lexists(link) and not os.path.islink(link):
            raise InputError(f"{link} is a run, where the tuning links its tuned point's seed {seed}: a run trained "
                             f"there (budget_ladder before the links were made?); move it away and rerun")
        if os.path.lexists(link) and (not settled or os.readlink(link) != target):
            os.remove(link)  # (a rerun whose tuned point moved, or has not finished its seeds yet)
        if settled and not os.path.lexists(link):
            os.makedirs(folder, exist_ok=True)
            os.symlink(target, link)


def reachable_first(recipe: str, keys: list[str], start: dict[str, str]) -> list[sweep.Point]:
    """Every ladder value of every key around the recipe's point, and its learning rate at 0.5x and 2x."""
    points = []
    for key in keys:
        values = [text(0.5 * float(start[key])), text(2 * float(start[key]))] if key == "learning_rate" else \
            [text(v) for v in LADDERS[key]]
        points += [sweep.Point(recipe, tuple((k, v if k == key else start[k]) for k in keys)) for v in values]
    return points


def core_seconds(folder: str) -> float:
    """A run's time on its core, from its metrics rows' clocks (from its first evaluation: the seconds of its
    start are left out): between two rows of one process, its CPU time (train.py's process_cpu_s: its own, while
    other runs shared the cores); else the wall clock, where a gap over RUN_GAP straddles a stop and its resume and
    counts as RUN_GAP."""
    from experiments.report import read_rows

    rows = [row for row in read_rows(os.path.join(folder, "metrics.jsonl")) if "time" in row]
    total = 0.0
    for earlier, later in zip(rows, rows[1:]):
        if "process_cpu_s" in earlier and "process_cpu_s" in later and earlier.get("pid") == later.get("pid"):
            total += later["process_cpu_s"] - earlier["process_cpu_s"]
        else:
            total += min(max(later["time"] - earlier["time"], 0.0), RUN_GAP)
    return total


def finished_runs(root: str, recipe: str) -> list[tuple[str, str, Run]]:
    """Every finished run of a recipe's tuning: (its point's folder name, seed folder, run)."""
    return [(os.path.basename(os.path.dirname(folder)), folder, run)
            for folder, _, _ in sorted(os.walk(os.path.join(root, recipe)))
            if os.path.basename(folder).startswith("seed") and (run := sweep.finished_run(folder))]


def write_outputs(root: str, tunings: list[RecipeTuning]) -> str:
    lines = ["# Mini recipes tuned by coordinate descent (python -m experiments.tune)", "",
             "Best validation loss (nats per byte). Noise: the standard deviation over seeds 1-3 at the recipe's "
             "own point; a move must beat it, or AdamW's noise where that is smaller (in parentheses). Runs: the "
             "noise and the search (seed 1); then the tuned point's other seeds (2-4; a transfer check's 2-3) and "
             "the sensitivity runs (none in a check). Core-hours: every finished run of the recipe, one core each.",
             "", "| recipe | runs | noise | recipe's point, seeds 1-3 | tuned point | tuned, its seeds | 0.5x lr | "
             "2x lr | core-hours |", "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    runs_of = {t.recipe: finished_runs(root, t.recipe) for t in tunings}
    hours = {recipe: sum(core_seconds(folder) for _, folder, _ in runs) / 3600 for recipe, runs in runs_of.items()}
    for t in tunings:
        changed = ", ".join(f"{k}={t.centre[k]}" for k in t.keys if t.centre[k] != t.start[k]) or "unchanged"
        final = f"{t.final.mean:.4f} ± {t.final.std:.4f} ({len(t.final.losses)})" if t.final and t.final.losses \
            else "-"
        start = f"{statistics.mean(t.start_losses):.4f}" if t.start_losses else "-"
        runs = f"{len(t.search_runs)}{' (capped)' if t.capped else ''}"
        noise = f"{t.noise:.4f}" + (f" ({t.threshold:.4f})" if t.threshold < t.noise else "")
        # (a check runs no sensitivity: "not run", where "inf" would read as diverged)
        half, double = (f"{t.sensitivity[label]:.4f}" if label in t.sensitivity else "not run"
                        for label in ("0.5x", "2x"))
        lines.append(f"| {t.recipe} | {runs} | {noise} | {start} | {changed} | {final} | {half} | {double} | "
                     f"{hours[t.recipe]:.1f} |")
    lines += ["", f"In all: {sum(map(len, runs_of.values()))} finished runs, {sum(hours.values()):.1f} core-hours."]
    for t in tunings:
        lines += ["", f"## {t.recipe}", "", "start: " + ", ".join(f"{k}={v}" for k, v in t.start.items()),
                  "tuned: " + ", ".join(f"{k}={v}" for k, v in t.centre.items()), ""]
        if t.capped:
            lines += [f"The search stopped at AdamW's {t.capped} runs.", ""]
        lines += ["| round | key | values tried (seed 1) | centre after |", "| --- | --- | --- | --- |"]
        for step in t.tried:
            tried = ", ".join((f"**{v}: {loss:.4f}**" if v == step.centre else f"{v}: {loss:.4f}")
                              for v, loss in sorted(step.losses.items(), key=lambda item: float(item[0])))
            lines.append(f"| {step.round} | {step.key} | {tried} | {step.centre} |")
    text_out = "\n".join(lines) + "\n"
    with open(os.path.join(root, "tuning.md"), "w") as f:
        f.write(text_out)
    # (a recipe an earlier command tuned here keeps its point: a later command may name only some recipes, and
    # the next stage reads every recipe's point from this file)
    tuned_path = os.path.join(root, "tuned.json")
    tuned = read_points(tuned_path) if os.path.exists(tuned_path) else {}
    with open(tuned_path, "w") as f:
        json.dump(tuned | {t.recipe: t.centre for t in tunings if t.centre}, f, indent=1)
    rows = [[recipe, point, os.path.basename(folder)[4:], f"{run.best_val_loss:.6f}"]
            for recipe in sorted(runs_of) for point, folder, run in runs_of[recipe]]
    with open(os.path.join(root, "tuning.csv"), "w", newline="") as f:
        csv.writer(f).writerows([["recipe", "values", "seed", "best_val_loss"], *rows])
    return text_out


def main(argv: list[str] | None = None) -> str:
    parser = argparse.ArgumentParser(
        prog="python -m experiments.tune", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
                                     allow_abbrev=False)
    parser.add_argument("folder")
    parser.add_argument("base", nargs="*", help=f"config files and --key=value overrides for every run "
                                                f"(default: {BASE})")
    parser.add_argument("--recipes", default="", help="comma-separated mini recipes (default: all); AdamW first")
    parser.add_argument("--keys", default="", help="comma-separated keys to tune instead of each recipe's "
                                                   "(learning_rate, weight_decay and its MiniRecipe.tune)")
    parser.add_argument("--jobs", type=at_least(1), default=2, help="runs at a time, one CPU thread each")
    parser.add_argument("--max-rounds", type=at_least(1), default=4, help="(--check: 1)")
    parser.add_argument("--report-only", action="store_true", help="write tuning.md from the runs there")
    parser.add_argument("--stretch", type=float, default=1.0,
                        help="run every recipe at this many times its budget, its schedule stretched (warmup and "
                             "evaluations at the same fractions of the run; experiments.budget_ladder's rule)")
    parser.add_argument("--start-from", default="", metavar="TUNED_JSON",
                        help="start each recipe this file names (another point's tuned.json) at its values there, "
                             "the rest at its config's: the width-192 point starts from the 4x-tokens check's")
    parser.add_argument("--check", action="store_true",
                        help="the transfer check at a new size or budget: from each recipe's tuned point, one "
                             "round over the learning rate (and AdamW's weight decay), the tuned point at seeds 1-3, "
                             "no sensitivity runs")
    args, overrides = parser.parse_known_args(argv)
    signal.signal(signal.SIGTERM, sweep.raise_interrupted)
    try:
        with exit_on_input_error():
            out = tune_recipes(args, (args.base or [BASE]) + overrides)
    except KeyboardInterrupt as e:
        print(f"\ninterrupted: rerun the same command to go on (finished runs are read, unfinished ones "
              f"resumed).", file=sys.stderr)
        raise SystemExit(128 + getattr(e, "signum", signal.SIGINT)) from None
    print(out)
    return out


def planned_tunings(args: argparse.Namespace, base: list[str], recipes: dict[str, MiniRecipe] | None = None
                    ) -> tuple[list[RecipeTuning], dict[str, list[str]], dict[str, dict[str, str]]]:
    """Each recipe's tuning as the command line asks (AdamW first), its train.py arguments, and every recipe's
    starting point (start.json's, else --start-from's, else its config's): every point a search can reach first
    resolved as train.py resolves it, so a bad key or value stops the command by name before any run. recipes: the
    mini recipes (config.cells), or these (experiments.compare's, an optimizer from outside among them)."""
    from experiments.budget_ladder import stretched
    from config.cells import mini_recipes

    recipes = recipes or mini_recipes()
    names = [n for n in args.recipes.split(",") if n] or list(recipes)
    unknown = [n for n in names if n not in recipes]
    if unknown:
        raise InputError(f"--recipes: no mini recipe {unknown[0]!r}; the mini recipes are {', '.join(recipes)}")
    names = [ANCHOR] + [n for n in names if n != ANCHOR]
    for arg in base:
        if arg.startswith("--"):
            sweep.check_not_per_run(arg[2:].partition("=")[0], arg)
    tunings, starts, recipe_args_of = [], recorded_starts(args.folder), {}
    carried = read_points(args.start_from) if args.start_from else {}
    if args.report_only:  # the recipes whose tuning has begun (a report of none would name their starts as tuned)
        if not starts:
            raise InputError(f"{args.folder} holds no tuning (no start.json): --report-only reports the runs of a "
                             "tuning already begun there; check the folder's name, or run the tuning without "
                             "--report-only")
        unbegun = [n for n in args.recipes.split(",") if n and n not in starts]
        if unbegun:
            raise InputError(f"--report-only: {args.folder} holds no tuning of {', '.join(unbegun)} (its start.json "
                             f"has {', '.join(starts)}); leave them out, or tune them first")
        names = [n for n in names if n in starts]
    for name in names:
        keys = [k for k in args.keys.split(",") if k] or (check_keys(base, name) if args.check else
                                                          default_keys(base, recipes[name]))
        missing = [k for k in keys if k != "learning_rate" and k not in LADDERS]
        if missing:
            raise InputError(f"--keys: experiments.tune has no ladder of values for {missing[0]!r}; it tunes "
                             f"learning_rate, {', '.join(LADDERS)}")
        recipe_args = recipes[name].args.split()
        try:
            if args.stretch != 1:
                recipe_args += stretched(sweep.recipe_arguments(base, recipe_args), args.stretch).split()
            start = start_values(base, recipe_args, keys)
        except (InputError, ValueError) as e:
            raise InputError(f"recipe {name}: {e}") from None
        if name not in starts and os.path.isdir(os.path.join(args.folder, name)):
            raise InputError(f"{os.path.join(args.folder, name)} holds runs, but {args.folder}/start.json has no "
                             f"start for {name}: restore the start.json the runs were made from (it is in "
                             f"results/tune/runs.tar.xz), or tune into a new folder")
        start |= {k: v for k, v in carried.get(name, {}).items() if k in start}
        start |= {k: v for k, v in starts.get(name, {}).items() if k in start}  # (a rerun: the start it began at)
        starts[name] = starts.get(name, {}) | start
        sweep.check_points(args.folder, reachable_first(name, keys, start), SEARCH_SEED, base,
                           {name: recipe_args}, f"recipe {name}")
        tunings.append(RecipeTuning(name, keys, start))
        recipe_args_of[name] = recipe_args
    return tunings, recipe_args_of, starts


def tune_recipes(args: argparse.Namespace, base: list[str], recipes: dict[str, MiniRecipe] | None = None) -> str:
    tunings, recipe_args_of, starts = planned_tunings(args, base, recipes)
    if not args.report_only:  # (the report never changes where a later search starts)
        os.makedirs(args.folder, exist_ok=True)
        with open(os.path.join(args.folder, "start.json"), "w") as f:
            json.dump(starts, f, indent=1)
    tuner = Tuner(args.folder, base, recipe_args_of, args.jobs, args.report_only, args.check)
    budget, noise_cap, done = None, None, []
    for tuning in tunings:  # (AdamW first: its run count and noise bound every other recipe's)
        done.append(tuner.tune(tuning, budget, 1 if args.check else args.max_rounds, noise_cap))
        budget = budget if budget is not None else len(tuning.search_runs)
        if noise_cap is None and len(tuning.start_losses) > 1:  # (a noise needs two seeds)
            noise_cap = tuning.noise
        report = write_outputs(args.folder, done)  # (after each recipe: a stopped tuning keeps what it found)
    return report


if __name__ == "__main__":
    main()
