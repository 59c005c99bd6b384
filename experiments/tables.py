"""
The README's and docs' result tables, generated instead of pasted: each marked region of a page

    <!-- table:mini -->
    ... (rewritten) ...
    <!-- /table -->

is rewritten from the committed results:

    python -m experiments.tables            # rewrite every region (README.md, docs/*.md)
    python -m experiments.tables --check    # exit 1, naming the page, where a region differs from its results

Tables:
  mini   the CPU mini reproduction, learning rate only (results/mini/speedups.csv) beside the tuned recipes
         (results/tune/speedups.csv), each speedup over AdamW with the GPU time it projects: the speedup and its
         interval's ends times AdamW's whole training step over the optimizer's, from the measured rows of
         results/gpu/whole_steps.json (experiments.report's projected_gpu_speedup and default rows).

A speedups.csv holds one row per optimizer (by its display name): its mean best validation loss and standard
deviation over seeds and its token-equivalent speedup over AdamW with the 95% interval's ends, as
experiments.report computes them (its "Token-equivalent speedup" section). The mini runs' own metrics are not
committed (the tuning's are, in results/tune/runs.tar.xz), so the committed speedups.csv files are the table's
inputs as published: two decimals, and a third where the published projection pins it. The projected columns
are computed here, so a new GPU row in whole_steps.json changes them with one command.
"""

from __future__ import annotations

if not __package__:  # run as a file: the repository's modules (errors, optim, ...) are not importable
    raise SystemExit("experiments/tables.py is a module of the experiments package: "
                     "run python -m experiments.tables from the repository root")

import argparse
import csv
import os
import re
import sys

from errors import InputError, exit_on_input_error

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS = os.path.join(REPO, "results")
REGION = re.compile(r"(<!-- table:(\w+) -->\n)(.*?)(<!-- /table -->)", flags=re.S)
REFERENCE = "AdamW"
LABELS = {"NAdamW": "NAdamW (AlgoPerf's)"}  # a row's name in the table, where the display name needs a word


def read_speedups(path: str) -> dict[str, dict]:
    """optimizer -> its row of a speedups.csv (floats; low and high None where empty: AdamW's own)."""
    try:
        with open(path, newline="") as f:
            rows = list(csv.DictReader(f))
    except OSError as e:
        raise InputError(f"cannot read {path} ({e.strerror}); run experiments.report over the runs first") from e
    out = {}
    for number, row in enumerate(rows, start=2):
        try:
            out[row["optimizer"]] = {"loss_mean": float(row["loss_mean"]), "loss_std": float(row["loss_std"]),
                                     "speedup": float(row["speedup"]),
                                     "low": float(row["low"]) if row["low"] else None,
                                     "high": float(row["high"]) if row["high"] else None}
        except (KeyError, TypeError, ValueError) as e:
            raise InputError(f"{path}, line {number}: not a speedups.csv row ({e}); fix the row") from None
    return out


def speedup_text(value: float, low: float | None, high: float | None) -> str:
    if low is None or high is None:
        return f"{value:g}x"
    return f"{value:.2f}x ({low:.2f} to {high:.2f})"


def projected(gpu, optimizer: str, row: dict) -> str:
    """The GPU time the speedup projects on gpu's rows ('' where the optimizer has no measured row)."""
    from experiments.report import Speedup, projected_gpu_speedup

    if optimizer not in gpu.rows:
        return ""
    if row["low"] is None:
        return speedup_text(row["speedup"], None, None)
    scaled = projected_gpu_speedup(Speedup(row["speedup"], row["low"], row["high"], row["low"], row["high"]),
                                   gpu.rows[REFERENCE]["whole_step_ms"], gpu.rows[optimizer]["whole_step_ms"])
    return speedup_text(scaled.value, scaled.low, scaled.high)


def mini_table(results: str = RESULTS) -> str:
    """The README's mini table: every optimizer of the learning-rate-only runs, best loss first, beside its
    tuned row where the tuning ran it; the best of each group in bold."""
    from experiments.report import gpu_rows, read_whole_steps

    gpu = gpu_rows(read_whole_steps(os.path.join(results, "gpu", "whole_steps.json")))
    column = f"projected GPU-time speedup ({gpu.card}, {gpu.model})"
    lr_only = read_speedups(os.path.join(results, "mini", "speedups.csv"))
    tuned = read_speedups(os.path.join(results, "tune", "speedups.csv"))
    best = {id(group): min(group, key=lambda name: group[name]["loss_mean"]) for group in (lr_only, tuned) if group}
    lines = [f"| optimizer | learning rate only | speedup over AdamW | {column} | tuned | speedup over tuned AdamW | "
             f"{column} |", "| --- | --- | --- | --- | --- | --- | --- |"]
    for name in sorted(lr_only, key=lambda n: lr_only[n]["loss_mean"]):
        cells = [LABELS.get(name, name)]
        for group in (lr_only, tuned):
            row = group.get(name)
            if row is None:
                cells += ["", "", ""]
                continue
            found = [f"{row['loss_mean']:.3f} ± {row['loss_std']:.3f}",
                     speedup_text(row["speedup"], row["low"], row["high"]), projected(gpu, name, row)]
            cells += [f"**{c}**" if c and best[id(group)] == name else c for c in found]
        lines.append("|" + "".join(f" {cell} |" if cell else " |" for cell in cells))
    return "\n".join(lines) + "\n"


TABLES = {"mini": mini_table}


def render(text: str, results: str = RESULTS) -> str:
    """text with every marked region's body replaced by its table (a region naming no table is an error)."""
    def body(match: re.Match) -> str:
        name = match[2]
        if name not in TABLES:
            raise InputError(f"<!-- table:{name} -->: no such table; choose among {', '.join(TABLES)}")
        return match[1] + TABLES[name](results) + match[4]
    return REGION.sub(body, text)


def pages() -> list[str]:
    docs = os.path.join(REPO, "docs")
    return [os.path.join(REPO, "README.md")] + sorted(
        os.path.join(docs, name) for name in os.listdir(docs) if name.endswith(".md"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m experiments.tables", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true",
                        help="rewrite nothing; exit 1 naming each page whose regions differ from the results")
    args = parser.parse_args(argv)
    stale = []
    with exit_on_input_error():
        for page in pages():
            with open(page) as f:
                text = f.read()
            if not REGION.search(text):
                continue
            new = render(text)
            if new == text:
                continue
            stale.append(os.path.relpath(page, REPO))
            if not args.check:
                with open(page, "w") as f:
                    f.write(new)
    verb = "differ from the results (run python -m experiments.tables)" if args.check else "rewritten"
    print(f"{', '.join(stale)}: {verb}" if stale else "every table is up to date")
    return 1 if stale and args.check else 0


if __name__ == "__main__":
    sys.exit(main())
