"""
Hyperparameter sweeps with several seeds per point: a grid, or a coordinate search around a centre.

    # learning rate x warmup grid for MARS-approx, 3 seeds, 2 runs at a time on CPU
    python -m scripts.sweep out/sweeps/mars config/mini.py config/mini_mars.py \\
        --grid learning_rate=3e-3,6e-3,1.2e-2 --grid warmup_iters=10,20 --seeds 1,2,3 --jobs 2
    # coordinate search (Wen et al. 2025): vary one key at a time around the centre, move the centre to
    # the best value, repeat; every optimizer of the mini reproduction, one run per GPU
    python -m scripts.sweep out/sweeps/mini config/mini.py --recipes mini \\
        --coordinate learning_rate=3e-3,6e-3,1.2e-2 --coordinate weight_decay=0,0.01,0.1 --rounds 2 --gpus 0,1,2,3

Positional arguments: the sweep's folder, then the config files and --key=value overrides every run
gets. --recipe NAME=ARGS (repeatable) names what differs between the compared optimizers (ARGS: more
config files and overrides); --recipes mini takes the mini reproduction's recipes from the optimizer
registry (optim/__init__.py). A grid key written RECIPE:key applies to that recipe only (each
optimizer its own learning rates). Each run goes to <folder>/<recipe>/<key=value,...>/seed<N>/.

A point's score is its runs' best validation loss (mean and standard deviation over seeds). Rerunning
the same command skips finished runs and resumes unfinished ones (from their checkpoints); a run whose
loss turns NaN/inf is recorded as diverged (diverged.txt in its folder) and not retried. Written to the
folder: sweep.csv and sweep.md (each point: recipe, values, seeds, mean, std, diverged), sweep.png
(score against each swept value, one line per recipe) and a log per run (train.log).
"""

import argparse
import csv
import itertools
import math
import os
import statistics
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from checkpoint import has_checkpoint
from runtime import InputError, exit_on_input_error
from scripts.report import Run, load_run

DIVERGED = "diverged.txt"


@dataclass(frozen=True)
class Point:
    recipe: str
    values: tuple[tuple[str, str], ...]  # (key, value) pairs, in the order the keys were given

    def folder(self, root: str) -> str:
        return os.path.join(root, self.recipe, ",".join(f"{k}={v}" for k, v in self.values) or "base")


@dataclass
class Score:
    losses: list[float]  # best validation loss of each finished seed
    diverged: int

    @property
    def mean(self) -> float:
        return statistics.mean(self.losses) if self.losses else math.inf

    @property
    def std(self) -> float:
        return statistics.stdev(self.losses) if len(self.losses) > 1 else 0.0


def parse_values(specs: list[str]) -> dict[str, list[str]]:
    """['learning_rate=1e-3,2e-3'] -> {'learning_rate': ['1e-3', '2e-3']}."""
    out = {}
    for spec in specs:
        key, sep, values = spec.partition("=")
        if not sep or not values:
            raise InputError(f"cannot read {spec!r}: write key=value1,value2,...")
        out[key] = values.split(",")
    return out


def run_seed(root: str, point: Point, seed: int, base: list[str], recipes: dict[str, list[str]],
             device: str | None) -> None:
    """Train one seed of a point unless it is finished or diverged; resume it if it has a checkpoint."""
    out_dir = os.path.join(point.folder(root), f"seed{seed}")
    if os.path.exists(os.path.join(out_dir, DIVERGED)) or finished_run(out_dir):
        return
    args = base + recipes[point.recipe] + [f"--{k}={v}" for k, v in point.values] + [
        f"--seed={seed}", f"--out_dir={out_dir}", f"--init_from={'resume' if has_checkpoint(out_dir) else 'scratch'}"]
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    if device is not None:
        env["CUDA_VISIBLE_DEVICES"] = device
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "train.log"), "a") as log:
        proc = subprocess.run([sys.executable, "train.py", *args], stdout=log, stderr=subprocess.STDOUT, env=env)
    if proc.returncode != 0:
        with open(os.path.join(out_dir, "train.log")) as f:
            tail = f.read()[-2000:]
        if "loss is nan" in tail or "loss is inf" in tail:
            with open(os.path.join(out_dir, DIVERGED), "w") as f:
                f.write(tail)
        else:
            raise InputError(f"run {out_dir} failed (exit {proc.returncode}); see {out_dir}/train.log:\n{tail}")


