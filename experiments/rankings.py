"""
The optimizer rankings the 2025 benchmarks report, as data, and how a set of our results ranks beside them:
Kendall's tau over the optimizers both hold. Is a cheap testbed (the CPU mini reproduction) predictive of
theirs? experiments/report.py prints this for its runs; from the command line, for losses read off a table:

    python -m experiments.rankings AdamW=2.387 NAdamW=2.309 Lion=2.645 MARS-approx=2.416 Muon=2.032 SOAP=2.098

The rankings are data, one JSON file per benchmark in results/rankings/ (wen2025.json, semenov2025.json,
modded_nanogpt_track3.json), each with its citation, URL, the table, figure or text its numbers come from, and
whether its values are losses, tiers or steps:

Wen et al. 2025 ("Fantastic Pretraining Optimizers and Where to Find Them", arXiv 2509.02046): the final loss
of each optimizer's tuned configuration on their 130M Llama at 1x Chinchilla (marin-community/marin at
122c501, experiments/optimizer_sweep/Analysis/PhaseI/tex/hyperparam_tables_<optimizer>.tex, each 130M table's
first row). Their MARS is MARS-AdamW with the approximate gradient correction, their Soap SOAP.

Semenov et al. 2025 ("Benchmarking Optimizers for Large Language Model Pretraining", arXiv 2509.01440v1) give
their 124M losses in figures only, but their text ranks the optimizers in tiers, which are taken as ranks (1
best; an optimizer's tier, not a loss; tau-b counts a tier's members as tied). The tiers are our reading; the same
paper can be read otherwise (its "readings": "AdamW narrows the gap with SOAP and D-Muon", "ADOPT and Prodigy
scale similarly to AdamW", a figure legend with ADOPT below AdamW, basic Muon ranked), and tau is given under each
of those beside ours. Their D-Muon is our Moonlight; their MARS the official MARS-AdamW, approximate by default.

modded-nanogpt's optimization track (KellerJordan/modded-nanogpt, records/track_3_optimization: GPT-2 small on a
fixed model, data and batch, each run's steps to 3.28 validation loss): for each optimizer we hold, its fewest steps
among the accepted runs of that optimizer alone (a value of steps, lower better).
"""

from __future__ import annotations

if not __package__:  # run as a file: the repository's modules (errors, optim, ...) are not importable
    raise SystemExit("experiments/rankings.py is a module of the experiments package: "
                     "run python -m experiments.rankings from the repository root")

import glob
import json
import math
import os
import sys

from scipy import stats

from errors import InputError, exit_on_input_error

RANKINGS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "results", "rankings")
FIELDS = ("name", "order", "citation", "url", "source", "value", "ranking")


def read_published(folder: str = RANKINGS) -> dict[str, dict]:
    """Every published ranking in folder (one JSON file each), by its name, in its order: the whole record
    (citation, url, source, ...); its "ranking" maps our display names to a loss or a tier (lower is better)."""
    records = []
    for path in sorted(glob.glob(os.path.join(folder, "*.json"))):
        with open(path) as f:
            record = json.load(f)
        missing = [k for k in FIELDS if k not in record]
        if missing:
            raise InputError(f"{path}: no {', '.join(missing)}; every published ranking names them")
        records.append(record)
    return {r["name"]: r for r in sorted(records, key=lambda r: (r["order"], r["name"]))}


# by our display names (optim's Hyperparameters.display_name): benchmark -> optimizer -> loss or tier
SOURCES: dict[str, dict] = read_published()
PUBLISHED: dict[str, dict[str, float]] = {name: record["ranking"] for name, record in SOURCES.items()}
# benchmark -> its other readings: (what the reading says, the ranking under it: the tiers it changes over ours)
READINGS: dict[str, list[tuple[str, dict[str, float]]]] = {
    name: [(r["reading"], record["ranking"] | r["tiers"]) for r in record.get("readings", [])]
    for name, record in SOURCES.items()}
MIN_COMMON = 3  # optimizers both rankings must hold for a tau to mean anything


def agreement(ours: dict[str, float], theirs: dict[str, float]) -> tuple[list[str], float, float] | None:
    """The optimizers both hold (in their order, best first), Kendall's tau-b between the two rankings by
    loss and its two-sided p-value; None with fewer than MIN_COMMON in common, or all of them in one tier."""
    common = sorted(set(ours) & set(theirs), key=lambda name: (theirs[name], name))  # (a tier: by name)
    if len(common) < MIN_COMMON or len({theirs[name] for name in common}) < 2:  # (one tier ranks nothing)
        return None
    tau, p = stats.kendalltau([ours[name] for name in common], [theirs[name] for name in common])
    return common, float(tau), float(p)


def agreement_lines(ours: dict[str, float]) -> list[str]:
    """A markdown table: for each published ranking, the optimizers in common and tau."""
    lines = ["| benchmark | optimizers in common, their order (best first) | our order | Kendall's tau (p) |",
             "|---|---|---|---|"]
    for benchmark, published in PUBLISHED.items():
        for label, theirs in [(benchmark, published)] + [(f"the same, read instead: {reading}", ranking)
                                                          for reading, ranking in READINGS[benchmark]]:
            found = agreement(ours, theirs)
            if found is not None:
                common, tau, p = found
                tiers = [[n for n in common if theirs[n] == value] for value in sorted({theirs[n] for n in common})]
                their_order = " > ".join(", ".join(tier) for tier in tiers)  # (names in one tier are tied)
                lines.append(f"| {label} | {their_order} | {' > '.join(sorted(common, key=ours.get))} | "
                             f"{tau:.2f} (p = {p:.2g}) |")
    return lines if len(lines) > 2 else []


def parse_losses(argv: list[str]) -> dict[str, float]:
    losses = {}
    for item in argv:
        name, _, value = item.partition("=")
        try:
            losses[name] = float(value)
        except ValueError:
            raise InputError(f"'{item}' is not NAME=LOSS (e.g. AdamW=2.387)") from None
        if not math.isfinite(losses[name]):  # (a NaN ranks nowhere: tau would be nan, the orders arbitrary)
            raise InputError(f"'{item}': a loss must be a finite number; leave out an optimizer whose run diverged")
    return losses


def main(argv: list[str]) -> None:
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__.strip())
        return
    with exit_on_input_error():
        lines = agreement_lines(parse_losses(argv))
        if not lines:
            raise InputError(f"fewer than {MIN_COMMON} of these optimizers are in any published ranking (names: "
                             f"{', '.join(sorted(set().union(*PUBLISHED.values())))})")
        print("\n".join(lines))


if __name__ == "__main__":
    main(sys.argv[1:])
