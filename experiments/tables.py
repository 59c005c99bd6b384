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
  mini_lr  docs/reproducing.md's learning-rate-only table: results/mini/speedups.csv, the Welch tests against AdamW
         and AdamW's own interval from results/mini/report.md, each optimizer's learning rate and the row order
         from results/mini/learning_rates.csv, and the projected GPU time.
  tuned  docs/reproducing.md's tuned table: both speedups.csv files, results/tune/report.md (Welch tests, AdamW's
         own interval), results/tune/tuning.md (runs, seed 1 at half and twice the tuned rate) and
         results/tune/moves.csv (what tuning moved, seed 1 at the tuned point, the row order).
  ladder docs/reproducing.md's batch-size ladder table: results/ladders/ladder.md's tables.
  new_2026 docs/reproducing.md's table of the 2026 optimizers: results/mini_2026/report.md (their learning-rate-only
         runs and the tuned recipes, on the tuned AdamW's ladder), the learning rates from their mini recipes.
  new_2026_llama  docs/reproducing.md's table of the 2026 optimizers on the mini Llama at their GPT-2 mini recipes:
         results/mini_2026_llama/report.md (on the tuned Llama AdamW's ladder) beside results/mini_2026/'s loss.
  llama  docs/reproducing.md's mini Llama table: results/mini_llama/report.md (loss, Welch tests, speedups) beside
         the GPT-2 mini loss at the same recipe (results/tune/speedups.csv where tuned, else results/mini/'s).
  llama_tuned  docs/reproducing.md's table of the recipes tuned on the Llama: results/tune_llama/tuning.md (runs,
         what moved: its start and tuned points) and report.md (tuned seeds, Welch tests, speedups over the tuned
         Llama AdamW's ladder, projected GPU time) beside each GPT-2 recipe's loss on the Llama
         (results/mini_llama/report.md).
  tuned_baselines  docs/reproducing.md's table of the benchmarks' baselines tuned after the first seven:
         results/tune/tuning.md (search runs, core-hours), results/tune/speedups.csv (tuned seeds, speedup over the
         tuned AdamW) and results/tune/report.md (the Welch test against the tuned AdamW).
  compare  docs/reproducing.md's table of the rows experiments.compare made: results/compare/<name>/ (row.md, tuning.md,
         tuning.csv and tuned.json), a variant of a mini recipe beside the recipe's tuned seeds (results/tune/report.md)
         with Welch's test of what its setting changed.
  trend  docs/reproducing.md's table of the speedup's trend: experiments.trend's (each optimizer at the testbed's three
         points, the field's, and GPT-2 small's projection).
  rankings  docs/reproducing.md's table of the learning-rate-only testbed beside the 2025 benchmarks' rankings:
         results/mini/speedups.csv's losses against results/rankings/*.json, Kendall's tau-b as
         experiments.rankings computes it.

Where a table reads a committed report's Markdown table, it reads the report as experiments.report (or
experiments.batch_ladder, experiments.tune) wrote it, rounding the printed digits half up; a Welch difference
is taken from the report's Runs table (the seeds' 4 decimals), not its significance table's rounded one.
results/mini/learning_rates.csv and results/tune/moves.csv were transcribed from the pages' tables (the
learning rates and what tuning moved are in no report's table): edit them, not the pages, and run the command.

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
import functools
import math
import os
import re
import sys
import tarfile
from collections import Counter
from typing import TYPE_CHECKING

from errors import InputError, exit_on_input_error

if TYPE_CHECKING:
    import config
    from experiments.report import Speedup

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
                                     "high": float(row["high"]) if row["high"] else None,
                                     # (the ladder's ends; a file written before they were: 0 and inf)
                                     "lowest": float(row.get("lowest") or 0.0),
                                     "highest": float(row.get("highest") or math.inf)}
            parsed = out[row["optimizer"]]  # (a speedup's inf and 0 are bounds past the ladder; a NaN is damage)
            if not math.isfinite(parsed["loss_mean"] + parsed["loss_std"]) or any(
                    x is not None and math.isnan(x) for x in (parsed["speedup"], parsed["low"], parsed["high"])):
                raise ValueError("a NaN, or a loss that is not finite")
        except (KeyError, TypeError, ValueError) as e:
            raise InputError(f"{path}, line {number}: not a speedups.csv row ({e}); fix the row") from None
    return out


def as_speedup(row: dict) -> Speedup:
    """A speedups.csv row as experiments.report's Speedup, its interval's bounds and the ladder's ends with it."""
    from experiments.report import Speedup

    return Speedup(row["speedup"], row["low"], row["high"], row["lowest"], row["highest"])


def speedup_text(speedup: Speedup) -> str:
    """A speedup with its interval to 2 decimals, a bound past AdamW's ladder as report.md writes it ("> 4");
    AdamW's own row, without an interval, as it is."""
    if speedup.low is None or speedup.high is None:
        return f"{speedup.value:g}x"
    value, low, high = (speedup.bound(x, ".2f") for x in (speedup.value, speedup.low, speedup.high))
    return f"{value}x ({low} to {high})"


def projected(gpu, optimizer: str, row: dict) -> str:
    """The GPU time the speedup projects on gpu's rows ('' where the optimizer has no measured row)."""
    from experiments.report import projected_gpu_speedup

    if optimizer not in gpu.rows:
        return ""
    if row["low"] is None:
        return speedup_text(as_speedup(row))
    return speedup_text(projected_gpu_speedup(as_speedup(row), gpu.rows[REFERENCE]["whole_step_ms"],
                                              gpu.rows[optimizer]["whole_step_ms"]))


