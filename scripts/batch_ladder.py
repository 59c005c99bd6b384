"""
The batch-size ladder: the CPU testbed's optimizer ranking as a function of tokens per step.

    python -m scripts.batch_ladder out/ladder --jobs 2        # about two hours on 2 free cores

Every optimizer of LADDER runs the same token budget (config/ladder.py: 4.19M tokens) at each size of
SIZES (4K, 16K and 64K tokens per step: 1,024, 256 and 64 steps), warmup and evaluation at the same
tokens. Its learning rate is tuned per size with scripts/sweep.py (one seed, a factor-2 grid that
grows by one value past an edge until the best rate is interior), then the best rate runs seeds 2 and
3. MARS-exact takes two forward-backward passes per step: the report also reads it at the passes the
others spend (report.py --x passes). Runs in <folder>/<optimizer>@<size>/learning_rate=<lr>/seed<N>/;
rerunning resumes what is not done.
"""

import argparse
import os
import shutil

from runtime import at_least
from scripts import sweep

SIZES = {"4K": 4096, "16K": 16384, "64K": 65536}
BASE = ["config/mini.py", "config/ladder.py"]
# optimizer -> (its recipe after BASE, learning rates tried first at 4K; each 4x in batch doubles them)
LADDER = {
    "adamw": ("config/mini_adamw.py", (1e-3, 2e-3, 4e-3, 8e-3)),
    "mars_approx": ("config/mini_mars.py --is_approx=True", (1.5e-3, 3e-3, 6e-3, 1.2e-2)),
    "mars_exact": ("config/mini_mars.py --is_approx=False", (1.5e-3, 3e-3, 6e-3, 1.2e-2)),
    "muon": ("config/mini_muon.py", (1e-2, 2e-2, 4e-2, 8e-2)),
}
TUNING_SEED, SEEDS = 1, (1, 2, 3)
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
    for optimizer, (recipe, _) in LADDER.items():
        for size, tokens_per_step in SIZES.items():
            name = recipe_name(optimizer, size)
            if name in grids:
                argv += ["--recipe", f"{name}={recipe} {size_args(tokens_per_step, tokens)}",
                         f"--grid={name}:learning_rate={','.join(lr_text(lr) for lr in grids[name])}"]
    sweep.main(argv)


def best_rate(folder: str, name: str, rates: list[float], seed: int) -> float | None:
    """The rate with the lowest best validation loss of `seed` (None: none finished)."""
    scores = {lr: sweep.score(folder, sweep.Point(name, (("learning_rate", lr_text(lr)),)), [seed]).mean
              for lr in rates}
    lr = min(scores, key=scores.get)
    return lr if scores[lr] < float("inf") else None


def tune(folder: str, tokens: int, jobs: int, extra: list[str]) -> dict[str, float]:
    """Each recipe's best rate on the tuning seed, the grid extended past an edge until it is interior."""
    grids = {recipe_name(optimizer, size): [lr * 2 ** i for lr in rates]
             for optimizer, (_, rates) in LADDER.items() for i, size in enumerate(SIZES)}
    for _ in range(MAX_EXTENSIONS + 1):
        run_grid(folder, grids, (TUNING_SEED,), tokens, jobs, extra)
        extended = False
        for name, rates in grids.items():
            best = best_rate(folder, name, rates, TUNING_SEED)
            if best == rates[-1]:
                rates.append(rates[-1] * 2)
                extended = True
            elif best == rates[0]:
                rates.insert(0, rates[0] / 2)
                extended = True
        if not extended:
            break
    shutil.copy(os.path.join(folder, "sweep.md"), os.path.join(folder, "tuning.md"))
    return {name: best_rate(folder, name, rates, TUNING_SEED) for name, rates in grids.items()}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("folder")
    parser.add_argument("--tokens", type=at_least(1), default=4 * 1024 * 1024, help="the token budget of a run")
    parser.add_argument("--jobs", type=at_least(1), default=2, help="runs at a time, one CPU thread each")
    args, extra = parser.parse_known_args(argv)  # extra: train.py overrides for every run (e.g. a dry run's)
    best = tune(args.folder, args.tokens, args.jobs, extra)
    run_grid(args.folder, {name: [lr] for name, lr in best.items() if lr is not None}, SEEDS, args.tokens, args.jobs,
             extra)


if __name__ == "__main__":
    main()
