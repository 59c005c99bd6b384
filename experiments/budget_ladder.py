"""
The AdamW budget ladder of the mini reproduction: AdamW's best validation loss as a function of its token
budget, which experiments/report.py inverts to price every other optimizer's loss in AdamW's tokens (the
token-equivalent speedup).

    python -m experiments.budget_ladder out/mini_paper --jobs 2   # 15 runs (7.75 mini runs of work per seed)
    # the mini Llama's, at the AdamW point tuned on it (after the recipe's config, so they win over it)
    python -m experiments.budget_ladder out/mini_tune_llama/tuned --jobs 2 config/mini_llama.py --beta1=0.85

AdamW's mini recipe (config/mini.py, config/mini_adamw.py) at FACTORS x the mini budget (64 to 1,024 steps
of 4,096 tokens: 0.26M to 4.19M tokens), seeds 1, 2, 3, each run to its end with its own schedule stretched
to the budget: warmup, cosine decay to 0 and evaluations at the same fractions of the run. A shorter budget
is never read off the middle of a longer run, whose learning rate has not decayed there. The learning rate
is the 1x sweep's at every budget (the same tuned recipe, as the issue asks): at 0.25x and 4x AdamW's best
rate may differ, so its loss there is an upper bound of tuned AdamW's, which flatters the others a little.

The 1x rung is the mini reproduction's own AdamW recipe (`adamw`, in the same folders), so the runs
scripts/mini_paper.sh finished are reused, and the other rungs go beside them (<folder>/adamw@<f>x/base/
seed<N>/): report.py over the folder then holds the ladder and every optimizer. Rerunning resumes what is
not done; --report-only writes just the report, into <folder>/report/. Config files and --key=value
overrides after the folder go after the recipe's own (so an override wins over the recipe's value), and the
schedule is stretched from what they resolve to.
"""

if not __package__:  # run as a file: the repository's modules (errors, optim, ...) are not importable
    raise SystemExit("experiments/budget_ladder.py is a module of the experiments package: "
                     "run python -m experiments.budget_ladder from the repository root")

import argparse
import os

from optim import load_config
from config.cells import mini_recipes
from errors import at_least
from experiments import report, sweep

BASE = "config/mini.py"
RECIPE = "adamw"  # the registry's mini recipe whose budget is stretched
FACTORS = (4, 2, 1, 0.5, 0.25)  # the longest first, so that the two parallel runs finish together
SEEDS = "1,2,3"


def rung_name(factor: float) -> str:
    """The recipe's name at a budget factor: 1x is the mini reproduction's recipe itself (its folders)."""
    return RECIPE if factor == 1 else f"{RECIPE}@{factor:g}x"


def stretched(config_args: list[str], factor: float) -> str:
    """train.py overrides that stretch a run's schedule (steps, warmup, evaluation and log cadence) by factor,
    from what config_args (the config files and overrides before them) resolve to."""
    cfg = load_config(config_args)
    steps, every = cfg.max_iters * factor, cfg.eval_interval * factor
    if steps != int(steps) or every != int(every):  # evaluations must fall on the same fractions of each run
        raise ValueError(f"factor {factor:g} does not divide the mini schedule ({cfg.max_iters} steps, an "
                         f"evaluation every {cfg.eval_interval})")
    out = (f"--max_iters={int(steps)} --warmup_iters={round(cfg.warmup_iters * factor)} "
           f"--eval_interval={int(every)} --log_interval={max(1, round(cfg.log_interval * factor))}")
    if hasattr(cfg.hyperparameters, "sf_warmup_steps"):  # (Schedule-Free AdamW's own warmup, in steps)
        out += f" --sf_warmup_steps={round(cfg.hyperparameters.sf_warmup_steps * factor)}"
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m experiments.budget_ladder", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("folder", nargs="?", default="out/mini_paper")
    parser.add_argument("--jobs", type=at_least(1), default=2, help="runs at a time, one CPU thread each")
    parser.add_argument("--seeds", default=SEEDS, help="comma-separated seeds per budget")
    parser.add_argument("--report-only", action="store_true", help="write the report of the runs so far")
    args, extra = parser.parse_known_args(argv)  # extra: config files and train.py overrides for every run
    if not args.report_only:
        argv = [args.folder, BASE, "--jobs", str(args.jobs), "--seeds", args.seeds]
        recipe = " ".join([mini_recipes()[RECIPE].args, *extra])
        for factor in FACTORS:
            rung = recipe if factor == 1 else f"{recipe} {stretched([BASE, *recipe.split()], factor)}"
            argv += ["--recipe", f"{rung_name(factor)}={rung}"]
        sweep.main(argv)
    report.main([args.folder, "--out", os.path.join(args.folder, "report")])


if __name__ == "__main__":
    main()