def mini_table(results: str = RESULTS) -> str:
    """The README's mini table: a row for every mini recipe of the registry. Those of the learning-rate-only runs
    first, best loss first, beside their tuned rows where the tuning ran them; then those added after those runs
    (the 2026 optimizers: their learning-rate-only rows are docs/reproducing.md's, against the tuned AdamW), tuned
    loss first, their tuned cells alone; the best of each group in bold."""
    from config.cells import mini_recipes
    from experiments.report import gpu_rows, read_whole_steps

    gpu = gpu_rows(read_whole_steps(os.path.join(results, "gpu", "whole_steps.json")))
    column = f"projected GPU-time speedup ({gpu.card}, {gpu.model})"
    lr_only = read_speedups(os.path.join(results, "mini", "speedups.csv"))
    tuned = read_speedups(os.path.join(results, "tune", "speedups.csv"))
    started = begun(results)
    best = {id(group): min(group, key=lambda name: group[name]["loss_mean"]) for group in (lr_only, tuned) if group}
    lines = [f"| optimizer | learning rate only | speedup over AdamW | {column} | tuned | speedup over tuned AdamW | "
             f"{column} |", "| --- | --- | --- | --- | --- | --- | --- |"]
    later = {recipe_display_name(r) for r in mini_recipes()} - set(lr_only)
    for name in [*sorted(lr_only, key=lambda n: lr_only[n]["loss_mean"]),
                 *sorted(later, key=lambda n: (tuned[n]["loss_mean"] if n in tuned else math.inf, n))]:
        cells = [LABELS.get(name, name)]
        for group in (lr_only, tuned):
            row = group.get(name)
            if row is None and group is lr_only:
                cells += ["(added after these runs)", "", ""]
                continue
            if row is None:  # (a search stopped short says so: it resumes)
                state = f"search under way ({runs_text(started[name])})" if name in started else "not yet tuned"
                cells += [state, "", ""]
                continue
            found = [f"{row['loss_mean']:.3f} ± {row['loss_std']:.3f}",
                     speedup_text(as_speedup(row)), projected(gpu, name, row)]
            cells += [f"**{c}**" if c and best[id(group)] == name else c for c in found]
        lines.append("|" + "".join(f" {cell} |" if cell else " |" for cell in cells))
    return "\n".join(lines) + "\n"


# -----------------------------------------------------------------------------
# docs/reproducing.md's tables: the committed reports' Markdown tables, read back


def rounded(text: str, places: int) -> str:
    """A number as a report printed it, to places decimals, rounded half up from its printed digits (so 1.7315
    is 1.732, not the 1.731 of its nearest binary float)."""
    from decimal import ROUND_HALF_UP, Decimal

    return str(Decimal(text).quantize(Decimal(1).scaleb(-places), rounding=ROUND_HALF_UP))


def significant(text: str, digits: int = 2) -> str:
    """A printed number to digits significant digits, rounded half up, trailing zeros kept (0.598 -> 0.60,
    0.00672 -> 0.0067)."""
    from decimal import ROUND_HALF_UP, Decimal

    number = Decimal(text)
    return format(number.quantize(Decimal(1).scaleb(number.adjusted() - digits + 1), rounding=ROUND_HALF_UP), "f")


def p_decimals(p: str) -> str:
    """A printed p-value as the learning-rate-only and tuned tables give it: '< 0.001', 3 decimals below 0.01,
    else 2."""
    return "p < 0.001" if float(p) < 0.001 else f"p = {rounded(p, 3 if float(p) < 0.01 else 2)}"


def p_significant(p: str) -> str:
    """A printed p-value as the mini Llama table gives it: '< 0.001', else 2 significant digits."""
    return "p < 0.001" if float(p) < 0.001 else f"p = {significant(p)}"


def committed_result(path: str) -> str:
    """A committed report's text (a named error where it is missing)."""
    try:
        with open(path) as f:
            return f.read()
    except OSError as e:
        raise InputError(f"cannot read {path} ({e.strerror}); it is a committed result: restore it") from e


def markdown_tables(path: str) -> list[list[dict]]:
    """Every Markdown table of a committed report: its rows as dicts by header (a header cell repeated keeps
    its column's position as its key's suffix)."""
    lines = committed_result(path).splitlines()
    tables, current = [], None
    for line in lines:
        if not line.startswith("|"):
            current = None
            continue
        cells = [c.strip() for c in line.strip()[1:-1].split("|")]
        if current is None:
            current = {"header": [c if cells.index(c) == i else f"{c}#{i}" for i, c in enumerate(cells)],
                       "rows": []}
            tables.append(current)
        elif set(line) <= set("|- "):
            continue
        else:
            current["rows"].append(dict(zip(current["header"], cells)))
    return [t["rows"] for t in tables]


def report_table(path: str, first_column: str) -> list[dict]:
    """The rows of the first table of a report whose header starts with first_column."""
    for rows in markdown_tables(path):
        if rows and next(iter(rows[0])) == first_column:
            return rows
    raise InputError(f"{path}: no table headed '{first_column}'; rerun the report that wrote it")


def seed_losses(path: str, tokens: str = "1.05M") -> dict[str, list[float]]:
    """optimizer -> its seeds' best validation losses at tokens, from a report's Runs table."""
    out: dict[str, list[float]] = {}
    for row in report_table(path, "run"):
        if row["tokens"] == tokens:
            out.setdefault(row["optimizer"], []).append(float(row["best val loss"]))
    return out


