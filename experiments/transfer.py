"""
Learning-rate transfer across widths: from a sweep of learning rate x width per recipe (experiments.sweep, as
scripts/scale_mini.sh runs it: AdamW and Muon, each under sp and mup, at widths 48 to 384), each width's best
learning rate and how far it drifts across widths under each parametrization (mup's goal: within a factor of
sqrt(2)), as a table and a figure.

    python -m experiments.transfer out/scale/transfer            # transfer.md and transfer.png in that folder

A width's optimum is the vertex of a parabola through the best learning rate's loss and its two neighbours on a
log2 scale (the grid's own point where the best lies on the grid's edge, marked: the optimum may lie beyond it).
The drift is the largest optimum over the smallest.
"""

from __future__ import annotations

if not __package__:
    raise SystemExit("experiments/transfer.py is a module of the experiments package: "
                     "run python -m experiments.transfer from the repository root")

import argparse
import csv
import math
import os
from collections import defaultdict

from errors import InputError, exit_on_input_error

GOAL = math.sqrt(2)  # mup's optimum may drift by at most this factor across widths


def read_sweep(folder: str) -> dict[str, dict[int, dict[float, float]]]:
    """recipe -> width -> learning rate -> mean best validation loss, from the sweep's sweep.csv (inf: diverged)."""
    path = os.path.join(folder, "sweep.csv")
    if not os.path.exists(path):
        raise InputError(f"{path} does not exist: run the transfer sweep first (bash scripts/scale_mini.sh)")
    losses: dict[str, dict[int, dict[float, float]]] = defaultdict(lambda: defaultdict(dict))
    with open(path) as f:
        for row in csv.DictReader(f):
            if "n_embd" not in row or "learning_rate" not in row:
                raise InputError(f"{path} is not a sweep over n_embd and learning_rate (its columns: {list(row)})")
            loss = float(row["mean best val loss"]) if row["mean best val loss"] else math.inf
            losses[row["recipe"]][int(row["n_embd"])][float(row["learning_rate"])] = loss
    return losses


def optimum(by_lr: dict[float, float]) -> tuple[float, bool]:
    """The best learning rate (a parabola's vertex in log2 lr through the best point and its neighbours) and
    whether it lies on the grid's edge (then the grid point itself)."""
    rates = sorted(by_lr)
    i = min(range(len(rates)), key=lambda j: by_lr[rates[j]])
    if i in (0, len(rates) - 1) or not all(math.isfinite(by_lr[rates[j]]) for j in (i - 1, i, i + 1)):
        return rates[i], True
    (x0, x1, x2), (y0, y1, y2) = (math.log2(rates[j]) for j in (i - 1, i, i + 1)), (by_lr[rates[j]] for j in (i - 1, i, i + 1))
    denominator = (x0 - x1) * (x0 - x2) * (x1 - x2)
    a = (x2 * (y1 - y0) + x1 * (y0 - y2) + x0 * (y2 - y1)) / denominator
    b = (x2 * x2 * (y0 - y1) + x1 * x1 * (y2 - y0) + x0 * x0 * (y1 - y2)) / denominator
    vertex = -b / (2 * a) if a > 0 else x1
    return 2 ** min(max(vertex, x0), x2), False


def table(losses: dict[str, dict[int, dict[float, float]]]) -> str:
    widths = sorted({w for by_width in losses.values() for w in by_width})
    lines = ["| recipe | " + " | ".join(f"width {w}" for w in widths) + " | drift (largest / smallest) |",
             "| --- |" + " --- |" * (len(widths) + 1)]
    for recipe in sorted(losses):
        cells, found = [], []
        for w in widths:
            if w not in losses[recipe] or not any(map(math.isfinite, losses[recipe][w].values())):
                cells.append("")
                continue
            lr, edge = optimum(losses[recipe][w])
            found.append(lr)
            best = min(losses[recipe][w].values())
            cells.append(f"{lr:.3g}{' (edge)' if edge else ''}, {best:.3f}")
        drift = max(found) / min(found) if len(found) > 1 else math.nan
        verdict = "" if math.isnan(drift) else (" (within sqrt 2)" if drift <= GOAL else "")
        lines.append(f"| {recipe} | " + " | ".join(cells) + f" | {drift:.2f}x{verdict} |")
    return "\n".join(lines)


def plot(losses: dict[str, dict[int, dict[float, float]]], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    recipes = sorted(losses)
    fig, axes = plt.subplots(1, len(recipes), figsize=(4.5 * len(recipes), 4), squeeze=False, sharey=True)
    for ax, recipe in zip(axes.flat, recipes):
        for w in sorted(losses[recipe]):
            rates = sorted(r for r in losses[recipe][w] if math.isfinite(losses[recipe][w][r]))
            ax.plot(rates, [losses[recipe][w][r] for r in rates], marker="o", label=f"width {w}")
        ax.set_xscale("log")
        ax.set_title(recipe)
        ax.set_xlabel("learning rate")
        ax.grid(alpha=0.3)
        ax.legend()
    axes.flat[0].set_ylabel("best validation loss (nats per byte)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> str:
    parser = argparse.ArgumentParser(prog="python -m experiments.transfer", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("folder", help="the sweep's folder (its sweep.csv)")
    args = parser.parse_args(argv)
    with exit_on_input_error():
        losses = read_sweep(args.folder)
        text = ("# Learning-rate transfer across widths (python -m experiments.transfer)\n\n"
                "Each width's best learning rate (the parabola's vertex in log2 lr; '(edge)': the grid's end, the "
                f"optimum may lie beyond) and its best validation loss; the drift across widths (mup's goal: at "
                f"most sqrt 2 = {GOAL:.2f}x).\n\n" + table(losses) + "\n\n![loss against learning rate, a line per "
                "width](transfer.png)\n")
        with open(os.path.join(args.folder, "transfer.md"), "w") as f:
            f.write(text)
        plot(losses, os.path.join(args.folder, "transfer.png"))
    print(text)
    return text


if __name__ == "__main__":
    main()
