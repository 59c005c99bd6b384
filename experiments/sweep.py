"""
Hyperparameter sweeps with several seeds per point: a grid, or a coordinate search around a centre.

    # learning rate x warmup grid for MARS-approx, 3 seeds, 2 runs at a time on CPU
    python -m experiments.sweep out/sweeps/mars config/mini.py config/mini_mars.py \\
        --grid learning_rate=3e-3,6e-3,1.2e-2 --grid warmup_iters=10,20 --seeds 1,2,3 --jobs 2
    # coordinate search (Wen et al. 2025): vary one key at a time around the centre, move the centre to
    # the best value, repeat; every optimizer of the mini reproduction, one run per GPU
    python -m experiments.sweep out/sweeps/mini config/mini.py --recipes mini \\
        --coordinate learning_rate=3e-3,6e-3,1.2e-2 --coordinate weight_decay=0,0.01,0.1 --rounds 2 --gpus 0,1,2,3

Positional arguments: the sweep's folder, then the config files and --key=value overrides every run
gets (its config files before each recipe's, its overrides after them, so an override wins). --recipe NAME=ARGS (repeatable) names what differs between the compared optimizers (ARGS: more
config files and overrides); --recipes mini takes the mini reproduction's recipes from the optimizer
registry (optim/__init__.py). A grid key written RECIPE:key applies to that recipe only (each
optimizer its own learning rates). Each run goes to <folder>/<recipe>/<key=value,...>/seed<N>/.

A point's score is its runs' best validation loss (mean and standard deviation over seeds). Rerunning
the same command skips finished runs and resumes unfinished ones (from their checkpoints); a run whose
loss turns NaN/inf is recorded as diverged (diverged.txt in its folder) and not retried. Written to the
folder: sweep.csv and sweep.md (each point: recipe, values, seeds, mean, std, diverged), sweep.png
(score against each swept value, one line per recipe) and a log per run (train.log).

On a SLURM cluster, --slurm submits the grid's runs as one job array instead (one task a run; sbatch
options in its value: --slurm="--time=24:00:00 --gpus-per-task=1 --partition=gpu"), through
scripts/slurm/sweep_task.sbatch, with the same semantics: finished runs are skipped, unfinished ones
resumed, a diverged run recorded and not retried, and each task requeued at its time limit or on
preemption (train.py's SIGUSR1 handling). Rerunning the command after the array has ended writes
sweep.csv, sweep.md and sweep.png, or submits what is still unfinished.

Every point's config is resolved before the first run starts, so a misspelt key or a value of the wrong
type stops the sweep at once, with nothing written. Ctrl-C stops the running runs (each saves a
checkpoint first; a second Ctrl-C kills them) and starts no more: rerunning the command goes on.
"""

from __future__ import annotations

if not __package__:  # run as a file: the repository's modules (errors, optim, ...) are not importable
    raise SystemExit("experiments/sweep.py is a module of the experiments package: "
                     "run python -m experiments.sweep from the repository root")

import argparse
import csv
import itertools
import json
import math
import os
import shlex
import signal
import statistics
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING

# Standard library only at the top: a SLURM task of a sweep (run_slurm_task) only waits on its train.py,
# and imports nothing heavy (torch: seconds, or a minute on a busy shared file system, and 400 MB held
# beside the run). What the sweep itself needs (the configs, checkpoints, the report) it imports where used.
from errors import InputError, at_least, exit_on_input_error

if TYPE_CHECKING:
    from experiments.report import Run

DIVERGED = "diverged.txt"
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SET_PER_RUN = ("seed", "out_dir", "init_from")  # what the sweep sets for each run: no other argument may


@dataclass(frozen=True)
class Point:
    recipe: str
    values: tuple[tuple[str, str], ...]  # (key, value) pairs, in the order the keys were given

    def folder(self, root: str) -> str:
        return os.path.join(root, self.recipe, ",".join(f"{k}={v}" for k, v in self.values) or "base")

    def seed_folder(self, root: str, seed: int) -> str:
        """One seed's run folder (its out_dir)."""
        return os.path.join(self.folder(root), f"seed{seed}")


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


def seed_list(text: str) -> list[int]:
    """--seeds: comma-separated whole numbers, each once (a repeated seed would be two runs in one folder)."""
    seeds = [at_least(0)(seed) for seed in text.split(",")]
    if len(set(seeds)) < len(seeds):
        raise argparse.ArgumentTypeError(f"'{text}' repeats a seed; give each once")
    return seeds


