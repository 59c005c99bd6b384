"""
The batch-size ladder: the CPU testbed's optimizer ranking as a function of tokens per step.

    python -m experiments.batch_ladder out/ladder --jobs 2   # 86 runs, about 2 h 40 min on 2 cores

Every optimizer of LADDER runs the same token budget (config/ladder.py: 4.19M tokens) at each size of
SIZES (4K, 16K and 64K tokens per step: 1,024, 256 and 64 steps), warmup and evaluation at the same
tokens. Its learning rate is tuned per size with experiments/sweep.py (one seed, a factor-2 grid that
grows by one value past an edge until the best rate is interior, up to MAX_EXTENSIONS times), then the
best rate runs three fresh seeds (2, 3, 4). MARS-exact takes two forward-backward passes per step: the
report also reads it at the passes the others spend (report.py --x passes). Runs in
<folder>/<optimizer>@<size>/learning_rate=<lr>/seed<N>/; rerunning resumes what is not done. Then the
report, in <folder>/report/ (--report-only: just that): ladder.md (each optimizer's tuned rate and
best validation loss per size, the tuning, Welch's tests of MARS against AdamW, the diagnostics) and
ladder.png (best validation loss and the diagnostics against tokens per step).
"""

if not __package__:  # run as a file: the repository's modules (errors, optim, ...) are not importable
    raise SystemExit("experiments/batch_ladder.py is a module of the experiments package: "
                     "run python -m experiments.batch_ladder from the repository root")

import argparse
import os
import shutil
import statistics
from typing import NamedTuple

from errors import at_least
from experiments import sweep
from experiments.report import (
    MIN_BUDGETS, AdamWCurve, Run, adamw_ladder, format_tokens, markdown_table, token_speedup, welch,
)

SIZES = {"4K": 4096, "16K": 16384, "64K": 65536}
BASE = ["config/mini.py", "config/ladder.py"]
# optimizer -> (its recipe after BASE, learning rates tried first at 4K, their factor per 4x in batch).
# AdamW's and MARS-approx's grids ran first, four rates doubling per size; MARS-exact (two passes a step)
# and Muon start from three rates, the same at every size: MARS-exact's around MARS-approx's optima
# (they share the paper's hyperparameters), Muon's around its mini-reproduction rate (4e-2).
LADDER = {
    "adamw": ("config/mini_adamw.py", (1e-3, 2e-3, 4e-3, 8e-3), 2),
    "mars_approx": ("config/mini_mars.py --is_approx=True", (1.5e-3, 3e-3, 6e-3, 1.2e-2), 2),
    "mars_exact": ("config/mini_mars.py --is_approx=False", (3e-3, 6e-3, 1.2e-2), 1),
    "muon": ("config/mini_muon.py", (2e-2, 4e-2, 8e-2), 1),
}
# Fresh seeds at the tuned point: the tuning seed's loss is the best of its grid (biased low, the more so
# the more rates an optimizer tried), so it stays out of the comparison.
TUNING_SEED, SEEDS = 1, (2, 3, 4)
MAX_EXTENSIONS = 3  # grid values added past an edge, per recipe, before giving up on an interior optimum


