"""
Loss gaps between optimizers across variants of one setting: from a sweep whose recipes are named
<optimizer>@<variant> (experiments.sweep, as scripts/scale_mini.sh runs the GPT-2 against Llama component swaps and
MARS's betas), each variant's mean best validation loss per optimizer over its seeds, and the gap of each optimizer
to the reference optimizer (AdamW by default) with Welch's p, as a markdown table.

    python -m experiments.gaps out/scale/swaps                  # gaps.md in that folder
    python -m experiments.gaps out/scale/betas --reference adamw

A negative gap: the optimizer's loss is below the reference's in that variant. The change of a gap from the first
variant (the baseline) is what the variant does to the optimizer's lead.
"""

from __future__ import annotations

if not __package__:
    raise SystemExit("experiments/gaps.py is a module of the experiments package: "
                     "run python -m experiments.gaps from the repository root")

import argparse
import os
import statistics

from errors import InputError, exit_on_input_error


def read_losses(folder: str) -> dict[str, dict[str, list[float]]]:
    """variant -> optimizer -> each finished seed's best validation loss, from the runs under folder
    (<folder>/<optimizer>@<variant>/base/seed<N>/: a sweep's layout)."""
    from experiments.report import load_run

    losses: dict[str, dict[str, list[float]]] = {}
    if not os.path.isdir(folder):
        raise InputError(f"{folder} does not exist: run the sweep first (bash scripts/scale_mini.sh)")
    for recipe in sorted(os.listdir(folder)):
        optimizer, at, variant = recipe.partition("@")
        if not at or not os.path.isdir(os.path.join(folder, recipe)):
            continue
        for point in sorted(os.listdir(os.path.join(folder, recipe))):
            for seed in sorted(os.listdir(os.path.join(folder, recipe, point))):
                run = load_run(os.path.join(folder, recipe, point, seed))
                if run is not None and run.complete:
                    losses.setdefault(variant, {}).setdefault(optimizer, []).append(run.best_val_loss)
    if not losses:
        raise InputError(f"{folder} holds no finished run of a recipe named <optimizer>@<variant>")
    return losses


def welch_p(a: list[float], b: list[float]) -> float:
    """Welch's p between two sets of seeds (experiments.report's test); nan with fewer than two seeds on a side."""
    from experiments.report import welch

    return welch(a, b)[2] if len(a) > 1 and len(b) > 1 else float("nan")


def table(losses: dict[str, dict[str, list[float]]], reference: str, variants: list[str]) -> str:
    optimizers = sorted({o for by_optimizer in losses.values() for o in by_optimizer} - {reference})
    lines = [f"| variant | {reference} | " + " | ".join(f"{o} | gap to {reference} (p)" for o in optimizers) + " |",
             "| --- | --- |" + " --- | --- |" * len(optimizers)]
    for variant in variants:
        row = losses.get(variant, {})
        ref = row.get(reference, [])
        cells = [f"{statistics.mean(ref):.4f} ± {statistics.stdev(ref) if len(ref) > 1 else 0:.4f} ({len(ref)})"
                 if ref else ""]
        for o in optimizers:
            own = row.get(o, [])
            cells.append(f"{statistics.mean(own):.4f} ± {statistics.stdev(own) if len(own) > 1 else 0:.4f} "
                         f"({len(own)})" if own else "")
            cells.append(f"{statistics.mean(own) - statistics.mean(ref):+.4f} (p = {welch_p(own, ref):.2g})"
                         if own and ref else "")
        lines.append(f"| {variant} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> str:
    parser = argparse.ArgumentParser(prog="python -m experiments.gaps", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("folder", help="a sweep's folder with recipes named <optimizer>@<variant>")
    parser.add_argument("--reference", default="adamw", help="the optimizer every gap is to")
    parser.add_argument("--variants", default="", help="comma-separated, in the table's order (default: the "
                                                        "folder's, sorted, 'gpt2' or 'own' first)")
    args = parser.parse_args(argv)
    with exit_on_input_error():
        losses = read_losses(args.folder)
        variants = [v for v in args.variants.split(",") if v] or sorted(
            losses, key=lambda v: (v not in ("gpt2", "own"), v))
        command = (f"python -m experiments.gaps {args.folder}" + f" --variants {args.variants}" * bool(args.variants)
                   + f" --reference {args.reference}" * (args.reference != "adamw"))
        text = (f"# Loss gaps to {args.reference} ({command})\n\n"
                "Best validation loss, mean ± standard deviation (seeds); each optimizer's gap to "
                f"{args.reference} in the same variant, with Welch's p.\n\n" + table(losses, args.reference, variants)
                + "\n")
        with open(os.path.join(args.folder, "gaps.md"), "w") as f:
            f.write(text)
    print(text)
    return text


if __name__ == "__main__":
    main()
