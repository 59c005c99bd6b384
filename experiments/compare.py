"""
One command for a fair row: an optimizer against the tuned AdamW on the mini testbed, by the protocol every row of
the README's tuned table went through (experiments.tune: coordinate descent on seed 1 over the learning rate, the
weight decay, the warmup and the recipe's own keys, never more runs than AdamW's search made; seeds 2-4 at the
tuned point; the 0.5x/2x sensitivity), then its speedup on the tuned AdamW's budget ladder.

    python -m experiments.compare muon                  # a registry optimizer (its mini recipe)
    python -m experiments.compare muon --muon_eq=True --muon_plus=True    # a variant of it: its settings on top
    python -m experiments.compare torch.optim:Muon --external_params=matrices --learning_rate=0.02
    python -m experiments.compare mypackage.optim:MyAdam --learning_rate=1e-3 --llama    # the mini Llama

The name is a mini recipe (config.cells), a registry optimizer (its first mini recipe) or package.module:Name
(optim/external.py). For a mini recipe the train.py settings after it make a variant of it, searched as the recipe
is, with the keys a setting brings (SETTING_KEYS: an EMA's decay) beside the recipe's (a key its search tunes is
refused: its start is the recipe's), named <recipe>+<key>_<value>...; for an external
optimizer they are its starting point (its learning rate first). The tuned
AdamW is the committed one (results/tune/runs.tar.xz, or results/tune_llama's with --llama): its runs are unpacked
into the folder and read, never rerun. Before any run the command prints how many runs the protocol takes and
about how many core-hours; a progress bar follows the runs; a rerun resumes (finished runs are read, stopped ones
resumed). At the end it prints the row as the README's table has it (best validation loss with its spread over
seeds 1-4, the speedup over the tuned AdamW with its 95% interval, Welch's p against AdamW, the projected GPU-time
speedup where a GPU row exists for the optimizer, its rank among the tuned rows) and writes it to row.md in the
folder (default out/compare/<name>/), beside tuning.md and the runs.
"""

from __future__ import annotations

if not __package__:
    raise SystemExit("experiments/compare.py is a module of the experiments package: "
                     "run python -m experiments.compare from the repository root")

import argparse
import csv
import os
import re
import statistics
import sys
import tarfile
import threading

from errors import InputError, at_least, exit_on_input_error
from experiments import sweep, tune

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TESTBEDS = {  # the tuned AdamW of each testbed: the archive of its tuning, the base config files, its table
    "gpt2": ("results/tune/runs.tar.xz", "mini_tune", ["config/mini.py"], "results/tune/speedups.csv"),
    "llama": ("results/tune_llama/runs.tar.xz", "mini_tune_llama", ["config/mini.py", "config/mini_llama.py"],
              "results/tune_llama/speedups.csv"),
}


# The keys a setting brings, which the variant's search tunes beside its recipe's: an average's horizon, as an
# optimizer's momentum is (experiments.tune's LADDERS; epfml's EMA, a point every 10 steps at decay 0.95, is a
# horizon of 200 steps, sized for runs of thousands: on the mini's 256 it is most of the run, step 10's weights too)
SETTING_KEYS = {("weight_averaging", "ema"): ("ema_decay",), ("weight_averaging", "uniform"): ("averaging_start",)}


