"""
The optimizer rankings the 2025 benchmarks report, as data, and how a set of our results ranks beside them:
Kendall's tau over the optimizers both hold. Is a cheap testbed (the CPU mini reproduction) predictive of
theirs? scripts/report.py prints this for its runs; from the command line, for losses read off a table:

    python -m scripts.rankings AdamW=2.387 NAdamW=2.309 Lion=2.645 MARS-approx=2.416 Muon=2.032 SOAP=2.098

Wen et al. 2025 ("Fantastic Pretraining Optimizers and Where to Find Them"): the final loss of each optimizer's
tuned configuration on their 130M Llama at 1x Chinchilla (marin-community/marin at 122c501,
experiments/optimizer_sweep/Analysis/PhaseI/tex/hyperparam_tables_<optimizer>.tex, each 130M table's first
row). Their MARS is MARS-AdamW with the approximate gradient correction, their Soap SOAP.

Semenov et al. 2025 ("Benchmarking Optimizers for Large Language Model Pretraining", arXiv 2509.01440v1) give
their 124M losses in figures only, but their text ranks the optimizers in tiers, which are taken here as
ranks (1 best; an optimizer's tier, not a loss; tau-b counts a tier's members as tied): at 124M, 256 x 512
tokens a step, as the runs lengthen to 16.8B tokens "AdEMAMix emerges as the best-performing method" (Figure
3), "ADOPT, D-Muon, SOAP, and AdEMAMix take the lead" (section 4.1) over AdamW, and Sophia, SF-AdamW, Signum,
Lion, MARS and Prodigy "underperform" AdamW (Figure 14, at 210M, which Figure 13 calls an "almost identical
ranking" to 124M's; Appendix D.1: MARS does "not outperform the AdamW baseline" at this batch). Their D-Muon
is our Moonlight (decoupled weight decay, AdamW-matched update size: docs/optimizers.md); their MARS the
official MARS-AdamW, approximate by default.
"""

from __future__ import annotations

import sys

from scipy import stats

from errors import InputError, exit_on_input_error

# by our display names (optim's Hyperparameters.display_name)
PUBLISHED: dict[str, dict[str, float]] = {
    "Wen et al. 130M, 1x Chinchilla": {
        "AdamW": 3.529, "Cautious AdamW": 3.535, "Kron": 3.492, "Lion": 3.552, "MARS-approx": 3.537,
        "Adam-mini": 3.542, "Muon": 3.464, "NAdamW": 3.531, "Scion": 3.477, "SOAP": 3.483, "Sophia": 3.544,
    },
    "Semenov et al. 124M, to 16.8B tokens (tiers from their text)": {
        "AdEMAMix": 1, "ADOPT": 2, "Moonlight": 2, "SOAP": 2, "AdamW": 3, "Lion": 4, "MARS-approx": 4, "Prodigy": 4,
        "Schedule-Free AdamW": 4, "Signum": 4, "Sophia": 4,
    },
}
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
    for benchmark, theirs in PUBLISHED.items():
        found = agreement(ours, theirs)
        if found is not None:
            common, tau, p = found
            tiers = [[name for name in common if theirs[name] == value] for value in sorted({theirs[n] for n in common})]
            their_order = " > ".join(", ".join(tier) for tier in tiers)  # (names in one tier are tied)
            lines.append(f"| {benchmark} | {their_order} | {' > '.join(sorted(common, key=ours.get))} | "
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