def mean_losses(path: str, tokens: str = "1.05M") -> dict[str, str]:
    """optimizer -> its cell at tokens of a report's loss table (mean ± std over seeds), as printed."""
    rows = report_table(path, "")
    column = next(c for c in rows[0] if tokens in c)
    return {r[""]: r[column].split(" (n=")[0].strip("*") for r in rows}


def welch_against(path: str, reference: str) -> dict[str, tuple[float, str]]:
    """optimizer -> (its mean best validation loss minus the reference's; p) at 1.05M tokens: the p from a
    report's significance table, the difference from its Runs table's seeds (the significance table's 4
    decimals would round twice: -0.0025 is +0.002 from the seeds)."""
    import statistics

    seeds = seed_losses(path)
    out = {}
    for row in report_table(path, "setting"):
        if reference not in (row["A"], row["B"]) or "1.05M tokens" not in row["setting"]:
            continue
        other = row["B"] if row["A"] == reference else row["A"]
        out.setdefault(other, (statistics.mean(seeds[other]) - statistics.mean(seeds[reference]), row["p"]))
    return out


def welch_text(cell: tuple[float, str], p_format) -> str:
    difference, p = cell
    return f"{difference:+.3f}, {p_format(p)}"


def interval_text(text: str) -> str:
    """A report's speedup cell ('0.958x (0.881 to 1.04)', '0.285x (< 0.25 to 0.319)') to 2 decimals."""
    match = re.fullmatch(r"([\d.]+)x \(((?:[<>] )?)([\d.]+) to ((?:[<>] )?)([\d.]+)\)", text)
    if match is None:
        raise InputError(f"'{text}': not a speedup cell of experiments.report")
    return (f"{float(match[1]):.2f}x ({match[2]}{float(match[3]):.2f} to {match[4]}{float(match[5]):.2f})")


def own_interval(path: str, reference: str = REFERENCE) -> str:
    """The reference's speedup over its own curve (the curve's error), from a report's speedup section."""
    for row in report_table(path, "optimizer"):
        if row["optimizer"] == reference and "speedup (95% interval)" in row:
            return interval_text(row["speedup (95% interval)"]).replace("1.00x", "1x", 1)
    raise InputError(f"{path}: no {reference} row in its speedup table")


def read_csv(path: str) -> list[dict]:
    try:
        with open(path, newline="") as f:
            return list(csv.DictReader(f))
    except OSError as e:
        raise InputError(f"cannot read {path} ({e.strerror}); it is a committed input: restore it") from e


def loss_text(row: dict) -> str:
    return f"{row['loss_mean']:.3f} ± {row['loss_std']:.3f}"


def runs_cell(runs: str) -> str:
    """A tuning.md runs cell as the tables give it ("29 (capped)" -> "29, capped")."""
    return runs.replace(" (capped)", ", capped")


def bold(text: str, yes: bool) -> str:
    return f"**{text}**" if yes and text else text


def gpu_column(results: str):
    from experiments.report import gpu_rows, read_whole_steps

    gpu = gpu_rows(read_whole_steps(os.path.join(results, "gpu", "whole_steps.json")))
    return gpu, f"projected GPU-time speedup ({gpu.card}, {gpu.model})"


def lr_only_table(results: str = RESULTS) -> str:
    """docs/reproducing.md's learning-rate-only table: results/mini/speedups.csv's losses and speedups, each
    optimizer's learning rate and row order from results/mini/learning_rates.csv, the Welch test against AdamW
    from results/mini/report.md's significance table, AdamW's own interval from its speedup table, and the
    projected GPU time; the best of each column in bold."""
    gpu, column = gpu_column(results)
    report = os.path.join(results, "mini", "report.md")
    speedups = read_speedups(os.path.join(results, "mini", "speedups.csv"))
    welch = welch_against(report, REFERENCE)
    rates = read_csv(os.path.join(results, "mini", "learning_rates.csv"))
    best = min((r["optimizer"] for r in rates), key=lambda n: speedups[n]["loss_mean"])
    lines = [f"| 0.49M GPT, 1.05M byte tokens | best val loss | learning rate | vs AdamW (Welch, p) | "
             f"speedup over AdamW (95% interval) | {column} |", "| --- | --- | --- | --- | --- | --- |"]
    for rate in rates:
        name = rate["optimizer"]
        row = speedups[name]
        if name == REFERENCE:
            speedup = gpu_speedup = own_interval(report)
            test = ""
        else:
            speedup, gpu_speedup = speedup_text(as_speedup(row)), projected(gpu, name, row)
            test = welch_text(welch[name], p_decimals)
        cells = [LABELS.get(name, name), bold(loss_text(row), name == best), rate["learning_rate"], test,
                 bold(speedup, name == best), bold(gpu_speedup, name == best)]
        lines.append("|" + "".join(f" {cell} |" if cell else " |" for cell in cells))
    return "\n".join(lines) + "\n"


def mini_recipe_config(recipe: str) -> config.TrainConfig:
    """A mini recipe's resolved config: config/mini.py and its files, read from this checkout."""
    from config.cells import mini_recipes
    from optim import load_config

    code = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # (this checkout, wherever the pages are)
    args = ["config/mini.py", *mini_recipes()[recipe].args.split()]
    return load_config([os.path.join(code, a) if a.endswith(".py") else a for a in args])


def recipe_display_name(recipe: str) -> str:
    """A mini recipe's display name (the registry's, as the reports name its runs)."""
    return mini_recipe_config(recipe).hyperparameters.display_name()