def recipe_for(name: str, settings: list[str]) -> tuple[str, "MiniRecipe"]:
    """The recipe to tune: a mini recipe or a registry optimizer's first, with the settings given on top (a variant
    of it: nanochat's Muon, weight averaging, ...; never a key its search tunes; a setting's own keys, SETTING_KEYS,
    searched with the recipe's), or an optimizer from outside the project with the settings given (its own keys
    tuned: the warmup, beside the learning rate and weight decay)."""
    from config.cells import MINI_RECIPES, MiniRecipe, mini_recipes
    from optim.external import is_import_path

    recipes = mini_recipes()
    bad = [s for s in settings if not (s.startswith("--") and "=" in s)]
    if bad:
        raise InputError(f"cannot read {bad[0]!r}: settings are written --key=value")
    if name in recipes or name in MINI_RECIPES:
        recipe = name if name in recipes else next(iter(MINI_RECIPES[name]))
        if not settings:
            return recipe, recipes[recipe]
        brought = tuple(k for s in settings for k in SETTING_KEYS.get(tuple(s[2:].split("=", 1)), ()))
        searched = {"learning_rate", "weight_decay", *recipes[recipe].tune, *brought}  # (tune.default_keys)
        tuned = [s for s in settings if s[2:].split("=")[0] in searched]
        if tuned:
            raise InputError(f"{name} is tuned from its mini recipe (config/mini_*.py): leave out {tuned[0]}, a key "
                             "its search tunes")
        variant = "+".join([recipe, *(re.sub(r"\W+", "_", s[2:]) for s in settings)])
        base = recipes[recipe]
        return variant, MiniRecipe(" ".join([base.args, *settings]), base.learning_rates, (*base.tune, *brought))
    if not is_import_path(name):
        raise InputError(f"no mini recipe or registry optimizer {name!r}, and not package.module:Name; the recipes "
                         f"are {', '.join(recipes)}")
    return re.sub(r"\W+", "_", name).strip("_"), MiniRecipe(" ".join([f"--optimizer={name}", *settings]), (),
                                                            ("warmup_iters",))


def unpack_adamw(archive: str, prefix: str, folder: str) -> None:
    """The tuned AdamW's runs (its search, its tuned point's links and its budget ladder) and its start, from the
    committed archive into folder, unless there already."""
    import json

    if os.path.exists(os.path.join(folder, "adamw")):
        return
    with tarfile.open(os.path.join(REPO, archive)) as tar:
        wanted = [m for m in tar.getmembers() if m.name.startswith((f"{prefix}/adamw/", f"{prefix}/tuned/adamw"))]
        for member in wanted:
            member.name = member.name[len(prefix) + 1:]
        tar.extractall(folder, members=wanted, filter="tar")
        starts = json.load(tar.extractfile(f"{prefix}/start.json"))
    recorded = tune.recorded_starts(folder)
    with open(os.path.join(folder, "start.json"), "w") as f:
        json.dump(recorded | {"adamw": starts["adamw"]}, f, indent=1)


def finished_count(folder: str) -> int:
    return sum(1 for root, _, files in os.walk(folder) if "metrics.jsonl" in files and sweep.finished_run(root))


def estimate(folder: str, recipe: str, base: list[str], recipe_args: list[str]) -> tuple[int, float]:
    """The runs the protocol takes at most (AdamW's search count, the cap; seeds 2-4; the sensitivity), less those
    done, and the core-hours they take at AdamW's mean run time there, times the recipe's passes per step."""
    from optim import load_config

    seconds = statistics.mean(tune.core_seconds(f) for _, f, _ in tune.finished_runs(folder, "adamw"))
    replay = argparse.Namespace(folder=folder, recipes="adamw", keys="", check=False, stretch=1.0, start_from="",
                                report_only=True)
    tunings, recipe_args_of, _ = tune.planned_tunings(replay, base)
    tuner = tune.Tuner(folder, base, recipe_args_of, 1, report_only=True)
    cap = len(tuner.tune(tunings[0], None, 4).search_runs)  # AdamW's search, replayed from its runs
    total = cap + len(tune.FINAL_SEEDS) + 2  # (and seeds 2-4 at the tuned point, the 0.5x and 2x runs)
    done = len(tune.finished_runs(folder, recipe))
    passes = load_config(sweep.recipe_arguments(base, recipe_args)).hyperparameters.gradients_per_step()
    return max(total - done, 0), max(total - done, 0) * seconds * passes / 3600


def follow(folder: str, total: int, stop: threading.Event) -> None:
    """A progress bar of the recipe's finished runs, until stop."""
    from tqdm import tqdm

    start = finished_count(folder)
    with tqdm(total=total, desc="runs", unit="run", file=sys.stderr) as bar:
        while not stop.wait(5.0):
            bar.n = min(finished_count(folder) - start, total)
            bar.refresh()
        bar.n = min(finished_count(folder) - start, total)
        bar.refresh()


ROW_HEADER = ("| optimizer | best val loss (seeds 1-4) | speedup over tuned AdamW | projected GPU-time speedup | "
              "Welch's p against AdamW | rank by loss |\n| --- | --- | --- | --- | --- | --- |")


