"""
The speedup's trend (docs/scaling.md): each optimizer's token-equivalent speedup over the tuned AdamW, with its 95%
interval, at the testbed's three points side by side, beside what the field measured at larger scale, and what the
three points project for GPT-2 small, labelled as a projection:

    python -m experiments.trend            # the table (docs/reproducing.md's trend table, experiments.tables)

The points (POINTS), each a speedups.csv of experiments.report (each optimizer's speedup on that point's own tuned
AdamW budget ladder): the mini (0.44M non-embedding parameters, 2.4 tokens per parameter), the mini at 4x the tokens
(9.5 per parameter) and width 192 at 4x the tokens (4x the non-embedding parameters, 2.4 per parameter): a step in
size at a fixed data ratio, and a step in data ratio at a fixed size.

The projection assumes the speedup is a power law in both, log S = a + b log(N / N_mini) + c log(r / r_mini) (N the
non-embedding parameters, r the tokens per parameter), which the three points fix (b from the size step, c from the
data step; the table gives each with its interval), and reads it at GPT-2 small (85M non-embedding parameters) at the
data ratio asked (the optimisation track's 1.7B tokens, 20 per parameter, ...). Its interval: the projection of
20000 draws of the three points, each log S normal with the spread its 95% interval gives, their 2.5% and 97.5%
quantiles. Two factor-of-4 steps extrapolated over a factor of 190 in size: the interval says how little three points
pin it, and the law itself is an assumption the points cannot test.
"""

from __future__ import annotations

if not __package__:  # run as a file: the repository's modules are not importable
    raise SystemExit("experiments/trend.py is a module of the experiments package: "
                     "run python -m experiments.trend from the repository root")

import argparse
import csv
import math
import os
from typing import NamedTuple

from errors import InputError, exit_on_input_error

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def non_embedding_parameters(n_layer: int, n_embd: int) -> int:
    """The blocks' matrices of a GPT (attention 4 d^2, MLP 8 d^2 per layer): what a speedup's scaling is counted in."""
    return 12 * n_layer * n_embd**2


class Point(NamedTuple):
    name: str
    speedups: str  # its speedups.csv, relative to the repository
    parameters: int  # non-embedding
    tokens: int  # per run of the tuned point


MINI_TOKENS = 256 * 4096  # config/mini.py: max_iters x total_batch_size
# (a scale point's speedups.csv is its report's, out/scale/<point>/tuned/report/speedups.csv, which
# scripts/scale_mini.sh's budget ladder writes there, committed under results/scale/<point>/)
POINTS = (
    Point("the mini", "results/tune/speedups.csv", non_embedding_parameters(4, 96), MINI_TOKENS),
    Point("4x the tokens", "results/scale/tokens4x/speedups.csv", non_embedding_parameters(4, 96), 4 * MINI_TOKENS),
    Point("width 192", "results/scale/width192/speedups.csv", non_embedding_parameters(4, 192),
          4 * MINI_TOKENS),
)
GPT2_SMALL = non_embedding_parameters(12, 768)
# What the field measured, each optimizer's speedup over a tuned AdamW (the sources docs/scaling.md cites). The
# track's tuned AdamW is its open PR #353's (weight decay 1.0, betas 0.9/0.9, a warmup), not an accepted record: its
# accepted Adam run (#2, "most likely undertuned", results/rankings/modded_nanogpt_track3.json) took 5625, 1.73x.
FIELD = {
    "Muon": ("modded-nanogpt's optimization track, 124M: 4950 tuned AdamW steps (open PR #353) / 3250 Muon steps "
             "to 3.28", 1.52),
}
WEN_ET_AL = "Wen et al. (arXiv 2509.02046): the matrix optimizers over a tuned AdamW, about 1.4x at 0.1B, 1.1x at 1.2B"
DRAWS = 20000


def read_point(path: str, tokens: int) -> dict[str, tuple[float, float, float]]:
    """optimizer -> (speedup, low, high) at the point's tokens from a speedups.csv (AdamW's own row, the reference,
    left out; a bound past AdamW's ladder is 0 or inf, as experiments.report writes it); {} if the point has not been
    measured yet."""
    if not os.path.exists(path):
        return {}
    found, columns = {}, ("optimizer", "tokens", "speedup", "low", "high")
    rewrite = "rewrite it with python -m experiments.report on the point's runs"
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        if not set(columns) <= set(reader.fieldnames or ()):
            raise InputError(f"{path}: not a speedups.csv of experiments.report (its columns {', '.join(columns)} "
                             f"are not all there); {rewrite}")
        for row in reader:
            try:
                if any(row[key] is None for key in columns):
                    raise ValueError("a cut row")
                point_tokens = int(float(row["tokens"]))
                values = tuple(float(row[key]) for key in ("speedup", "low", "high")) if row["low"] and row["high"] \
                    else None
                if values and any(math.isnan(v) for v in values):
                    raise ValueError("NaN")
            except ValueError as e:
                raise InputError(f"{path}, line {reader.line_num}: unreadable ({e}); {rewrite}") from None
            if values and point_tokens == tokens:
                if row["optimizer"] in found:
                    raise InputError(f"{path}: {row['optimizer']} twice at {tokens} tokens")
                found[row["optimizer"]] = values
    return found


def bounded(value: tuple[float, float, float]) -> bool:
    """Whether a speedup's interval lies inside AdamW's ladder at both ends (a projection needs both)."""
    s, low, high = value
    return 0 < low <= s <= high < math.inf


Z95 = 1.959964  # a normal's 97.5% quantile