def parse_values(specs: list[str], option: str) -> dict[str, list[str]]:
    """['learning_rate=1e-3,2e-3'] -> {'learning_rate': ['1e-3', '2e-3']}; option names the flag in errors."""
    out = {}
    for spec in specs:
        key, sep, text = spec.partition("=")
        values = text.split(",")
        if not sep or not key or "" in values:
            raise InputError(f"cannot read {option} {spec!r}: write key=value1,value2,... (no empty key or value)")
        if key in out:
            raise InputError(f"{option} {key} is given twice; give all its values in one: {key}=v1,v2,...")
        if len(set(values)) < len(values):
            raise InputError(f"{option} {spec!r} repeats a value; give each once (the same point twice would be "
                             "two runs in one folder)")
        check_not_per_run(key.rpartition(":")[2], f"{option} {spec!r}")
        out[key] = values
    return out


def check_not_per_run(key: str, where: str) -> None:
    """The sweep gives each run its seed and folder last (so they win): a value for them elsewhere would be lost."""
    if key in SET_PER_RUN:
        raise InputError(f"{where}: the sweep sets {key} for each run itself (seeds: --seeds; each run's folder: "
                         "under the sweep's folder)")


def recipe_arguments(base: list[str], recipe_args: list[str]) -> list[str]:
    """train.py's arguments for a recipe over the base: the base's config files, the recipe's, then the base's
    overrides and the recipe's (so an override in the base wins over a recipe file's value, never lost to it)."""
    files = [a for a in [*base, *recipe_args] if not a.startswith("--")]
    return files + [a for a in [*base, *recipe_args] if a.startswith("--")]


def train_args(root: str, point: Point, seed: int, base: list[str], recipes: dict[str, list[str]]) -> list[str]:
    """train.py's arguments for one seed of a point (but --init_from, which depends on its folder)."""
    out_dir = point.seed_folder(root, seed)
    return recipe_arguments(base, recipes[point.recipe]) + [f"--{k}={v}" for k, v in point.values] + [
        f"--seed={seed}", f"--out_dir={out_dir}"]


def check_points(root: str, points: list[Point], seed: int, base: list[str], recipes: dict[str, list[str]],
                 option: str) -> None:
    """Resolve each point's config as train.py will, so that a misspelt key or a value of the wrong type
    stops the sweep before any run starts or any folder is made (not after the first runs)."""
    from optim import load_config

    for point in points:
        try:
            load_config(train_args(root, point, seed, base, recipes))
        except InputError as e:
            where = ",".join(f"{k}={v}" for k, v in point.values) or "the base arguments"
            raise InputError(f"recipe {point.recipe}, {where}: {e}; fix the {option} spec, the recipe or the "
                             "base arguments") from None


class Interrupted(KeyboardInterrupt):
    """SIGTERM (a scheduler preempting the sweep's job), raised in the main thread so that it stops the
    sweep as Ctrl-C does: the running runs save a checkpoint and stop."""

    def __init__(self, signum: int = signal.SIGINT) -> None:
        super().__init__()
        self.signum = signum


def raise_interrupted(signum: int, frame) -> None:
    raise Interrupted(signum)