def searches(results: str = RESULTS) -> dict[str, dict]:
    """results/tune/tuning.md's summary rows by display name: every recipe whose search has finished."""
    table = report_table(os.path.join(results, "tune", "tuning.md"), "recipe")
    return {recipe_display_name(r["recipe"]): r for r in table}


def runs_text(count: int) -> str:
    return f"{count} run" + "s" * (count != 1)


@functools.lru_cache
def begun(results: str = RESULTS) -> dict[str, int]:
    """Display name -> finished runs, for each recipe whose search has finished (tuning.md's runs column) or has
    begun since (tuning.md holds finished searches alone: its runs in results/tune/runs.tar.xz, every seed's)."""
    from config.cells import mini_recipes

    runs = {name: int(row["runs"].split()[0]) for name, row in searches(results).items()}
    archive = os.path.join(results, "tune", "runs.tar.xz")
    if os.path.exists(archive):
        with tarfile.open(archive) as tar:  # (paths mini_tune/<recipe>/<point>/seed<N>/metrics.jsonl)
            counts = Counter(name.split("/")[1] for name in tar.getnames() if name.endswith("/metrics.jsonl"))
        for recipe in sorted(counts.keys() & mini_recipes().keys()):
            runs.setdefault(recipe_display_name(recipe), counts[recipe])
    return runs