def finished_run(out_dir: str) -> Run | None:
    """The run in out_dir if it trained to its end, else None."""
    run = load_run(out_dir) if os.path.exists(os.path.join(out_dir, "metrics.jsonl")) else None
    return run if run is not None and run.complete else None


def score(root: str, point: Point, seeds: list[int]) -> Score:
    losses, diverged = [], 0
    for seed in seeds:
        out_dir = os.path.join(point.folder(root), f"seed{seed}")
        if os.path.exists(os.path.join(out_dir, DIVERGED)):
            diverged += 1
        elif run := finished_run(out_dir):
            losses.append(run.best_val_loss)
    return Score(losses, diverged)


def run_points(root: str, points: list[Point], seeds: list[int], base: list[str], recipes: dict[str, list[str]],
               jobs: int, gpus: list[str]) -> dict[Point, Score]:
    """Every seed of every point, `jobs` at a time (one per GPU with --gpus); their scores."""
    tasks = [(point, seed) for point in points for seed in seeds]
    workers = len(gpus) or jobs
    free_devices = list(gpus)

    def run(task: tuple[Point, int]) -> None:
        device = free_devices.pop() if gpus else None
        try:
            run_seed(root, *task, base, recipes, device)
        finally:
            if device is not None:
                free_devices.append(device)

    with ThreadPoolExecutor(max_workers=workers) as pool:
        list(pool.map(run, tasks))
    return {point: score(root, point, seeds) for point in points}


def grid_points(recipes: list[str], grid: dict[str, list[str]]) -> list[Point]:
    """Every combination of the grid's values, per recipe; a key written recipe:key is that recipe's only."""
    points = []
    for recipe in recipes:
        axes = {key.partition(":")[2] or key: values for key, values in grid.items()
                if ":" not in key or key.startswith(recipe + ":")}
        points += [Point(recipe, tuple(zip(axes, combo))) for combo in itertools.product(*axes.values())]
    return points