def log_spread(low: float, high: float) -> float:
    """The standard deviation of log S that a 95% interval (low, high) gives."""
    return (math.log(high) - math.log(low)) / (2 * Z95)


def log_steps() -> tuple[float, float]:
    """The law's two steps, in logs: in size (width 192 over the mini, both at the mini's data ratio) and in data
    ratio (4x the tokens over the mini, both at the mini's size)."""
    mini, tokens4x, width192 = POINTS
    return (math.log(width192.parameters / mini.parameters),
            math.log((tokens4x.tokens / tokens4x.parameters) / (mini.tokens / mini.parameters)))


def exponent(base: tuple[float, float, float], stepped: tuple[float, float, float],
             log_step: float) -> tuple[float, float, float]:
    """The law's exponent over one step (b for size, c for data ratio): log(S_stepped / S_base) / log_step, with a 95%
    interval from the two speedups' spreads (independent: each on its own point's AdamW ladder)."""
    centre = math.log(stepped[0] / base[0]) / log_step
    spread = math.hypot(log_spread(*base[1:]), log_spread(*stepped[1:])) / log_step
    return centre, centre - Z95 * spread, centre + Z95 * spread


def projected(points: list[tuple[float, float, float]], at_parameters: int, at_ratio: float,
              draws: int = DRAWS, seed: int = 0) -> tuple[float, float, float]:
    """The power law through the three points' speedups, read at (at_parameters, at_ratio), and the 2.5% and 97.5%
    quantiles of the same over draws of the points (each log S normal, its spread from its interval)."""
    import numpy as np

    mini = POINTS[0]
    size_step, data_step = log_steps()
    to_size = math.log(at_parameters / mini.parameters)
    to_ratio = math.log(at_ratio / (mini.tokens / mini.parameters))

    def law(logs):  # (the width-192 point has the mini's data ratio)
        base, data, size = logs
        return base + (size - base) / size_step * to_size + (data - base) / data_step * to_ratio

    centre = math.exp(law([math.log(s) for s, _, _ in points]))
    rng = np.random.default_rng(seed)
    samples = np.exp(law([rng.normal(math.log(s), log_spread(low, high), draws) for s, low, high in points]))
    return centre, float(np.quantile(samples, 0.025)), float(np.quantile(samples, 0.975))


def speedup_text(value: tuple[float, float, float] | None, point_measured: bool) -> str:
    if value is None:
        return "not run at this point" if point_measured else "not yet measured"
    s, low, high = value
    ends = [f"{low:.2f}" if low > 0 else "past the ladder", f"{high:.2f}" if high < math.inf else "past the ladder"]
    return f"{s:.2f}x ({ends[0]} to {ends[1]})"


def exponent_text(base: tuple[float, float, float] | None, stepped: tuple[float, float, float] | None,
                  log_step: float) -> str:
    if base is None or stepped is None:
        return "needs both points"
    if not (bounded(base) and bounded(stepped)):
        return "an interval past AdamW's ladder"
    centre, low, high = exponent(base, stepped, log_step)
    return f"{centre:+.2f} ({low:+.2f} to {high:+.2f})"


def trend_table(repo: str = REPO, at_ratio: float = 20.0) -> str:
    """The Markdown table: a row per optimizer measured at the mini (once a larger point is measured, per optimizer
    measured at one: the scale stages run a few), its speedup at each point, the law's exponents each step measures,
    the field's, and the projection for GPT-2 small at at_ratio tokens per parameter where all three points are
    measured."""
    measured = [read_point(os.path.join(repo, point.speedups), point.tokens) for point in POINTS]
    if not measured[0]:
        raise InputError(f"{POINTS[0].speedups}: no speedups at the mini; run experiments.report on the tuning first")
    header = ["optimizer", *(f"{p.name} ({p.parameters / 1e6:.2f}M, {p.tokens / p.parameters:.1f} tokens per "
                             f"parameter)" for p in POINTS),
              "b, the size exponent (width 192 over the mini)",
              "c, the data-ratio exponent (4x the tokens over the mini)", "the field",
              f"GPT-2 small at {at_ratio:g} tokens per parameter (a projection)"]
    lines = ["| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
    larger, (size_step, data_step) = set().union(*measured[1:]), log_steps()
    for optimizer in sorted(larger or measured[0], key=lambda o: (-measured[0].get(o, (0.0,))[0], o)):
        cells = [point.get(optimizer) for point in measured]
        field = f"{FIELD[optimizer][1]:.2f}x" if optimizer in FIELD else ""
        projection = "needs all three points"
        if all(cells) and not all(map(bounded, cells)):
            projection = "an interval past AdamW's ladder"
        elif all(cells):
            s, low, high = projected(cells, GPT2_SMALL, at_ratio)
            projection = f"{s:.2f}x ({low:.2f} to {high:.2f})"
        texts = [speedup_text(cell, bool(point)) for cell, point in zip(cells, measured)]
        texts += [exponent_text(cells[0], cells[2], size_step), exponent_text(cells[0], cells[1], data_step)]
        lines.append("| " + " | ".join([optimizer, *texts, field, projection]) + " |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m experiments.trend", description=__doc__.split("\n\n")[0])
    parser.add_argument("--ratio", type=float, default=20.0,
                        help="tokens per parameter of the projection's GPT-2 small (default 20)")
    args = parser.parse_args()
    with exit_on_input_error():
        print(trend_table(at_ratio=args.ratio), end="")
    print(f"\nThe field: {WEN_ET_AL}; " + "; ".join(f"{o}: {text} ({s:.2f}x)" for o, (text, s) in FIELD.items()))


if __name__ == "__main__":
    main()