def tuned_table(results: str = RESULTS) -> str:
    """docs/reproducing.md's tuned table: each tuned recipe's learning-rate-only row (results/mini/speedups.csv)
    beside its tuning (runs and seed 1 at half and twice the tuned rate from results/tune/tuning.md, what it
    moved and seed 1 at the tuned point from results/tune/moves.csv, which also orders the rows), its tuned
    seeds and speedup (results/tune/speedups.csv, the Welch test and AdamW's own interval from
    results/tune/report.md) and the GPU time each speedup projects; the best tuned columns in bold."""
    gpu, column = gpu_column(results)
    report = os.path.join(results, "tune", "report.md")
    lr_only = read_speedups(os.path.join(results, "mini", "speedups.csv"))
    tuned = read_speedups(os.path.join(results, "tune", "speedups.csv"))
    welch = welch_against(report, REFERENCE)
    tuning = searches(results)
    moves = read_csv(os.path.join(results, "tune", "moves.csv"))
    best = min(tuned, key=lambda n: tuned[n]["loss_mean"])
    lines = [f"| optimizer | learning rate only | speedup over AdamW | {column} | runs | what tuning moved | "
             f"tuned, seeds 1-4 | seed 1: tuned / 0.5x / 2x lr | vs tuned AdamW | speedup over tuned AdamW | "
             f"{column} |", "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for move in moves:
        name = move["optimizer"]
        before, after, search = lr_only[name], tuned[name], tuning[name]
        seed1 = " / ".join([move["seed1_tuned"], rounded(search["0.5x lr"], 3), rounded(search["2x lr"], 3)])
        if name == REFERENCE:
            test, speedup = "", own_interval(report)
            gpu_speedup = speedup
        else:
            test = welch_text(welch[name], p_decimals)
            speedup = speedup_text(as_speedup(after))
            gpu_speedup = projected(gpu, name, after)
        cells = [name, loss_text(before), speedup_text(as_speedup(before)),
                 projected(gpu, name, before), runs_cell(search["runs"]), move["moved"],
                 bold(loss_text(after), name == best), seed1, test, bold(speedup, name == best),
                 bold(gpu_speedup, name == best)]
        lines.append("|" + "".join(f" {cell} |" if cell else " |" for cell in cells))
    return "\n".join(lines) + "\n"


LADDER_NAMES = {"adamw": "AdamW", "mars_approx": "MARS-approx", "mars_exact": "MARS-exact", "muon": "Muon"}
LADDER_TOKENS = 4 * 1024 ** 2  # each ladder run's tokens (config/ladder.py): 4.19M


def minus(text: str) -> str:
    return text.replace("-", "\u2212")


def learning_rate_text(value: str) -> str:
    """0.008 -> 8e-3, 0.024 -> 2.4e-2, as the pages write a learning rate."""
    mantissa, exponent = f"{float(value):e}".split("e")
    return f"{float(mantissa):g}e-{abs(int(exponent))}"


def ladder_table(results: str = RESULTS) -> str:
    """docs/reproducing.md's batch-size ladder table, from results/ladders/ladder.md's tables: each optimizer's
    loss and tuned rate per size (the best in bold), MARS-exact at AdamW's passes, the Welch tests of MARS
    against AdamW, the MARS variants' cos(g_t, g_prev) and AdamW's fraction of clipped steps."""
    path = os.path.join(results, "ladders", "ladder.md")
    losses = report_table(path, "optimizer")
    sizes = list(dict.fromkeys(r["tokens per step"] for r in losses))
    names = list(dict.fromkeys(r["optimizer"] for r in losses))
    cell = {(r["optimizer"], r["tokens per step"]): r for r in losses}
    best = {size: min(names, key=lambda n: float(cell[n, size]["best val loss"].split(" ± ")[0])) for size in sizes}
    header = []
    for i, size in enumerate(sizes):
        steps = LADDER_TOKENS // (int(size.rstrip("K")) * 1024)
        header.append(f"{size} tokens/step ({steps:,} steps)" if i == 0 else f"{size} ({steps:,} steps)")
    lines = ["| best val loss (nats/byte), tuned lr | " + " | ".join(header) + " |",
             "| --- |" + " --- |" * len(sizes)]

    def line(label: str, cells: list[str]) -> None:
        lines.append(f"| {label} | " + " | ".join(cells) + " |")

    for name in names:
        texts = []
        for size in sizes:
            mean, std = cell[name, size]["best val loss"].split(" ± ")
            loss = bold(f"{rounded(mean, 3)} ± {rounded(std, 3)}", best[size] == name)
            texts.append(f"{loss}, {learning_rate_text(cell[name, size]['tuned lr'])}")
        line(LADDER_NAMES.get(name, name), texts)
        if any(cell[name, size]["at equal passes"] for size in sizes):
            line(f"{LADDER_NAMES.get(name, name)} at AdamW's passes",
                 [rounded(cell[name, size]["at equal passes"], 3) for size in sizes])
    tests = {(r["MARS"], r["tokens per step"]): r for r in report_table(path, "tokens per step")}
    for mars in [n for n in names if n.startswith("mars")]:
        line(f"{LADDER_NAMES[mars]} − AdamW (Welch p)",
             [minus(f"{tests[mars, size]['mean difference'][0]}{rounded(tests[mars, size]['mean difference'][1:], 3)}"
                    f" ({significant(tests[mars, size]['p'])})") for size in sizes])
    diagnostics = {(r["optimizer"], r["tokens per step"]): r
                   for rows in markdown_tables(path) if rows and "cos(g_t, g_prev)" in rows[0] for r in rows}
    marses = [n for n in names if n.startswith("mars")]
    line("cos(g_t, g_prev): " + ", ".join(LADDER_NAMES[n] for n in marses),
         [", ".join(minus(rounded(diagnostics[n, size]["cos(g_t, g_prev)"], 2)) for n in marses) for size in sizes])
    line(f"steps with the gradient norm clipped: {REFERENCE}",
         [rounded(diagnostics["adamw", size]["steps with the gradient norm clipped"], 2) for size in sizes])
    return "\n".join(lines) + "\n"


# The recipes that were tuned when the mini Llama ran (2026-11-27): the others ran their learning-rate-only recipes,
# and are compared at those, whatever has been tuned since.
LLAMA_RAN_TUNED = ("AdamW", "Muon", "MARS-exact", "MARS-approx", "MARS-M-approx", "Moonlight", "SOAP")


def llama_table(results: str = RESULTS) -> str:
    """docs/reproducing.md's mini Llama table: each optimizer's loss on the Llama (results/mini_llama/report.md:
    its loss table, its Welch tests against the Llama's AdamW and its speedups over it), best first, beside its
    GPT-2 mini loss at the same recipe (results/tune/speedups.csv where it was tuned when the Llama ran,
    results/mini/speedups.csv where only its learning rate had been swept)."""
    path = os.path.join(results, "mini_llama", "report.md")
    lr_only = read_speedups(os.path.join(results, "mini", "speedups.csv"))
    tuned = read_speedups(os.path.join(results, "tune", "speedups.csv"))
    welch = welch_against(path, REFERENCE)
    speedups = [r for r in report_table(path, "optimizer") if "speedup (95% interval)" in r]
    llama = {r["optimizer"]: r for r in speedups}
    loss = mean_losses(path)
    order = sorted(llama, key=lambda n: float(llama[n]["best val loss"]))
    lines = ["| optimizer | mini recipe | GPT-2 mini | Llama mini | vs the Llama's AdamW (Welch, p) | "
             "speedup over the Llama's AdamW (95% interval) |", "| --- | --- | --- | --- | --- | --- |"]
    for name in order:
        ran_tuned = name in LLAMA_RAN_TUNED
        gpt2 = tuned[name] if ran_tuned else lr_only[name]
        test = "" if name == REFERENCE else welch_text(welch[name], p_significant)
        lines.append(f"| {LABELS.get(name, name)} | {'tuned' if ran_tuned else 'learning rate'} | "
                     f"{loss_text(gpt2)} | {loss[name]} | {test} | {interval_text(llama[name]['speedup (95% interval)'])} |")
    return "\n".join(lines) + "\n"


# How the tuned Llama table names a moved key (its value printed as the pages print it).
MOVED_KEYS = {"learning_rate": "lr", "weight_decay": "decay", "warmup_iters": "warmup", "muon_momentum": "momentum"}


def tuning_moves(path: str) -> dict[str, str]:
    """recipe -> what its search moved ('lr 5.66e-2 → 4e-2, decay 1e-3 → 0'; 'nothing'), from a tuning.md's
    per-recipe 'start:' and 'tuned:' lines (experiments.tune writes both)."""
    text = committed_result(path)

    def point(line: str) -> dict[str, str]:
        return dict(pair.split("=") for pair in line.split(": ", 1)[1].split(", "))

    def value(key: str, text: str) -> str:  # a rate as the pages write one: 3 digits, 5.66e-2
        rate = key in ("learning_rate", "weight_decay") and 0 < float(text) < 1
        return learning_rate_text(significant(text, 3)) if rate else text

    out = {}
    for recipe, start, tuned in re.findall(r"^## (\w+)\n\n(start: .*)\n(tuned: .*)$", text, flags=re.M):
        before, after = point(start), point(tuned)
        moved = [f"{MOVED_KEYS.get(key, key)} {value(key, before[key])} → {value(key, after[key])}"
                 for key in before if after[key] != before[key]]
        out[recipe] = ", ".join(moved) or "nothing"
    return out


def llama_tuned_table(results: str = RESULTS) -> str:
    """docs/reproducing.md's tuned mini Llama table: each recipe tuned on the Llama, best first, its GPT-2 recipe
    carried over (results/mini_llama/report.md's loss) beside its tuning (results/tune_llama/tuning.md: runs,
    what moved, seed 1 at half and twice the tuned rate) and its tuned seeds, Welch test against the Llama's
    tuned AdamW, speedup over that AdamW's own ladder and the GPU time it projects (results/tune_llama/report.md,
    its projection on the Llama's own GPU rows)."""
    carried = mean_losses(os.path.join(results, "mini_llama", "report.md"))
    path = os.path.join(results, "tune_llama", "report.md")
    welch = welch_against(path, REFERENCE)
    speedups = {r["optimizer"]: r for r in report_table(path, "optimizer") if "speedup (95% interval)" in r}
    gpu_column = next(c for c in speedups[REFERENCE] if c.startswith("projected GPU-time speedup"))
    loss = mean_losses(path)
    tuning_md = os.path.join(results, "tune_llama", "tuning.md")
    moves = {recipe_display_name(recipe): moved for recipe, moved in tuning_moves(tuning_md).items()}
    summary = {recipe_display_name(r["recipe"]): r for r in report_table(tuning_md, "recipe")}
    lines = ["| optimizer | GPT-2 recipe on the Llama | runs | what tuning on the Llama moved | tuned, seeds 1-4 | "
             "seed 1: 0.5x / 2x lr | vs the Llama's tuned AdamW (Welch, p) | speedup over the Llama's tuned AdamW "
             f"(95% interval) | {gpu_column} |", "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for name in sorted(summary, key=lambda n: float(speedups[n]["best val loss"])):
        search, row = summary[name], speedups[name]
        if name == REFERENCE:
            test, speedup = "", own_interval(path)
            gpu_speedup = speedup
        else:
            test = welch_text(welch[name], p_significant)
            speedup = interval_text(row["speedup (95% interval)"])
            gpu_speedup = interval_text(row[gpu_column]) if row[gpu_column] else ""  # (no GPU row measured)
        cells = [name, carried[name], runs_cell(search["runs"]), moves[name],
                 loss[name], f"{rounded(search['0.5x lr'], 3)} / {rounded(search['2x lr'], 3)}", test, speedup,
                 gpu_speedup]
        lines.append("|" + "".join(f" {cell} |" if cell else " |" for cell in cells))
    return "\n".join(lines) + "\n"


# The optimizers of 2026 by display name: their registry names (their mini recipes hold the swept learning rates).
NEW_2026 = {"NorMuon": "normuon", "AdaMuon": "adamuon", "MuonClip": "muonclip", "Dion": "dion", "Shampoo": "shampoo",
            "AdamH": "adamh", "MuonH": "muonh"}


def added_since(results: str = RESULTS) -> set[str]:
    """Display names of the mini recipes added after the 2026 optimizers' learning-rate-only runs: neither those
    (results/mini_2026/report.md) nor the first ones (results/mini/speedups.csv) ran them, so only the protocol's
    row is theirs."""
    from config.cells import mini_recipes

    ran = set(read_speedups(os.path.join(results, "mini", "speedups.csv")))
    ran |= {r["optimizer"] for r in report_table(os.path.join(results, "mini_2026", "report.md"), "optimizer")}
    return {recipe_display_name(r) for r in mini_recipes()} - ran


def new_2026_table(results: str = RESULTS) -> str:
    """docs/reproducing.md's table of the 2026 optimizers: their learning-rate-only runs (seeds 1-3 at the rate the
    sweep chose, config/mini_<name>.py; MuonClip at Moonlight's tuned recipe) beside the tuned recipes, from results/mini_2026/report.md (experiments.report
    over both: its loss table, Welch tests against the tuned AdamW and speedups over the tuned AdamW's ladder), best
    first; the tuned AdamW and Muon for scale; and each one's row tuned by the protocol as it finishes
    (results/tune/speedups.csv), the optimizers added since (added_since) after them, that row alone."""
    path = os.path.join(results, "mini_2026", "report.md")
    welch = welch_against(path, REFERENCE)
    speedups = {r["optimizer"]: r for r in report_table(path, "optimizer") if "speedup (95% interval)" in r}
    loss = mean_losses(path)
    shown = [n for n in speedups if n in NEW_2026 or n in (REFERENCE, "Muon")]
    tuned = read_speedups(os.path.join(results, "tune", "speedups.csv"))  # (each as its tuning finishes)
    tuned_welch = welch_against(os.path.join(results, "tune", "report.md"), REFERENCE)
    started = begun(results)

    def protocol_row(name: str, state: str) -> str:  # (its loss, Welch test and speedup, or how far it has got)
        if name not in tuned:
            return f"{state} |  | "
        return (f"{loss_text(tuned[name])} | {welch_text(tuned_welch[name], p_decimals)} | "
                f"{speedup_text(as_speedup(tuned[name]))}")

    lines = ["| optimizer | mini recipe | learning rate | best val loss | vs the tuned AdamW (Welch, p) | "
             "speedup over the tuned AdamW (95% interval) | tuned by the protocol, seeds 1-4 | its Welch test | "
             "its speedup |", "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for name in sorted(shown, key=lambda n: float(speedups[n]["best val loss"])):
        recipe = NEW_2026.get(name)
        rate = learning_rate_text(f"{mini_recipe_config(recipe).learning_rate:g}") if recipe else ""
        test = "" if name == REFERENCE else welch_text(welch[name], p_decimals)
        how = "Moonlight's tuned" if recipe == "muonclip" else "learning rate" if recipe else "tuned"
        state = f"under way ({runs_text(started[name])})" if name in started else "not yet"
        protocol = protocol_row(name, state) if recipe else " |  | "
        lines.append(f"| {LABELS.get(name, name)} | {how} | {rate} | {loss[name]} | "
                     f"{test} | {interval_text(speedups[name]['speedup (95% interval)'])} | {protocol} |")
    added = added_since(results) & started.keys()  # (after the seven, best tuned first, then those under way)
    for name in sorted(added, key=lambda n: (n not in tuned, tuned[n]["loss_mean"] if n in tuned else 0.0)):
        state = f"under way ({runs_text(started[name])})"
        lines.append(f"| {name} | added: tuned only |  |  |  |  | {protocol_row(name, state)} |")
    return "\n".join(lines) + "\n"


def new_2026_llama_table(results: str = RESULTS) -> str:
    """docs/reproducing.md's table of the 2026 optimizers on the mini Llama: each at its GPT-2 mini recipe (as the
    mini Llama table carries every recipe over), from results/mini_2026_llama/report.md (experiments.report over
    their runs and the Llama's tuning: its loss table, Welch tests against the tuned Llama AdamW and speedups over
    its ladder), best first, beside its GPT-2 mini loss (results/mini_2026/report.md); the tuned Llama AdamW and
    Muon for scale."""
    path = os.path.join(results, "mini_2026_llama", "report.md")
    welch = welch_against(path, REFERENCE)
    speedups = {r["optimizer"]: r for r in report_table(path, "optimizer") if "speedup (95% interval)" in r}
    loss, gpt2 = mean_losses(path), mean_losses(os.path.join(results, "mini_2026", "report.md"))
    shown = [n for n in speedups if n in NEW_2026 or n in (REFERENCE, "Muon")]
    lines = ["| optimizer | mini recipe | GPT-2 mini | Llama mini | vs the tuned Llama AdamW (Welch, p) | "
             "speedup over the tuned Llama AdamW (95% interval) |", "| --- | --- | --- | --- | --- | --- |"]
    for name in sorted(shown, key=lambda n: float(speedups[n]["best val loss"])):
        recipe = NEW_2026.get(name)
        how = "Moonlight's tuned" if recipe == "muonclip" else "learning rate" if recipe else "tuned on the Llama"
        test = "" if name == REFERENCE else welch_text(welch[name], p_significant)
        lines.append(f"| {LABELS.get(name, name)} | {how} | {gpt2[name] if recipe else ''} | {loss[name]} | {test} | "
                     f"{interval_text(speedups[name]['speedup (95% interval)'])} |")
    return "\n".join(lines) + "\n"


# The recipes of the first tuning (the headline's seven, which were also the ones tuned when the mini Llama ran): the
# searches tuning.md holds besides them are the 2025 benchmarks' baselines, tuned after them (issue 64).
FIRST_TUNED = LLAMA_RAN_TUNED


def tuned_baselines_table(results: str = RESULTS) -> str:
    """docs/reproducing.md's table of the benchmarks' baselines tuned as AdamW was: every search of
    results/tune/tuning.md but the first seven and the 2026 optimizers', best tuned loss first, with its runs and core-hours (tuning.md),
    its tuned seeds and speedup over the tuned AdamW (results/tune/speedups.csv) and its Welch test against the
    tuned AdamW (results/tune/report.md: its p, and whether the optimizer is ahead or behind)."""
    tuned = read_speedups(os.path.join(results, "tune", "speedups.csv"))
    welch = welch_against(os.path.join(results, "tune", "report.md"), REFERENCE)
    elsewhere = {*FIRST_TUNED, *NEW_2026, *added_since(results)}  # (the 2026 ones and the added: new_2026's table)
    baselines = {name: row for name, row in searches(results).items() if name not in elsewhere}
    lines = ["| optimizer | search runs | tuned, seeds 1-4 | over the tuned AdamW | Welch p | core-hours |",
             "| --- | --- | --- | --- | --- | --- |"]
    for name in sorted(baselines, key=lambda n: tuned[n]["loss_mean"]):
        row, (difference, p) = tuned[name], welch[name]
        test = p_decimals(p).removeprefix("p = ").removeprefix("p ") + (", ahead" if difference < 0 else ", behind")
        lines.append(f"| {name} | {runs_cell(baselines[name]['runs'])} | {loss_text(row)} | "
                     f"{speedup_text(as_speedup(row))} | {test} | "
                     f"{baselines[name]['core-hours']} |")
    return "\n".join(lines) + "\n"


def tuned_seeds(folder: str, recipe: str) -> list[float]:
    """The best validation losses of a search's tuned point at its seeds, from the folder's tuned.json (the point)
    and tuning.csv (every run: its point's values, its seed, its loss)."""
    import json

    try:
        with open(os.path.join(folder, "tuned.json")) as f:
            point = json.load(f)[recipe]
    except (OSError, KeyError, ValueError) as e:
        raise InputError(f"{folder}/tuned.json holds no tuned point of {recipe} ({e}); rerun experiments.tune "
                         "--report-only over its runs") from None
    runs = read_csv(os.path.join(folder, "tuning.csv"))
    try:
        losses = [float(r["best_val_loss"]) for r in runs
                  if r["recipe"] == recipe and dict(v.split("=", 1) for v in r["values"].split(",")) == point]
    except (KeyError, ValueError, TypeError, AttributeError) as e:  # (a cut row's cells read as None)
        raise InputError(f"{folder}/tuning.csv: not experiments.tune's tuning.csv ({e}); rerun experiments.tune "
                         "--report-only over its runs") from None
    if not all(map(math.isfinite, losses)):  # (the tuner never records one: the file was damaged)
        raise InputError(f"{folder}/tuning.csv: {recipe}'s tuned point has a loss that is not finite; rerun "
                         "experiments.tune --report-only over its runs")
    if len(losses) < 4:  # (seeds 1-4: a row of fewer is a protocol stopped short)
        raise InputError(f"{folder}/tuning.csv: {recipe}'s tuned point has {len(losses)} seed(s), not 4; rerun "
                         "its experiments.compare command to finish the protocol")
    return losses


def compare_table(results: str = RESULTS) -> str:
    """docs/reproducing.md's table of the rows experiments.compare made (results/compare/<name>/, one folder per
    row): each row's tuned seeds, its speedup over the tuned AdamW and Welch's p against it (its row.md), its search
    runs (its tuning.md); for a variant of a mini recipe (<recipe>+<setting>...), the recipe's own tuned seeds
    (results/tune/report.md) and what the setting changed: the difference of the means and Welch's p."""
    import statistics

    from config.cells import mini_recipes
    from experiments.report import welch

    base_seeds = seed_losses(os.path.join(results, "tune", "report.md"))
    lines = ["| row (results/compare/) | tuned by the protocol, seeds 1-4 | speedup over the tuned AdamW | Welch p "
             "against it | search runs | its recipe without the setting, tuned | the setting's effect (Welch, p) |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    folder = os.path.join(results, "compare")
    if not os.path.isdir(folder):
        raise InputError(f"{folder} is missing; it is a committed result: restore it")
    rows = []
    for name in sorted(os.listdir(folder)):
        here = os.path.join(folder, name)
        if not os.path.isdir(here) or name.endswith("_llama"):  # (a mini Llama row has its own testbed's AdamW)
            continue
        seeds = tuned_seeds(here, name)
        row = report_table(os.path.join(here, "row.md"), "optimizer")[0]
        search = next((r for r in report_table(os.path.join(here, "tuning.md"), "recipe") if r["recipe"] == name),
                      None)
        if search is None:
            raise InputError(f"{here}/tuning.md has no row of {name}; rerun its experiments.compare command")
        recipe = name.split("+")[0]
        without = effect = ""
        if "+" in name and recipe in mini_recipes():
            theirs = base_seeds.get(recipe_display_name(recipe))
            if theirs is None:
                raise InputError(f"results/tune/report.md has no tuned {recipe} to test {name} against; tune it "
                                 "(scripts/tune_mini.sh) first")
            difference, _, p = welch(seeds, theirs)
            without = loss_text({"loss_mean": statistics.mean(theirs), "loss_std": statistics.stdev(theirs)})
            effect = f"{difference:+.3f}, {p_decimals(repr(p))}"
        against_adamw = p_decimals(row["Welch's p against AdamW"].removeprefix("p = "))
        mine = {"loss_mean": statistics.mean(seeds), "loss_std": statistics.stdev(seeds)}
        rows.append((mine["loss_mean"], f"| `{name}` | {loss_text(mine)} | "
                     f"{interval_text(row['speedup over tuned AdamW'])} | {against_adamw} | "
                     f"{runs_cell(search['runs'])} | {without} | {effect} |"))
    return "\n".join(lines + [line for _, line in sorted(rows)]) + "\n"


def tau_text(tau: float, p: float) -> str:
    return f"{tau:.2f} (p < 0.001)" if p < 0.001 else f"{tau:.2f} ({p_significant(f'{p:.3g}')})"


def rankings_table(results: str = RESULTS) -> str:
    """docs/reproducing.md's table of the learning-rate-only testbed beside the published rankings: every
    optimizer of results/mini/speedups.csv at its mean best loss to the table's 3 decimals (as the page's
    `python -m experiments.rankings` command gives them), against each ranking of results/rankings/ (our reading
    of a tiered one; its other readings are in the reports) holding enough of them: experiments.rankings'
    agreement, its order and Kendall's tau-b."""
    from experiments import rankings

    speedups = read_speedups(os.path.join(results, "mini", "speedups.csv"))
    ours = {name: round(row["loss_mean"], 3) for name, row in speedups.items()}
    lines = ["| benchmark | their order, best first | here | Kendall's tau (p) |", "| --- | --- | --- | --- |"]
    for benchmark, record in rankings.read_published(os.path.join(results, "rankings")).items():
        theirs = record["ranking"]
        found = rankings.agreement(ours, theirs)
        if found is None:
            continue
        common, tau, p = found
        tiers = [[n for n in common if theirs[n] == value] for value in sorted({theirs[n] for n in common})]
        lines.append(f"| {benchmark.split(' (')[0]} | {' > '.join(', '.join(tier) for tier in tiers)} | "
                     f"{' > '.join(sorted(common, key=ours.get))} | {tau_text(tau, p)} |")
    return "\n".join(lines) + "\n"


def trend_table(results: str = RESULTS) -> str:
    """docs/reproducing.md's trend table: experiments.trend's, from results/'s speedups.csv at the three points."""
    from experiments import trend

    return trend.trend_table(os.path.dirname(results))


TABLES = {"mini": mini_table, "mini_lr": lr_only_table, "tuned": tuned_table, "ladder": ladder_table,
          "llama": llama_table, "llama_tuned": llama_tuned_table, "new_2026": new_2026_table,
          "new_2026_llama": new_2026_llama_table,
          "tuned_baselines": tuned_baselines_table, "compare": compare_table, "rankings": rankings_table,
          "trend": trend_table}


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