def coordinate_search(root: str, recipe: str, axes: dict[str, list[str]], rounds: int, run) -> dict[Point, Score]:
    """Vary one key at a time around the centre (each key's middle value to start), move the centre to
    the best value of that key, for `rounds` passes or until the centre stops moving."""
    centre = {key: values[len(values) // 2] for key, values in axes.items()}
    results: dict[Point, Score] = {}
    for _ in range(rounds):
        moved = False
        for key, values in axes.items():
            points = [Point(recipe, tuple((k, value if k == key else centre[k]) for k in axes)) for value in values]
            results |= run(points)
            best = min(points, key=lambda p: results[p].mean)
            if results[best].losses and dict(best.values)[key] != centre[key]:
                centre[key], moved = dict(best.values)[key], True
        if not moved:
            break
    return results


def write_outputs(root: str, results: dict[Point, Score], seeds: list[int]) -> str:
    keys = list(dict.fromkeys(k for p in results for k, _ in p.values))
    rows = [[p.recipe, *[dict(p.values).get(k, "") for k in keys], len(s.losses), s.diverged,
             f"{s.mean:.4f}" if s.losses else "", f"{s.std:.4f}" if s.losses else ""]
            for p, s in sorted(results.items(), key=lambda item: (item[0].recipe, item[1].mean))]
    header = ["recipe", *keys, "seeds", "diverged", "mean best val loss", "std"]
    with open(os.path.join(root, "sweep.csv"), "w", newline="") as f:
        csv.writer(f).writerows([header] + rows)
    best = {}
    for p, s in results.items():
        if s.losses and (p.recipe not in best or s.mean < results[best[p.recipe]].mean):
            best[p.recipe] = p
    lines = [f"# Sweep {root}", "", f"Seeds per point: {', '.join(map(str, seeds))}. Sorted by mean best "
             "validation loss within each recipe; the best of each recipe in bold.", "",
             "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row, (p, _) in zip(rows, sorted(results.items(), key=lambda item: (item[0].recipe, item[1].mean))):
        cells = [f"**{c}**" if best.get(p.recipe) == p and c != "" else str(c) for c in row]
        lines.append("| " + " | ".join(cells) + " |")
    text = "\n".join(lines) + "\n\n![score against each swept value](sweep.png)\n"
    with open(os.path.join(root, "sweep.md"), "w") as f:
        f.write(text)
    plot(root, results, keys)
    return text


def plot(root: str, results: dict[Point, Score], keys: list[str]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(keys) or 1, figsize=(5 * max(len(keys), 1), 4), squeeze=False)
    for ax, key in zip(axes.flat, keys):
        for recipe in sorted({p.recipe for p in results}):
            # each value of `key` at its best setting of the other keys
            by_value: dict[float, Score] = {}
            for p, s in results.items():
                if p.recipe != recipe or key not in dict(p.values) or not s.losses:
                    continue
                value = float(dict(p.values)[key])
                if value not in by_value or s.mean < by_value[value].mean:
                    by_value[value] = s
            xs = sorted(by_value)
            ax.errorbar(xs, [by_value[x].mean for x in xs], yerr=[by_value[x].std for x in xs], marker="o",
                        capsize=3, label=recipe)
        if all(float(dict(p.values).get(key, 1)) > 0 for p in results):
            ax.set_xscale("log")
        ax.set_xlabel(key)
        ax.set_ylabel("best validation loss (mean ± std over seeds)")
        ax.grid(alpha=0.3)
        ax.legend()
    fig.tight_layout()
    fig.savefig(os.path.join(root, "sweep.png"), dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> str:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("folder")
    parser.add_argument("base", nargs="*", help="config files and --key=value overrides for every run")
    parser.add_argument("--recipe", action="append", default=[], help="NAME=ARGS (repeatable)")
    parser.add_argument("--recipes", choices=["mini"], help="the mini reproduction's recipes from the registry")
    parser.add_argument("--grid", action="append", default=[], help="key=v1,v2,... (repeatable): every combination")
    parser.add_argument("--coordinate", action="append", default=[], help="key=v1,v2,... (repeatable)")
    parser.add_argument("--rounds", type=int, default=2, help="coordinate search: passes over the keys")
    parser.add_argument("--seeds", default="1", help="comma-separated seeds per point")
    parser.add_argument("--jobs", type=int, default=1, help="runs at a time on CPU, one thread each")
    parser.add_argument("--gpus", default="", help="comma-separated GPU ids: one run per GPU at a time")
    args, overrides = parser.parse_known_args(argv)
    with exit_on_input_error():
        if args.grid and args.coordinate:
            raise InputError("give --grid or --coordinate, not both")
        recipes = {name: value.split() for name, _, value in (r.partition("=") for r in args.recipe)}
        if args.recipes == "mini":
            from optim import mini_recipes

            recipes |= {name: value.split() for name, value in mini_recipes().items()}
        recipes = recipes or {"run": []}
        seeds = [int(s) for s in args.seeds.split(",")]
        base, gpus = args.base + overrides, [g for g in args.gpus.split(",") if g]
        os.makedirs(args.folder, exist_ok=True)

        def run(points: list[Point]) -> dict[Point, Score]:
            return run_points(args.folder, points, seeds, base, recipes, args.jobs, gpus)

        if args.coordinate:
            results = {}
            for recipe in recipes:
                results |= coordinate_search(args.folder, recipe, parse_values(args.coordinate), args.rounds, run)
        else:
            results = run(grid_points(list(recipes), parse_values(args.grid)))
        text = write_outputs(args.folder, results, seeds)
    print(text)
    return text


if __name__ == "__main__":
    main()