class Launcher:
    """Starts the sweep's train.py processes and keeps the running ones in view, so that Ctrl-C can stop
    them (and start no more) rather than leave them training behind the sweep."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.running: set[subprocess.Popen] = set()
        self.stopping = False

    def run(self, command: list[str], **popen_args) -> int | None:
        """Run command to its end: its exit status, or None if the sweep is stopping (nothing started)."""
        with self.lock:  # (so stop() sees every process started before it)
            if self.stopping:
                return None
            proc = subprocess.Popen(command, **popen_args)
            self.running.add(proc)
        try:
            return proc.wait()
        finally:
            with self.lock:
                self.running.discard(proc)

    def stop(self, pool: ThreadPoolExecutor) -> None:
        """Ctrl-C: cancel the runs not started and ask the running ones to stop. SIGTERM, not a second
        SIGINT: train.py takes either as a request to save a checkpoint and stop, but a second SIGINT as
        'kill now', and a Ctrl-C in a terminal has already sent the children one."""
        with self.lock:
            self.stopping = True
            running = list(self.running)
        for proc in running:
            proc.send_signal(signal.SIGTERM)
        if running:
            print(f"stopping {len(running)} running run(s); each saves a checkpoint first (Ctrl-C again to kill "
                  "them)", file=sys.stderr)
        try:
            pool.shutdown(wait=True, cancel_futures=True)
        except KeyboardInterrupt:
            for proc in running:
                proc.kill()
            pool.shutdown(wait=True)


def run_seed(root: str, point: Point, seed: int, base: list[str], recipes: dict[str, list[str]],
             device: str | None, launcher: Launcher) -> None:
    """Train one seed of a point unless it is finished or diverged; resume it if it has a checkpoint."""
    out_dir = point.seed_folder(root, seed)
    if launcher.stopping or settled(out_dir):
        return
    args = train_args(root, point, seed, base, recipes) + ["--init_from=auto"]  # (resumes from a checkpoint)
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    if device is not None:
        env["CUDA_VISIBLE_DEVICES"] = device
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "train.log"), "a") as log:
        returncode = launcher.run([sys.executable, "train.py", *args], stdout=log, stderr=subprocess.STDOUT, env=env)
    if launcher.stopping:  # stopped by Ctrl-C, not failed: a rerun resumes it
        return
    if returncode != 0:
        with open(os.path.join(out_dir, "train.log")) as f:
            tail = f.read()[-2000:]
        if "loss is nan" in tail or "loss is inf" in tail:
            with open(os.path.join(out_dir, DIVERGED), "w") as f:
                f.write(tail)
        else:
            raise InputError(f"run {out_dir} failed (exit {returncode}); see {out_dir}/train.log:\n{tail}")


def submit_array(root: str, tasks: list[tuple[Point, int]], base: list[str], recipes: dict[str, list[str]],
                 sbatch_options: str) -> str:
    """The unfinished runs as one SLURM job array (scripts/slurm/sweep_task.sbatch runs task i of the list
    written to <root>/slurm/); what was submitted, for the console."""
    folder = os.path.join(root, "slurm")
    os.makedirs(folder, exist_ok=True)
    listing = os.path.join(folder, f"tasks_{time.strftime('%Y%m%d-%H%M%S')}.json")
    with open(listing, "w") as f:
        json.dump(dict(root=root, base=base, recipes=recipes,
                       tasks=[(point.recipe, point.values, seed) for point, seed in tasks]), f, indent=1)
    command = ["sbatch", "--parsable", f"--array=0-{len(tasks) - 1}", "--job-name=sweep",
               f"--output={os.path.join(folder, '%A_%a.out')}", *shlex.split(sbatch_options),
               "scripts/slurm/sweep_task.sbatch", os.path.abspath(listing)]
    try:
        proc = subprocess.run(command, capture_output=True, text=True, cwd=REPO, timeout=120)
    except FileNotFoundError:
        raise InputError("--slurm submits with SLURM's sbatch, which is not on this machine's PATH; run the "
                         "sweep on a cluster's login node, or without --slurm") from None
    if proc.returncode != 0:
        raise InputError(f"sbatch refused the sweep's job array ({proc.stderr.strip()}); fix the --slurm options")
    job = proc.stdout.strip().split(";")[0]
    return (f"submitted job array {job}: {len(tasks)} run(s) of {root} (logs: {folder}/{job}_<task>.out). Rerun "
            "this command when it has ended: it writes sweep.csv, sweep.md and sweep.png, or submits what is "
            "unfinished.")


def run_slurm_task(listing: str) -> None:
    """One task of a sweep's job array (SLURM_ARRAY_TASK_ID): its run, as a local sweep runs it."""
    with open(listing) as f:
        sweep = json.load(f)
    recipe, values, seed = sweep["tasks"][int(os.environ["SLURM_ARRAY_TASK_ID"])]
    # SIGUSR1 reaches this process too (every process of the job step): train.py acts on it, this one waits
    signal.signal(signal.SIGUSR1, lambda signum, frame: None)
    point = Point(recipe, tuple(tuple(value) for value in values))
    run_seed(sweep["root"], point, seed, sweep["base"], sweep["recipes"], None, Launcher())


def settled(out_dir: str) -> bool:
    """Whether a run needs no more training: it finished, or it diverged (recorded, never retried)."""
    return os.path.exists(os.path.join(out_dir, DIVERGED)) or finished_run(out_dir) is not None