def size_args(tokens_per_step: int, budget: int) -> str:
    """The per-size settings: warmup over 10% of the budget, an evaluation every 262,144 tokens."""
    steps_per_eval = max(1, 262144 // tokens_per_step)
    return (f"--total_batch_size={tokens_per_step} --micro_batch_size={min(64, tokens_per_step // 256)} "
            f"--max_tokens={budget} --warmup_iters={max(1, budget // tokens_per_step // 10)} "
            f"--eval_interval={steps_per_eval} --log_interval={max(1, steps_per_eval // 4)}")


def recipe_name(optimizer: str, size: str) -> str:
    return f"{optimizer}@{size}"


def lr_text(lr: float) -> str:
    return f"{lr:.4g}"


def run_grid(folder: str, grids: dict[str, list[float]], seeds: tuple[int, ...], tokens: int, jobs: int,
             extra: list[str]) -> None:
    """One sweep over every recipe's learning rates (finished runs are skipped)."""
    argv = [folder, *BASE, *extra, "--jobs", str(jobs), "--seeds", ",".join(map(str, seeds))]
    for optimizer, (recipe, _, _) in LADDER.items():
        for size, tokens_per_step in SIZES.items():
            name = recipe_name(optimizer, size)
            if name in grids:
                argv += ["--recipe", f"{name}={recipe} {size_args(tokens_per_step, tokens)}",
                         f"--grid={name}:learning_rate={','.join(lr_text(lr) for lr in grids[name])}"]
    sweep.main(argv)


def tuning_score(folder: str, name: str, lr: float) -> sweep.Score:
    """The tuning seed's score at one rate of a recipe (no losses, no divergence: not run to its end yet)."""
    return sweep.score(folder, sweep.Point(name, (("learning_rate", lr_text(lr)),)), [TUNING_SEED])


def lowest(losses: dict[float, float]) -> float | None:
    """The rate with the lowest loss (None: none finished; a diverged or unrun rate's loss is inf)."""
    lr = min(losses, key=losses.get)
    return lr if losses[lr] < float("inf") else None


def best_rate(folder: str, name: str, rates: list[float]) -> float | None:
    """The rate with the tuning seed's lowest best validation loss (None: none finished)."""
    return lowest({lr: tuning_score(folder, name, lr).mean for lr in rates})


def widened(rates: list[float], best: float | None) -> list[float]:
    """The grid with one more factor-2 value past the edge the best rate sits on (as it was: interior)."""
    if best == rates[-1]:
        return rates + [rates[-1] * 2]
    if best == rates[0]:
        return [rates[0] / 2] + rates
    return rates


def tune(folder: str, tokens: int, jobs: int, extra: list[str]) -> dict[str, float]:
    """Each recipe's best rate on the tuning seed, the grid widened past an edge until the best is interior."""
    grids = {recipe_name(optimizer, size): [lr * factor ** i for lr in rates]
             for optimizer, (_, rates, factor) in LADDER.items() for i, size in enumerate(SIZES)}
    for _ in range(MAX_EXTENSIONS + 1):
        run_grid(folder, grids, (TUNING_SEED,), tokens, jobs, extra)
        best = {name: best_rate(folder, name, rates) for name, rates in grids.items()}
        widened_grids = {name: widened(rates, best[name]) for name, rates in grids.items()}
        if widened_grids == grids:
            break
        grids = widened_grids
    shutil.copy(os.path.join(folder, "sweep.md"), os.path.join(folder, "tuning.md"))
    return best


class Tuned(NamedTuple):
    lr: float  # the best rate on the tuning seed among the rates it finished
    tuning: dict[float, float]  # each rate tried on the tuning seed -> its best validation loss (inf: diverged)
    runs: list[Run]  # the fresh seeds finished at lr

    @property
    def interior(self) -> bool:
        """A rate tried on each side of the best (finished or diverged): the optimum is bracketed."""
        return min(self.tuning) < self.lr < max(self.tuning)


def tuned_runs(folder: str) -> dict[str, Tuned]:
    """Each recipe's tuned rate and its finished fresh seeds there (recipes whose tuning ran at all)."""
    out = {}
    for optimizer in LADDER:
        for size in SIZES:
            name = recipe_name(optimizer, size)
            recipe_folder = os.path.join(folder, name)
            rates = [float(d.split("=", 1)[1]) for d in os.listdir(recipe_folder)
                     if d.startswith("learning_rate=")] if os.path.isdir(recipe_folder) else []
            scores = {lr: tuning_score(folder, name, lr) for lr in sorted(rates)}
            tuning = {lr: score.mean for lr, score in scores.items() if score.losses or score.diverged}
            lr = lowest(tuning) if tuning else None
            if lr is not None:
                point = sweep.Point(name, (("learning_rate", lr_text(lr)),))
                runs = [sweep.finished_run(point.seed_folder(folder, seed)) for seed in SEEDS]
                out[name] = Tuned(lr, tuning, [run for run in runs if run is not None])
    return out


def seed_runs(tuned: dict[str, Tuned], optimizer: str, size: str) -> list[Run]:
    """The fresh seeds at an optimizer's tuned rate for one size (none: not tuned there yet)."""
    return tuned[recipe_name(optimizer, size)].runs if recipe_name(optimizer, size) in tuned else []


def at_equal_passes(run: Run) -> float:
    """Best validation loss within the forward-backward passes a one-pass optimizer spends on the budget."""
    return min(v[3] for v in run.val if v[1] * run.passes_per_step <= run.budget)


# metrics.jsonl key -> its title in the table and the figure
DIAGNOSTICS = (("mars/grad_cos", "cos(g_t, g_prev)"), ("mars/clipped_fraction", "MARS: tensors with c clipped"),
               ("clip_rate", "steps with the gradient norm clipped"))


def diagnostic_mean(runs: list[Run], key: str) -> float | None:
    """The mean over the runs' logged training rows of one diagnostic (None: not logged)."""
    values = [row[key] for run in runs for row in run.train_rows if key in row]
    return statistics.mean(values) if values else None


def speedup_note(curves: dict[str, AdamWCurve | None], tuned: dict[str, Tuned]) -> str:
    """What the speedup column reads (experiments/report.py's token-equivalent speedup), and where AdamW's
    runs do not allow it."""
    missing = []
    for size, curve in curves.items():
        if curve is None:
            budgets = sorted({r.budget for r in seed_runs(tuned, "adamw", size)})
            missing.append(f"{size} ({len(budgets)} budget{'s' * (len(budgets) != 1)}"
                           f"{': ' + ', '.join(format_tokens(b) for b in budgets) if budgets else ''})")
    note = ("'speedup over AdamW': AdamW's tokens to reach the optimizer's mean loss at that size, over the "
            "optimizer's tokens (experiments/report.py: AdamW run to the end of its own schedule at each budget, its "
            "curve inverted; 95% interval from the seeds).")
    if missing:
        note += (f" '-': AdamW's runs do not allow it at {', '.join(missing)}: the curve needs AdamW at "
                 f"{MIN_BUDGETS} or more budgets at that size, each run to the end of its own schedule.")
    return note


def report(folder: str) -> str:
    """ladder.md and ladder.png in <folder>/report/; returns the markdown."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tuned = tuned_runs(folder)
    out = os.path.join(folder, "report")
    os.makedirs(out, exist_ok=True)
    rows, tests, diagnostics, tuning = [], [], [], []
    # AdamW's loss against its token budget, per size, from its fresh seeds (None: too few budgets)
    curves = {size: AdamWCurve.of(adamw_ladder(seed_runs(tuned, "adamw", size))) for size in SIZES}
    for optimizer in LADDER:
        for size in SIZES:
            point = tuned.get(recipe_name(optimizer, size))
            if point is None:
                continue
            tried = {lr: f"{lr:g}: {loss:.3f}" for lr, loss in point.tuning.items()}
            tried[point.lr] = f"**{tried[point.lr]}**"
            tuning.append([optimizer, size, ", ".join(tried.values())])
            losses = [r.best_val_loss for r in point.runs]
            if losses:
                lr = f"{point.lr:g}" if point.interior else f"{point.lr:g} (edge)"
                spread = f" ± {statistics.stdev(losses):.4f}" if len(losses) > 1 else ""
                equal = ""
                if point.runs[0].passes_per_step > 1:
                    equal = f"{statistics.mean(at_equal_passes(r) for r in point.runs):.4f}"
                speedup = "-"
                if curves[size] is not None:
                    speedup = token_speedup(curves[size], losses, point.runs[0].budget).text()
                rows.append([optimizer, size, lr, f"{statistics.mean(losses):.4f}{spread}", equal, speedup,
                             str(len(losses))])
            means = [diagnostic_mean(point.runs, key) for key, _ in DIAGNOSTICS]
            if any(mean is not None for mean in means):
                diagnostics.append([optimizer, size, *("" if mean is None else f"{mean:.3f}" for mean in means)])
    for size in SIZES:
        adamw = [r.best_val_loss for r in seed_runs(tuned, "adamw", size)]
        for optimizer in ("mars_approx", "mars_exact"):
            mars = [r.best_val_loss for r in seed_runs(tuned, optimizer, size)]
            if len(adamw) > 1 and len(mars) > 1:
                difference, t, p = welch(mars, adamw)
                tests.append([size, optimizer, f"{difference:+.4f}", f"{t:.2f}", f"{p:.3g}"])
    text = "\n\n".join([
        f"# Batch-size ladder ({folder})",
        "Best validation loss (nats per byte; mean ± std over the fresh seeds 2, 3, 4) at each optimizer's "
        "tuned learning rate (tuned on seed 1). 'at equal passes': MARS-exact's best within the forward-backward "
        "passes the others spend, read from its own run halfway through its schedule (the learning rate still "
        "high there: a bound that favours the others). '(edge)': the tuned rate is the largest or smallest "
        "the tuning finished, so the optimum may lie past it.",
        markdown_table(["optimizer", "tokens per step", "tuned lr", "best val loss", "at equal passes",
                        "speedup over AdamW", "seeds"], rows),
        speedup_note(curves, tuned),
        "The tuning: the tuning seed's best validation loss at each learning rate tried (inf: diverged), the "
        "tuned rate in bold:",
        markdown_table(["optimizer", "tokens per step", "learning rate: best val loss"], tuning),
        "Welch's t-test, MARS minus AdamW (negative: MARS better):",
        markdown_table(["tokens per step", "MARS", "mean difference", "t", "p"], tests) if tests else "(no seeds yet)",
        "The diagnostics, mean over the fresh seeds' logged steps: MARS's cos(g_t, g_prev) and fraction of tensors "
        "whose corrected gradient c was clipped (to norm 1), and every optimizer's fraction of steps whose "
        "gradient norm was clipped (grad_clip):",
        markdown_table(["optimizer", "tokens per step", *(title for _, title in DIAGNOSTICS)], diagnostics),
        "![ladder](ladder.png)",
    ]) + "\n"
    with open(os.path.join(out, "ladder.md"), "w") as f:
        f.write(text)

    fig, axes = plt.subplots(2, 2, figsize=(11, 8))
    loss_ax, *diagnostic_axes = axes.flat
    for i, optimizer in enumerate(LADDER):
        points = [(SIZES[size], runs) for size in SIZES if (runs := seed_runs(tuned, optimizer, size))]
        if not points:
            continue
        xs = [x for x, _ in points]
        means = [statistics.mean(r.best_val_loss for r in runs) for _, runs in points]
        stds = [statistics.stdev([r.best_val_loss for r in runs]) if len(runs) > 1 else 0.0 for _, runs in points]
        loss_ax.plot(xs, means, marker="o", color=f"C{i}", label=optimizer)
        loss_ax.fill_between(xs, [m - s for m, s in zip(means, stds)], [m + s for m, s in zip(means, stds)],
                             color=f"C{i}", alpha=0.2)
        for ax, (key, _) in zip(diagnostic_axes, DIAGNOSTICS):
            values = [(x, diagnostic_mean(runs, key)) for x, runs in points]
            values = [(x, v) for x, v in values if v is not None]
            if values:
                ax.plot(*zip(*values), marker="o", color=f"C{i}", label=optimizer)
    titles = ["best validation loss (mean ± std over seeds)", *(title for _, title in DIAGNOSTICS)]
    for ax, title in zip((loss_ax, *diagnostic_axes), titles):
        ax.set_xscale("log", base=2)
        ax.set_xticks(list(SIZES.values()), list(SIZES))
        ax.set_xlabel("tokens per step")
        ax.set_title(title)
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend()
    fig.tight_layout()
    fig.savefig(os.path.join(out, "ladder.png"), dpi=110)
    plt.close(fig)
    return text


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m experiments.batch_ladder", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("folder")
    parser.add_argument("--tokens", type=at_least(1), default=4 * 1024 * 1024, help="the token budget of a run")
    parser.add_argument("--jobs", type=at_least(1), default=2, help="runs at a time, one CPU thread each")
    parser.add_argument("--report-only", action="store_true", help="write the report of the runs so far")
    args, extra = parser.parse_known_args(argv)  # extra: train.py overrides for every run (e.g. a dry run's)
    if not args.report_only:
        best = tune(args.folder, args.tokens, args.jobs, extra)
        run_grid(args.folder, {name: [lr] for name, lr in best.items() if lr is not None}, SEEDS, args.tokens,
                 args.jobs, extra)
    print(report(args.folder))


if __name__ == "__main__":
    main()