def the_row(folder: str, recipe: str, table: str) -> str:
    """The README's tuned-table row of the recipe: loss ± spread, speedup (interval), Welch's p against AdamW, the
    projected GPU-time speedup where measured, and the rank by loss among the committed tuned rows."""
    from experiments import report

    runs = [r for r in report.find_runs([os.path.join(folder, "tuned")]) if report.own_schedule(r)]
    mine = [r for r in runs if os.path.join("tuned", recipe, "") in r.path]
    # the tuned AdamW's own runs, its ladder's (tuned/adamw@<f>x) with them: never a variant's, AdamW's too
    adamw = [r for r in runs if re.search(r"(^|/)tuned/adamw(@[^/]+)?/", r.path.replace(os.sep, "/"))]
    if not mine:
        raise InputError(f"{folder}/tuned/{recipe} holds no finished tuned point yet: rerun to finish the protocol")
    budget = mine[0].budget
    curve = report.AdamWCurve.of(report.adamw_ladder(adamw))
    losses = [r.best_val_loss for r in mine]
    reference = [r.best_val_loss for r in adamw if r.budget == budget]
    speedup = report.token_speedup(curve, losses, budget)
    _, _, p = report.welch(losses, reference)
    projected = report.gpu_rows(report.read_whole_steps()).projection(mine[0].optimizer, speedup)
    with open(os.path.join(REPO, table)) as f:
        others = {row["optimizer"]: float(row["loss_mean"]) for row in csv.DictReader(f)}
    if "+" not in recipe:  # (a recipe tuned again replaces its row; a variant ranks beside its recipe's)
        others.pop(mine[0].optimizer, None)
    mean = statistics.mean(losses)
    rank = 1 + sum(loss < mean for loss in others.values())
    return (f"| {mine[0].optimizer} | {mean:.3f} ± {statistics.stdev(losses):.3f} | {speedup.text()} | "
            f"{projected.text() if projected else ''} | p = {p:.2g} | {rank} of {len(others) + 1} |")


def main(argv: list[str] | None = None) -> str:
    parser = argparse.ArgumentParser(prog="python -m experiments.compare", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter, allow_abbrev=False)
    parser.add_argument("name", help="a mini recipe, a registry optimizer, or package.module:Name")
    parser.add_argument("--folder", default="", help="where the runs and the row go (default out/compare/<name>)")
    parser.add_argument("--llama", action="store_true", help="on the mini Llama, against its own tuned AdamW")
    parser.add_argument("--jobs", type=at_least(1), default=2, help="runs at a time, one CPU thread each")
    parser.add_argument("--estimate", action="store_true", help="print the runs and core-hours, run nothing")
    args, settings = parser.parse_known_args(argv)
    with exit_on_input_error():
        archive, prefix, base, table = TESTBEDS["llama" if args.llama else "gpt2"]
        recipe, mini = recipe_for(args.name, settings)
        folder = args.folder or os.path.join("out", "compare", recipe + ("_llama" if args.llama else ""))
        os.makedirs(folder, exist_ok=True)
        unpack_adamw(archive, prefix, folder)
        from config.cells import mini_recipes

        runs, hours = estimate(folder, recipe, base, mini.args.split())
        print(f"{recipe} on the {'mini Llama' if args.llama else 'GPT-2 mini'}: at most {runs} runs to go, about "
              f"{hours:.1f} core-hours ({hours / args.jobs:.1f} hours on {args.jobs} cores); results in {folder}")
        if args.estimate:
            return ""
        options = argparse.Namespace(folder=folder, recipes=f"adamw,{recipe}", keys="", check=False, stretch=1.0,
                                     start_from="",
                                     report_only=False, jobs=args.jobs, max_rounds=4)
        stop = threading.Event()
        bar = threading.Thread(target=follow, args=(os.path.join(folder, recipe), runs, stop), daemon=True)
        bar.start()
        try:
            tune.tune_recipes(options, base, mini_recipes() | {recipe: mini})
        finally:
            stop.set()
            bar.join()
        row = the_row(folder, recipe, table)
    with open(os.path.join(folder, "row.md"), "w") as f:
        f.write(ROW_HEADER + "\n" + row + "\n")
    print(ROW_HEADER + "\n" + row)
    return row


if __name__ == "__main__":
    main()