def finished_run(out_dir: str) -> Run | None:
    """The run in out_dir if it trained to its end, else None."""
    if not os.path.exists(os.path.join(out_dir, "metrics.jsonl")):
        return None  # (not begun: a task's first life reads no run, and imports no report)
    from experiments.report import load_run

    run = load_run(out_dir)
    return run if run is not None and run.complete else None


def score(root: str, point: Point, seeds: list[int]) -> Score:
    losses, diverged = [], 0
    for seed in seeds:
        out_dir = point.seed_folder(root, seed)
        if os.path.exists(os.path.join(out_dir, DIVERGED)):
            diverged += 1
        elif run := finished_run(out_dir):
            losses.append(run.best_val_loss)
    return Score(losses, diverged)


def run_points(root: str, points: list[Point], seeds: list[int], base: list[str], recipes: dict[str, list[str]],
               jobs: int, gpus: list[str], launcher: Launcher) -> dict[Point, Score]:
    """Every seed of every point, `jobs` at a time (one per GPU with --gpus); their scores."""
    tasks = [(point, seed) for point in points for seed in seeds]
    workers = len(gpus) or jobs
    free_devices = list(gpus)

    def run(task: tuple[Point, int]) -> None:
        device = free_devices.pop() if gpus else None
        try:
            run_seed(root, *task, base, recipes, device, launcher)
        finally:
            if device is not None:
                free_devices.append(device)

    pool = ThreadPoolExecutor(max_workers=workers)
    try:
        for future in [pool.submit(run, task) for task in tasks]:
            future.result()
    except KeyboardInterrupt:
        launcher.stop(pool)
        raise
    finally:  # a failed run: the others still finish (their results are kept)
        pool.shutdown(wait=True)
    return {point: score(root, point, seeds) for point in points}


def grid_points(recipes: list[str], grid: dict[str, list[str]]) -> list[Point]:
    """Every combination of the grid's values, per recipe; a key written recipe:key is that recipe's only."""
    unknown = sorted({key.rpartition(":")[0] for key in grid} - {"", *recipes})
    if unknown:
        raise InputError(f"--grid {unknown[0]}:...: there is no recipe {unknown[0]!r}; the recipes are "
                         f"{', '.join(recipes)}")
    points = []
    for recipe in recipes:
        axes: dict[str, list[str]] = {}
        for key, values in grid.items():
            owner, _, name = key.rpartition(":")
            if owner in ("", recipe):
                if name in axes:
                    raise InputError(f"--grid gives {name} twice for recipe {recipe} (as {name} and "
                                     f"{recipe}:{name}); keep one")
                axes[name] = values
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
    # allow_abbrev=False: the train.py override --seed=7 is not --seeds 7
    parser = argparse.ArgumentParser(
        prog="python -m experiments.sweep", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
                                     allow_abbrev=False)
    parser.add_argument("folder")
    parser.add_argument("base", nargs="*", help="config files and --key=value overrides for every run")
    parser.add_argument("--recipe", action="append", default=[], help="NAME=ARGS (repeatable)")
    parser.add_argument("--recipes", help="mini: the mini reproduction's recipes from the registry; "
                                          "mini:NAME,NAME: some of them")
    parser.add_argument("--mini-grid", action="store_true",
                        help="with --recipes mini: each recipe's learning rates from the registry, as a grid")
    parser.add_argument("--grid", action="append", default=[], help="key=v1,v2,... (repeatable): every combination")
    parser.add_argument("--coordinate", action="append", default=[], help="key=v1,v2,... (repeatable)")
    parser.add_argument("--rounds", type=at_least(1), default=2, help="coordinate search: passes over the keys")
    parser.add_argument("--seeds", type=seed_list, default="1", help="comma-separated seeds per point")
    parser.add_argument("--jobs", type=at_least(1), default=1, help="runs at a time on CPU, one thread each")
    parser.add_argument("--gpus", default="", help="comma-separated GPU ids: one run per GPU at a time")
    parser.add_argument("--slurm", nargs="?", const="", metavar="SBATCH_OPTIONS",
                        help="submit the grid's unfinished runs as a SLURM job array (sbatch options in the value)")
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--slurm-task"]:  # a task of that array: scripts/slurm/sweep_task.sbatch runs it
        with exit_on_input_error():
            run_slurm_task(argv[1])
        return ""
    args, overrides = parser.parse_known_args(argv)
    signal.signal(signal.SIGTERM, raise_interrupted)
    try:
        with exit_on_input_error():
            text = run_sweep(args, overrides)
    except KeyboardInterrupt as e:
        print(f"\ninterrupted: {progress(args.folder)}. Rerun the same command to go on: it skips the finished "
              "runs and resumes the others from their checkpoints.", file=sys.stderr)
        # 128 + the signal, as a shell reports a process it ended: 130 for Ctrl-C, 143 for SIGTERM
        raise SystemExit(128 + getattr(e, "signum", signal.SIGINT)) from None
    print(text)
    return text


def chosen_mini_recipes(spec: str) -> dict:
    """--recipes: "mini", every mini recipe of the registry (config.cells), or "mini:NAME,NAME", those."""
    from config.cells import mini_recipes

    kind, _, listed = spec.partition(":")
    every, names = mini_recipes(), [n for n in listed.split(",") if n]
    unknown = [n for n in names if n not in every]
    if kind != "mini":
        raise InputError(f"--recipes {spec}: give mini (every mini recipe) or mini:NAME,NAME")
    if unknown:
        raise InputError(f"--recipes: no mini recipe {unknown[0]!r}; the mini recipes are {', '.join(every)}")
    return {n: every[n] for n in names} if names else every


def run_sweep(args: argparse.Namespace, overrides: list[str]) -> str:
    """Check the whole sweep, then run it and write its outputs; the table as text."""
    if args.grid and args.coordinate:
        raise InputError("give --grid or --coordinate, not both")
    recipes = {name: value.split() for name, _, value in (r.partition("=") for r in args.recipe)}
    if args.recipes:
        chosen = chosen_mini_recipes(args.recipes)
        recipes |= {name: recipe.args.split() for name, recipe in chosen.items()}
        if args.mini_grid:
            args.grid += [f"{name}:learning_rate={','.join(f'{lr:g}' for lr in recipe.learning_rates)}"
                          for name, recipe in chosen.items()]
    recipes = recipes or {"run": []}
    base, gpus = args.base + overrides, [g for g in args.gpus.split(",") if g]
    for arg in base + [arg for recipe_args in recipes.values() for arg in recipe_args]:
        if arg.startswith("--"):
            check_not_per_run(arg[2:].partition("=")[0], arg)
    option = "--coordinate" if args.coordinate else "--grid"
    axes = parse_values(args.coordinate or args.grid, option)
    if args.coordinate and any(":" in key for key in axes):
        raise InputError("--coordinate takes plain keys (RECIPE:key is for --grid); each recipe searches them all")
    if args.slurm is not None and args.coordinate:
        raise InputError("--slurm submits a --grid sweep (its runs are known in advance); a coordinate search "
                         "picks each round's runs from the last round's results: run it without --slurm")
    # the coordinate search can reach any combination of its values, as the grid runs them all
    check_points(args.folder, grid_points(list(recipes), axes), args.seeds[0], base, recipes, option)
    os.makedirs(args.folder, exist_ok=True)
    if args.slurm is not None:
        points = grid_points(list(recipes), axes)
        unfinished = [(point, seed) for point in points for seed in args.seeds
                      if not settled(point.seed_folder(args.folder, seed))]
        if unfinished:
            return submit_array(args.folder, unfinished, base, recipes, args.slurm)
        return write_outputs(args.folder, {point: score(args.folder, point, args.seeds) for point in points},
                             args.seeds)
    launcher = Launcher()

    def run(points: list[Point]) -> dict[Point, Score]:
        return run_points(args.folder, points, args.seeds, base, recipes, args.jobs, gpus, launcher)

    if args.coordinate:
        results = {}
        for recipe in recipes:
            results |= coordinate_search(args.folder, recipe, axes, args.rounds, run)
    else:
        results = run(grid_points(list(recipes), axes))
    return write_outputs(args.folder, results, args.seeds)


def progress(root: str) -> str:
    """How far the sweep in root got: its finished runs, and the unfinished ones a rerun resumes."""
    from checkpoint import has_checkpoint

    finished = resumable = unsaved = 0
    for folder, _, files in os.walk(root):  # (no folder yet: nothing ran)
        if "train.log" not in files:
            continue
        if settled(folder):
            finished += 1
        elif has_checkpoint(folder):
            resumable += 1
        else:
            unsaved += 1
    return (f"{finished} run(s) in {root} finished (or diverged), {resumable} stopped with a checkpoint, "
            f"{unsaved} stopped before their first checkpoint (they start again)")


if __name__ == "__main__":
    main()
