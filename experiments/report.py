"""
The paper's tables and figures from training logs.

    python -m experiments.report out/gpt2_small_* out/gpt2_medium_* --out report
    python -m experiments.report out/mini_paper --out out/mini_paper/report    # every run below a folder

A run is a folder holding train.py's config.json and metrics.jsonl; each argument is a run or a
folder searched for runs. Written to --out (and the Markdown also to stdout):
  report.md               the best-validation-loss table (rows: optimizers; columns: model size x
                          token budget), the downstream table where a run has eval results
                          (<checkpoint>_lm_eval.json from eval/harness.py), and the runs that are
                          not finished (their best loss so far, marked *);
  val_loss_vs_tokens.png  validation loss against tokens seen, one panel per column of the table,
  val_loss_vs_time.png    and against training time (the logged ms/step, so evaluations,
                          checkpoints and the time a preempted run was down are left out).
Several runs of one optimizer in one setting (seeds) are one cell, mean ± standard deviation, and
curves of one colour.

Token columns, as the paper: a run of the paper's 100k steps (49.2B tokens) fills the 5B, 20B and
50B columns with the best validation loss it reached by that many tokens, which is how the paper's
table was made from the official runs. A run given a token budget (TOKENS=5B: its cosine spans
the budget) is another protocol, and its column says so ("own schedule over the budget").

Beside each token-equivalent speedup over AdamW, the GPU time it projects from the measured whole training
steps of results/gpu/whole_steps.json (--gpu-rows CARD:MODEL picks the card and model; default GPT-2 small).
"""

if not __package__:  # run as a file: the repository's modules (errors, optim, ...) are not importable
    raise SystemExit("experiments/report.py is a module of the experiments package: "
                     "run python -m experiments.report from the repository root")

import argparse
import csv
import glob
import json
import math
import os
import dataclasses
import statistics
import sys
from dataclasses import dataclass, field

import matplotlib
import numpy as np

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402

from eval.paper import PAPER_COLUMNS, paper_scores  # noqa: E402
from config import TrainConfig  # noqa: E402
from config.models import ARCHITECTURE_NAMES, PRESETS  # noqa: E402
from optim import display_name, gradients_per_step  # noqa: E402
from errors import InputError, exit_on_input_error  # noqa: E402
from experiments.rankings import agreement_lines  # noqa: E402

# The paper's row order; other optimizers (MARS-Lion, ...) follow in alphabetical order.
OPTIMIZER_ORDER = ["AdamW", "Muon", "MARS-exact", "MARS-approx"]
# What the report reads from each kind of metrics.jsonl row (other kinds are passed over)
ROW_KEYS = {"train": ("step", "ms_per_step"), "val": ("step", "tokens", "val_loss")}


@dataclass
class Run:
    path: str
    optimizer: str  # e.g. "MARS-approx"
    model: str  # e.g. "GPT-2 small", "Llama 124m", or a custom shape's parameter count and architecture
    num_params: int
    dataset: str
    budget: int  # tokens the run is set to train on
    total_iters: int
    seed: int
    learning_rate: float
    # (step, tokens, training seconds, val loss) per evaluation, in step order
    val: list[tuple[int, int, float, float]]
    passes_per_step: float = 1  # forward-backward passes over the batch per step (MARS-exact: 2; Sophia: 1.1)
    tokens_per_step: int = 0  # the global batch in tokens (total_batch_size)
    train_rows: list[dict] = field(default_factory=list)  # the logged training rows (diagnostics included)
    downstream: dict | None = field(default=None)  # lm-eval results, if the run was evaluated
    row: str = ""  # the table's row: the optimizer, and its learning rate in a sweep (see name_rows)
    protocol: str = ""  # how the budget was reached, for the column name (see paper_budget_views)
    past_budget: bool = False  # a paper-budget view whose run trained past the budget
    origin: str = ""  # where its weights started: "" from scratch, else e.g. "from hf:gpt2" (init_from)

    @property
    def last_step(self) -> int:
        return self.val[-1][0] if self.val else 0

    @property
    def complete(self) -> bool:
        return self.last_step >= self.total_iters or self.past_budget

    @property
    def best_val_loss(self) -> float:
        return min(v[3] for v in self.val)


def format_tokens(n: int) -> str:
    """5000232960 -> '5B', 49152000000 -> '49.2B', 1228800 -> '1.23M'."""
    for scale, suffix in ((1e9, "B"), (1e6, "M"), (1e3, "K")):
        if n >= scale:
            return f"{n / scale:.3g}{suffix}"
    return str(n)


def read_json(path: str):
    """A JSON file's contents; one that is not JSON is named."""
    try:
        with open(path) as f:
            return json.load(f)
    except ValueError as e:  # not JSON, or not UTF-8
        raise InputError(f"{path} is not valid JSON ({e}); fix the file or leave its run out") from None


def read_rows(path: str) -> list[dict]:
    """metrics.jsonl rows; a step logged twice (a preempted run redoing the steps after its last
    checkpoint) keeps its last row. A line cut short by a crash is skipped, and said on stderr."""
    rows: dict[tuple[str, int], dict] = {}
    with open(path) as f:
        for number, line in enumerate(f, start=1):
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                print(f"{path}, line {number}: cut short (a crash while it was written): skipped", file=sys.stderr)
                continue
            if not isinstance(row, dict) or not isinstance(row.get("step"), int):
                raise InputError(f"{path}, line {number}: not a train.py metrics row (no step); leave that run out")
            missing = [k for k in ROW_KEYS.get(row.get("type"), ()) if k not in row]
            if missing:
                raise InputError(f"{path}, line {number}: a {row['type']} row without {', '.join(missing)}; "
                                 "leave that run out")
            rows[(row["type"], row["step"])] = row
    return sorted(rows.values(), key=lambda r: r["step"])


def training_seconds(train_rows: list[dict]) -> list[tuple[int, float]]:
    """(step, seconds of training up to that step) from the logged ms per step."""
    points, seconds, previous_step = [(0, 0.0)], 0.0, 0
    for row in train_rows:
        seconds += row["ms_per_step"] / 1000 * (row["step"] - previous_step)
        points.append((row["step"], seconds))
        previous_step = row["step"]
    return points


def load_run(folder: str) -> Run | None:
    """The run in folder, or None if it has no evaluation yet."""
    config_file = os.path.join(folder, "config.json")
    info = read_json(config_file)
    try:
        return run_of(folder, info, read_rows(os.path.join(folder, "metrics.jsonl")))
    except (KeyError, TypeError) as e:  # a file train.py did not write (or an older version of it)
        raise InputError(f"{config_file} is not a train.py run's config.json (no {e}); leave that run out") from None


def model_label(cfg: dict, num_params: int) -> str:
    """The model's name in tables: its architecture and preset ("GPT-2 small", "Llama 124m"), or, at a shape of
    its own (n_layer, n_head or n_embd set), its architecture and parameter count ("0.493M GPT-2")."""
    preset = cfg["model"]
    architecture = PRESETS.get(preset, {}).get("architecture", "gpt2")
    name = ARCHITECTURE_NAMES.get(architecture, architecture)
    if any(cfg[k] for k in ("n_layer", "n_head", "n_embd")):
        return f"{num_params / 1e6:.3g}M {name}"
    return f"{name} {preset.removeprefix(architecture + '-')}"


def run_of(folder: str, info: dict, rows: list[dict]) -> Run | None:
    cfg = TrainConfig().to_dict() | info["config"]  # a run from before a key existed has its default
    clock = training_seconds([r for r in rows if r["type"] == "train"])
    val = []
    for row in (r for r in rows if r["type"] == "val"):
        if not math.isfinite(row["val_loss"]):  # (train.py stops before it logs one: the file was damaged)
            raise InputError(f"{os.path.join(folder, 'metrics.jsonl')}: validation loss {row['val_loss']} at step "
                             f"{row['step']}, which train.py never writes; rerun that run or leave it out")
        seconds = max((s for step, s in clock if step <= row["step"]), default=0.0)
        val.append((row["step"], row["tokens"], seconds, row["val_loss"]))
    if not val:
        return None
    model = model_label(cfg, info["num_params"])
    downstream = None
    for results_file in sorted(glob.glob(os.path.join(folder, "*_lm_eval.json"))):
        downstream = read_json(results_file)
        if not isinstance(downstream, dict):
            raise InputError(f"{results_file} is not eval/harness.py's results; evaluate again or delete it")
    optimizer = display_name(cfg)
    protocol = "own schedule over the budget" if cfg["max_tokens"] else ""
    origin = f"from {cfg['init_from']}" if cfg["init_from"].startswith("hf:") else ""
    return Run(path=folder, optimizer=optimizer, model=model, num_params=info["num_params"],
               dataset=os.path.basename(os.path.normpath(cfg["data_dir"])) if cfg["data_dir"] else cfg["dataset"],
               budget=info["total_iters"] * cfg["total_batch_size"], total_iters=info["total_iters"],
               seed=cfg["seed"], learning_rate=cfg["learning_rate"], val=val, downstream=downstream, row=optimizer,
               protocol=protocol, passes_per_step=gradients_per_step(cfg),
               tokens_per_step=cfg["total_batch_size"], origin=origin,
               train_rows=[r for r in rows if r["type"] == "train"])


def find_runs(paths: list[str]) -> list[Run]:
    """Every run under paths; a folder left out (a run that has not evaluated yet, or has no config.json or
    metrics.jsonl) is named on stderr."""
    folders = []
    for path in paths:
        found = {os.path.dirname(f) for name in ("metrics.jsonl", "config.json")
                 for f in glob.glob(os.path.join(path, "**", name), recursive=True)}
        folders += sorted(found)
    runs = []
    for folder in dict.fromkeys(folders):
        missing = [name for name in ("config.json", "metrics.jsonl") if not os.path.exists(os.path.join(folder, name))]
        run = None if missing else load_run(folder)
        if run is None:
            why = f"no {' and no '.join(missing)}" if missing else "no evaluation yet"
            print(f"left out {folder}: {why}", file=sys.stderr)
        runs.append(run)
    runs = [view for r in runs if r is not None for view in paper_budget_views(r)]
    name_rows(runs)
    return runs


# The paper's token columns. The official repository has only 100k-step runs (49.2B tokens); the
# paper's 5B/20B/50B columns are the best validation loss those runs reached by each token count.
PAPER_BUDGETS = (5_000_000_000, 20_000_000_000, 50_000_000_000)
PAPER_STEPS = 100_000


def paper_budget_views(run: Run) -> list[Run]:
    """A 100k-step run as the paper reads it: one view per paper budget, holding the evaluations up
    to that many tokens. Other runs are one view of their own budget."""
    if run.protocol or run.total_iters != PAPER_STEPS:
        return [run]
    views = []
    for budget in PAPER_BUDGETS:
        val = [v for v in run.val if v[1] <= budget]
        if val:
            views.append(dataclasses.replace(run, budget=budget, val=val, past_budget=run.val[-1][1] >= budget,
                                             protocol=f"best by then in {PAPER_STEPS // 1000}k-step runs"))
    return views


def name_rows(runs: list[Run]) -> None:
    """Where one optimizer's runs differ in learning rate (a sweep), each rate is a row of its own;
    otherwise runs of one optimizer in one setting are seeds of one cell."""
    for optimizer in {r.optimizer for r in runs}:
        chosen = [r for r in runs if r.optimizer == optimizer]
        if len({r.learning_rate for r in chosen}) > 1:
            for run in chosen:
                run.row = f"{optimizer} lr={run.learning_rate:g}"


# -----------------------------------------------------------------------------
# Tables


def row_order(runs: list[Run]) -> list[str]:
    """Row names in the paper's optimizer order (others after, alphabetically), then by learning rate."""
    def key(run: Run) -> tuple:
        rank = OPTIMIZER_ORDER.index(run.optimizer) if run.optimizer in OPTIMIZER_ORDER else len(OPTIMIZER_ORDER)
        return rank, run.optimizer, run.learning_rate
    return list(dict.fromkeys(r.row for r in sorted(runs, key=key)))


def group_by_setting(runs: list[Run]) -> dict[str, list[Run]]:
    """Runs per column of the table (model size x token budget, and the dataset when they differ, and where the
    weights started: a run from a Hugging Face checkpoint is never a cell beside runs from scratch), columns
    ordered by model size, then budget."""
    with_dataset = len({r.dataset for r in runs}) > 1
    columns: dict[str, list[Run]] = {}
    for run in sorted(runs, key=lambda r: (r.dataset if with_dataset else "", r.origin, r.num_params, r.budget)):
        protocol = f", {run.protocol}" if run.protocol else ""
        origin = f" {run.origin}" if run.origin else ""
        name = (f"{run.model}{' ' + run.dataset if with_dataset else ''}{origin} ({format_tokens(run.budget)} "
                f"tokens{protocol})")
        columns.setdefault(name, []).append(run)
    return columns


def markdown_table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(["---"] * len(header)) + "|"]
    return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in rows])


def loss_table(runs: list[Run]) -> str:
    """Best validation loss per row (optimizer) and setting; the lowest of each column in bold."""
    columns = group_by_setting(runs)
    rows = row_order(runs)
    cells: dict[tuple[str, str], tuple[float, str]] = {}  # (column, row) -> (mean, text)
    for column, column_runs in columns.items():
        for row in rows:
            chosen = [r for r in column_runs if r.row == row]
            if not chosen:
                continue
            losses = [r.best_val_loss for r in chosen]
            text = f"{statistics.mean(losses):.3f}"
            if len(losses) > 1:
                text += f" ± {statistics.stdev(losses):.3f} (n={len(losses)})"
            if not all(r.complete for r in chosen):
                text += "*"
            cells[column, row] = statistics.mean(losses), text
    table = []
    for row in rows:
        line = [row]
        for column in columns:
            if (column, row) not in cells:
                line.append("-")
                continue
            value, text = cells[column, row]
            best = min(v for (c, _), (v, _) in cells.items() if c == column)
            line.append(f"**{text}**" if value == best else text)
        table.append(line)
    return markdown_table([""] + list(columns), table)


def downstream_table(runs: list[Run]) -> str | None:
    """The paper's zero-shot table (percent) for the runs with eval results: acc_norm where a task
    reports it, acc otherwise; Avg. over the tasks that were run."""
    evaluated = [r for r in runs if r.downstream]
    if not evaluated:
        return None
    rows = []
    for run in evaluated:
        values = paper_scores(run.downstream)
        setting = f"{run.model} ({format_tokens(run.budget)} tokens, {run.dataset})"
        rows.append([run.row, setting] + ["-" if v is None else f"{v:.2f}" for v in values])
    return markdown_table(["Optimizer", "Model"] + [name for name, _ in PAPER_COLUMNS] + ["Avg."], rows)


def welch(a: list[float], b: list[float]) -> tuple[float, float, float]:
    """Welch's t-test (unequal variances): mean(a) - mean(b), t and the two-sided p-value."""
    from scipy.stats import ttest_ind

    result = ttest_ind(a, b, equal_var=False)
    return statistics.mean(a) - statistics.mean(b), float(result.statistic), float(result.pvalue)


def significance_table(runs: list[Run]) -> str | None:
    """Welch's t-test (unequal variances) on the best validation loss, between every two rows of a
    column that both have 2+ seeds: the difference of the means, t and the two-sided p-value."""
    lines = []
    for column, column_runs in group_by_setting(runs).items():
        losses = {row: [r.best_val_loss for r in column_runs if r.row == row] for row in row_order(column_runs)}
        seeded = [row for row, values in losses.items() if len(values) > 1]
        for i, a in enumerate(seeded):
            for b in seeded[i + 1 :]:
                difference, t, p = welch(losses[a], losses[b])
                lines.append([column, a, b, f"{difference:+.4f}", f"{t:.2f}", f"{p:.3g}",
                              f"{len(losses[a])}, {len(losses[b])}"])
    if not lines:
        return None
    return markdown_table(["setting", "A", "B", "mean A - mean B", "t", "p", "seeds"], lines)


def report_markdown(runs: list[Run], plot_files: list[str], gpu: "GpuRows", speedups: list[dict] | None = None) -> str:
    parts = ["# Results", "", "## Best validation loss", "", loss_table(runs), "",
             "Bold: the lowest of its column. Where a cell holds several runs (seeds): mean ± standard "
             "deviation of their best losses. *: not finished, best loss so far."]
    table = significance_table(runs)
    if table:
        parts += ["", "## Significance", "", "Welch's t-test (two-sided, unequal variances) on the best "
                  "validation loss of each seed: a p-value below 0.05 says the difference of the means is "
                  "unlikely to be seed noise.", "", table]
    if speedup_settings(runs):
        parts += [""] + speedup_section(runs, gpu, speedups)
    lines = ranking_section(runs)
    if lines:
        parts += ["", "## Ranking beside the 2025 benchmarks", ""] + lines
    table = downstream_table(runs)
    if table:
        parts += ["", "## Downstream tasks (zero-shot, %)", "", table]
    whole_runs = list({r.path: r for r in runs}.values())  # a 100k-step run's last budget view
    incomplete = [r for r in whole_runs if not r.complete]
    if incomplete:
        parts += ["", "## Incomplete runs", ""]
        parts += [f"- {r.path}: step {r.last_step} of {r.total_iters}" for r in incomplete]
    parts += ["", "## Runs", ""]
    parts.append(markdown_table(
        ["run", "optimizer", "model", "tokens", "seed", "steps", "best val loss", "training time"],
        [[r.path, r.row, r.model, format_tokens(r.budget), str(r.seed), f"{r.last_step}/{r.total_iters}",
          f"{r.best_val_loss:.4f}", f"{r.val[-1][2] / 60:.1f} min"] for r in whole_runs]))
    parts += [""] + [f"![{os.path.splitext(f)[0]}]({f})" for f in plot_files]
    return "\n".join(parts) + "\n"


def ranking_section(runs: list[Run]) -> list[str]:
    """Kendall's tau between the ranking, by mean best loss over seeds, of the setting that holds the most
    optimizers and each published one (results/rankings/); empty where too few are in common."""
    columns = [column for column in group_by_setting(runs).values() if all(r.row == r.optimizer for r in column)]
    if not columns:
        return []
    column = max(columns, key=lambda c: len({r.optimizer for r in c}))
    means = {name: float(np.mean([r.best_val_loss for r in column if r.optimizer == name]))
             for name in {r.optimizer for r in column}}
    lines = agreement_lines(means)
    return lines and [f"Over {format_tokens(column[0].budget)} tokens of {column[0].model}, by mean best loss; "
                      "their ranking as results/rankings/ records it (experiments/rankings.py)."] + [""] + lines


# -----------------------------------------------------------------------------
# Token-equivalent speedup over AdamW
#
# The speedup of an optimizer that reaches loss L in D tokens is D_AdamW(L) / D: the tokens AdamW needs to
# reach L, over D (the MARS paper's and the 2025 benchmarks' reading). D_AdamW comes from AdamW run to the
# end of its own schedule at several budgets (the ladder), never from the middle of one run, whose learning
# rate has not decayed there: its best validation loss per budget, fitted by a saturating power law
# L(D) = E + A (D / 1M tokens)^-alpha where the data support one, else interpolated, then inverted at L.
# Outside AdamW's budgets the ladder measures nothing: there the speedup is only a bound, "> x" or "< x".

REFERENCE = "AdamW"
MIN_BUDGETS = 4  # AdamW budgets a curve needs (the power law has three parameters)
SCALE = 1e6  # tokens: the power law's D is in millions
# Exponents the power law may take: one at either end of this range is a curve the data do not pin down
# (alpha -> 0 is a straight line in log D), and the interpolation serves instead.
ALPHAS = np.geomspace(0.02, 4.0, 200)
FIT_P = 0.01  # the power law is used unless its misfit is this unlikely under the seeds' noise (F-test)
DRAWS = 4000  # bootstrap draws
LEVEL = 0.95


def fit_power_law(tokens: np.ndarray, means: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Least-squares E, A, alpha of L(D) = E + A (D / SCALE)^-alpha through each row of means ((N, budgets),
    one loss per budget of tokens); nan in a row the law does not fit: no A > 0, or the best exponent at an
    end of ALPHAS. E and A are linear given alpha, so alpha is searched on ALPHAS, then twice on a finer
    grid around each row's best (to 1e-4 of itself): no starting guess to go wrong, every row at once."""
    logs, rows = np.log(tokens / SCALE), np.arange(len(means))
    centred = means - means.mean(1, keepdims=True)
    candidates = np.broadcast_to(ALPHAS, (len(means), len(ALPHAS)))
    for zoom in range(3):
        # the first grid is every row's: its (K, budgets) powers serve all rows through one product
        x = np.exp(-(ALPHAS if zoom == 0 else candidates)[..., None] * logs)
        xc = x - x.mean(-1, keepdims=True)
        sxx = (xc**2).sum(-1)
        slope = (centred @ xc.T if zoom == 0 else np.einsum("nkb,nb->nk", xc, centred)) / sxx
        sse = np.where(slope > 0, (centred**2).sum(1, keepdims=True) - slope**2 * sxx, np.inf)
        best = sse.argmin(1)
        if zoom == 0:
            fits = np.isfinite(sse[rows, best]) & (best > 0) & (best < len(ALPHAS) - 1)
        alpha, amplitude = candidates[rows, best], slope[rows, best]
        offset = means.mean(1) - amplitude * np.broadcast_to(x, (len(means), *x.shape[-2:]))[rows, best].mean(1)
        step = candidates[rows, np.minimum(best + 1, candidates.shape[1] - 1)] / alpha
        candidates = alpha[:, None] * np.geomspace(1 / step, step, 21, axis=1)
    nan = np.full(len(means), np.nan)
    return np.where(fits, offset, nan), np.where(fits, amplitude, nan), np.where(fits, alpha, nan)


def power_law_misfit(tokens: np.ndarray, seeds: list[list[float]]) -> float | None:
    """The F-test's p-value of the power law through the budgets' means against the seeds' pooled noise
    (None: no law fits, or too few seeds or budgets, or no spread among the seeds, to test it against)."""
    from scipy.stats import f

    means = np.array([[statistics.mean(s) for s in seeds]])
    offset, amplitude, alpha = (v[0] for v in fit_power_law(tokens, means))
    noise_df, fit_df = sum(len(s) - 1 for s in seeds), len(seeds) - 3
    if np.isnan(alpha) or noise_df < 1 or fit_df < 1:
        return None
    fitted = offset + amplitude * (tokens / SCALE) ** -alpha
    misfit = sum(len(s) * (m - y) ** 2 for s, m, y in zip(seeds, means[0], fitted)) / fit_df
    noise = sum((x - statistics.mean(s)) ** 2 for s in seeds for x in s) / noise_df
    return float(f.sf(misfit / noise, fit_df, noise_df)) if noise > 0 else None


def interpolated_tokens(tokens: np.ndarray, means: np.ndarray, loss: float) -> float:
    """The tokens at which AdamW reaches loss, linear in log tokens between the budgets' means made
    non-increasing (more budget is never counted as worse); the first budget that reaches it where the
    curve is flat. inf past the largest budget, 0 short of the smallest."""
    envelope = np.minimum.accumulate(means)
    if loss < envelope[-1]:
        return math.inf
    if loss > envelope[0]:
        return 0.0
    i = int(np.argmax(envelope <= loss))
    if i == 0:
        return float(tokens[0])
    fraction = (envelope[i - 1] - loss) / (envelope[i - 1] - envelope[i])
    return float(math.exp((1 - fraction) * math.log(tokens[i - 1]) + fraction * math.log(tokens[i])))


def adamw_tokens(tokens: np.ndarray, means: np.ndarray, losses: np.ndarray, power_law: bool) -> np.ndarray:
    """Per row: the tokens AdamW needs to reach losses[row] on the curve through means[row] (inf past the
    largest budget, 0 short of the smallest), by the power law where asked and it fits that row, else
    by interpolation."""
    out = np.full(len(means), np.nan)
    if power_law:
        offset, amplitude, alpha = fit_power_law(tokens, means)
        ends = offset[:, None] + amplitude[:, None] * (tokens[[0, -1]] / SCALE)[None, :] ** -alpha[:, None]
        with np.errstate(invalid="ignore", divide="ignore"):
            inside = SCALE * ((losses - offset) / amplitude) ** (-1 / alpha)
        out = np.where(losses < ends[:, 1], math.inf, np.where(losses > ends[:, 0], 0.0, inside))
    for row in np.flatnonzero(np.isnan(out)):
        out[row] = interpolated_tokens(tokens, means[row], losses[row])
    return out


@dataclass(frozen=True)
class AdamWCurve:
    """AdamW's best validation losses (its seeds) at each of its token budgets, and the curve through them."""

    tokens: np.ndarray  # the budgets, ascending
    seeds: list[list[float]]  # each budget's best validation losses, one per seed
    law: tuple[float, float, float] | None  # the power law's E, A, alpha; None: the interpolation serves
    misfit_p: float | None  # the F-test's p-value of the power law (None: not tested)

    @classmethod
    def of(cls, ladder: dict[int, list[float]]) -> "AdamWCurve | None":
        """The curve through a ladder of budget -> seeds' losses (None: fewer than MIN_BUDGETS budgets)."""
        if len(ladder) < MIN_BUDGETS:
            return None
        tokens = np.array(sorted(ladder), dtype=float)
        seeds = [list(ladder[b]) for b in sorted(ladder)]
        law = tuple(float(v[0]) for v in fit_power_law(tokens, np.array([[statistics.mean(s) for s in seeds]])))
        if math.isnan(law[2]):
            return cls(tokens, seeds, None, None)
        misfit_p = power_law_misfit(tokens, seeds)
        return cls(tokens, seeds, law if misfit_p is None or misfit_p >= FIT_P else None, misfit_p)

    @property
    def power_law(self) -> bool:
        return self.law is not None

    @property
    def means(self) -> np.ndarray:
        return np.array([statistics.mean(s) for s in self.seeds])

    def loss(self, tokens: np.ndarray) -> np.ndarray:
        """The curve's loss at tokens (the power law's, else the interpolation's through the means)."""
        if self.law:
            offset, amplitude, alpha = self.law
            return offset + amplitude * (tokens / SCALE) ** -alpha
        return np.interp(np.log(tokens), np.log(self.tokens), np.minimum.accumulate(self.means))

    def describe(self) -> str:
        test = ""
        if self.misfit_p is not None:
            test = f"; F-test of its misfit against the seeds' noise: p = {self.misfit_p:.2g}"
        if self.law:
            offset, amplitude, alpha = self.law
            return (f"a saturating power law fitted to the budgets' means by least squares, L(D) = {offset:.3f} + "
                    f"{amplitude:.3f} (D / 1M tokens)^-{alpha:.3f}{test}")
        why = (f"the saturating power law's misfit exceeds the seeds' noise{test}" if self.misfit_p is not None else
               f"no saturating power law fits: its least-squares exponent leaves [{ALPHAS[0]:g}, {ALPHAS[-1]:g}] "
               "(it runs to 0 where the means do not flatten at the large budgets) or its A is not positive")
        return f"monotone interpolation, linear in log tokens, between the budgets' means ({why})"


@dataclass(frozen=True)
class Speedup:
    """AdamW's tokens to reach an optimizer's mean loss over the optimizer's tokens, with its interval. inf:
    past AdamW's largest budget ("> highest"); 0: short of its smallest ("< lowest")."""

    value: float
    low: float | None  # the LEVEL interval's ends (None: a side with one seed has no spread to draw from)
    high: float | None
    lowest: float  # AdamW's smallest budget / the optimizer's: the least the ladder can measure
    highest: float  # AdamW's largest budget / the optimizer's: the most

    def bound(self, x: float, spec: str = ".3g") -> str:
        """x in spec's format, or past the ladder the end it passed ("> 4", "< 0.25")."""
        if x == math.inf:
            return f"> {self.highest:.3g}"
        if x == 0.0:
            return f"< {self.lowest:.3g}"
        return f"{x:{spec}}"

    def text(self) -> str:
        interval = ""
        if self.low is not None:
            low, high = self.bound(self.low), self.bound(self.high)
            interval = f" ({low})" if low == high else f" ({low} to {high})"
        return f"{self.bound(self.value)}x{interval}"


def draw_means(seeds: list[float], draws: int, rng: np.random.Generator) -> np.ndarray:
    """The bootstrap's draws of a cell's mean over its seeds: the mean plus its standard error times
    Student's t with n - 1 degrees of freedom (a parametric bootstrap over the seeds). Resampling three
    seeds with replacement spreads their mean by only 0.82 of its standard error, with normal tails: on
    synthetic ladders of three seeds a cell (tests/test_report.py) its 95% interval of the speedup covered
    the true one 79-80% of the time; this one 99% (conservative: each cell's t tails add up)."""
    n = len(seeds)
    return statistics.mean(seeds) + statistics.stdev(seeds) / math.sqrt(n) * rng.standard_t(n - 1, draws)


def token_speedup(curve: AdamWCurve, losses: list[float], budget: int, draws: int = DRAWS,
                  seed: int = 0) -> Speedup:
    """The speedup over AdamW of an optimizer whose seeds reached losses in budget tokens, and its LEVEL
    interval from the seeds of both sides: each draw redraws every AdamW budget's mean and the optimizer's
    (draw_means), refits the curve and inverts it."""
    point = adamw_tokens(curve.tokens, curve.means[None, :], np.array([statistics.mean(losses)]), curve.power_law)
    low = high = None
    if len(losses) > 1 and all(len(s) > 1 for s in curve.seeds):
        rng = np.random.default_rng(seed)
        means = np.stack([draw_means(s, draws, rng) for s in curve.seeds], axis=1)
        reached = adamw_tokens(curve.tokens, means, draw_means(losses, draws, rng), curve.power_law) / budget
        # inverted_cdf picks drawn values, never an average of a bound with a number
        low, high = np.quantile(reached, [(1 - LEVEL) / 2, (1 + LEVEL) / 2], method="inverted_cdf")
    return Speedup(float(point[0]) / budget, low, high, curve.tokens[0] / budget, curve.tokens[-1] / budget)


# -----------------------------------------------------------------------------
# Projected GPU-time speedup
#
# A data speedup counts tokens; a GPU run pays in time. AdamW needs speedup x D tokens to reach the optimizer's
# loss, each of its steps taking AdamW's whole training step, while the optimizer spends D tokens at its own
# whole step (forward-backward, MARS-exact's second one included, and the optimizer step). So on a card whose
# steps were measured, the GPU time AdamW needs over the optimizer's is
#     speedup x (AdamW's whole step / the optimizer's whole step),
# a projection: the speedup is the testbed's, the step times are the measured GPU rows of a GPT-2-scale model
# (results/gpu/whole_steps.json, transcribed from results/gpu/*.md). An optimizer without a row is not
# measured, and gets no number.

WHOLE_STEPS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "results", "gpu",
                           "whole_steps.json")
GPU_MODEL = "GPT-2 small"  # the default rows' model: the mini runs' architecture at the paper's smallest size
ROW_FIELDS = ("card", "date", "model", "optimizer", "micro_batch", "sequence_length", "setup", "whole_step_ms")


def projected_gpu_speedup(speedup: Speedup, adamw_step_ms: float, step_ms: float) -> Speedup:
    """The data speedup, its interval's ends and its bounds ('> x' stays a bound), each times AdamW's whole
    training step over the optimizer's."""
    ratio = adamw_step_ms / step_ms
    scaled = lambda x: None if x is None else x * ratio  # (inf and 0, the bounds' markers, stay what they are)
    return Speedup(speedup.value * ratio, scaled(speedup.low), scaled(speedup.high), speedup.lowest * ratio,
                   speedup.highest * ratio)


def read_whole_steps(path: str = WHOLE_STEPS) -> list[dict]:
    """The measured GPU rows of results/gpu/whole_steps.json (a row without a field the projection reads is
    named)."""
    rows = read_json(path).get("rows", [])
    for number, row in enumerate(rows, start=1):
        missing = [k for k in ROW_FIELDS if k not in row]
        if missing:
            raise InputError(f"{path}, row {number}: no {', '.join(missing)}; fix the row")
    return rows


def and_list(items: list[str]) -> str:
    """'a', 'a and b', 'a, b and c'."""
    return ", ".join(items[:-1]) + " and " + items[-1] if len(items) > 1 else "".join(items)


@dataclass(frozen=True)
class GpuRows:
    """The rows a projection reads: one card's and one model's, in one setting (micro-batch and how it ran),
    the newest per optimizer, so that every ratio compares steps of the same tokens run the same way."""

    card: str
    model: str
    setting: str  # e.g. "micro-batch 16 x 1024, one process"
    rows: dict[str, dict]  # optimizer -> its row; REFERENCE (AdamW) always among them

    @classmethod
    def of(cls, rows: list[dict], card: str, model: str) -> "GpuRows | None":
        """card's and model's newest row per optimizer (of two rows of one date, the later in the file), in the
        setting of AdamW's newest row there; None without an AdamW row."""
        newest: dict[tuple[str, str], dict] = {}
        for row in sorted((r for r in rows if r["card"] == card and r["model"] == model), key=lambda r: r["date"]):
            setting = f"micro-batch {row['micro_batch']} x {row['sequence_length']}, {row['setup']}"
            newest[row["optimizer"], setting] = row
        adamw = [(setting, row) for (optimizer, setting), row in newest.items() if optimizer == REFERENCE]
        if not adamw:
            return None
        setting = max(adamw, key=lambda pair: pair[1]["date"])[0]
        return cls(card, model, setting, {optimizer: row for (optimizer, s), row in newest.items() if s == setting})

    def projection(self, optimizer: str, speedup: Speedup) -> Speedup | None:
        """The optimizer's projected GPU-time speedup; None where it has no row here (not measured)."""
        if optimizer not in self.rows:
            return None
        return projected_gpu_speedup(speedup, self.rows[REFERENCE]["whole_step_ms"],
                                     self.rows[optimizer]["whole_step_ms"])

    def header(self, optimizers: list[str]) -> str:
        """The column's name: a projection, from which card's and model's rows, of which dates."""
        used = [self.rows[o] for o in dict.fromkeys([REFERENCE, *optimizers]) if o in self.rows]
        return (f"projected GPU-time speedup ({self.card}, {self.model}, "
                f"{and_list(sorted({r['date'] for r in used}))} rows)")

    def note(self, optimizers: list[str]) -> str:
        """The line under a table: the setting and each whole step the column used."""
        steps = [f"{o} {self.rows[o]['whole_step_ms']:g}" for o in dict.fromkeys([REFERENCE, *optimizers])
                 if o in self.rows]
        return (f"GPU rows: {self.card}, {self.model}, {self.setting}; whole step ms: {', '.join(steps)} "
                "(results/gpu/whole_steps.json); empty: not measured.")


def gpu_rows(rows: list[dict], choice: str | None = None) -> GpuRows:
    """The rows of --gpu-rows CARD:MODEL (either matched without case); by default GPU_MODEL's on the card that
    measured AdamW and the most other optimizers on it (the newest rows on a tie): one card for the whole
    column, so that its cells compare, and the fewest left empty."""
    pairs = list(dict.fromkeys((r["card"], r["model"]) for r in rows))
    sets = [s for s in (GpuRows.of(rows, card, model) for card, model in pairs) if s is not None]
    if choice is None:
        chosen = [s for s in sets if s.model == GPU_MODEL]
        if chosen:
            return max(chosen, key=lambda s: (len(s.rows), max(r["date"] for r in s.rows.values())))
    else:
        card, _, model = (part.strip().lower() for part in choice.partition(":"))
        for s in sets:
            if (s.card.lower(), s.model.lower()) == (card, model):
                return s
    wanted = f"--gpu-rows {choice}" if choice else f"the default ({GPU_MODEL})"
    raise InputError(f"{wanted}: no AdamW row for that card and model in {WHOLE_STEPS}; choose among "
                     f"{', '.join(f'{s.card}:{s.model}' for s in sets) or 'none (no AdamW row at all)'}")


def own_schedule(run: Run) -> bool:
    """A complete run whose budget is where its own schedule ends (not a paper-budget view of a longer run)."""
    return run.complete and run.budget == run.total_iters * run.tokens_per_step


def speedup_settings(runs: list[Run]) -> dict[str, list[Run]]:
    """Runs that can be priced in AdamW's tokens, per setting (model, dataset, tokens per step and where the weights
    started: AdamW's ladder is one per setting, and a run from a checkpoint is never a rung of one from scratch):
    complete, each at the end of its own schedule."""
    with_dataset = len({r.dataset for r in runs}) > 1
    settings: dict[str, list[Run]] = {}
    for run in sorted(filter(own_schedule, runs),
                      key=lambda r: (r.dataset, r.origin, r.num_params, r.tokens_per_step)):
        dataset = f" {run.dataset}" if with_dataset else ""
        origin = f" {run.origin}" if run.origin else ""
        name = f"{run.model}{dataset}{origin}, {format_tokens(run.tokens_per_step)} tokens per step"
        settings.setdefault(name, []).append(run)
    return settings


def adamw_ladder(runs: list[Run]) -> dict[int, list[float]]:
    """AdamW's best validation losses (one per seed) per token budget among runs of one setting; where
    several learning rates ran at a budget, the rate with the lowest mean (AdamW tuned at that budget)."""
    by_budget: dict[int, dict[float, list[float]]] = {}
    for run in runs:
        if run.optimizer == REFERENCE:
            by_budget.setdefault(run.budget, {}).setdefault(run.learning_rate, []).append(run.best_val_loss)
    return {budget: min(rates.values(), key=statistics.mean) for budget, rates in by_budget.items()}


def speedup_section(runs: list[Run], gpu: GpuRows, speedups: list[dict] | None = None) -> list[str]:
    """The report's speedup section: per setting, AdamW's ladder and its curve, then every optimizer's
    speedup at each budget it ran (AdamW's own at budgets others ran: the curve's error, read as a speedup),
    and beside it the GPU time it projects on gpu's rows. Each row also goes to speedups, where given (the
    rows of speedups.csv, which experiments.tables reads: AdamW's at 1x, the reference, without an interval)."""
    parts = ["## Token-equivalent speedup over AdamW", "",
             "AdamW's tokens to reach each optimizer's mean best validation loss, over the optimizer's tokens (the "
             "MARS paper's and the 2025 benchmarks' reading). AdamW's loss against its token budget comes from "
             "AdamW run to the end of its own schedule at each budget, and is inverted at the optimizer's loss. "
             f"In parentheses, a {LEVEL:.0%} interval from the seeds of both sides (a parametric bootstrap: each "
             "cell's mean redrawn from its seeds' mean and standard error with Student's t noise). Past AdamW's "
             "largest budget the ladder measures nothing: '> x' (and '< x' short of its smallest) is a bound, "
             "never an extrapolation. Tokens, not compute: MARS-exact spends two forward-backward passes per "
             "step.", "",
             "Beside it, the GPU time it projects: the speedup and its interval's ends, each times AdamW's whole "
             "training step over the optimizer's (forward-backward, MARS-exact's second one included, and the "
             "optimizer step), as measured on one GPU (results/gpu/whole_steps.json, the newest row per card, "
             "model and optimizer): the GPU time AdamW needs to reach the optimizer's loss over the optimizer's, "
             f"were the testbed's speedup to hold at that model's step times. The rows are {gpu.model}'s on "
             f"{gpu.card}, one card for the whole column (by default {GPU_MODEL}'s on the card that measured AdamW "
             "and the most other optimizers on it, the newest on a tie; --gpu-rows CARD:MODEL picks others). An "
             "optimizer without a measured row gets an empty cell."]
    for setting, setting_runs in speedup_settings(runs).items():
        ladder = adamw_ladder(setting_runs)
        curve = AdamWCurve.of(ladder)
        parts += ["", f"### {setting}", ""]
        if curve is None:
            budgets = ", ".join(format_tokens(b) for b in sorted(ladder)) or "none"
            parts.append(f"No speedup: AdamW ran to the end of its own schedule at {len(ladder)} budget(s) here "
                         f"({budgets}); the curve needs {MIN_BUDGETS} or more.")
            continue
        budgets = []
        for tokens, seeds, fitted in zip(curve.tokens, curve.seeds, curve.loss(curve.tokens)):
            spread = f" ± {statistics.stdev(seeds):.4f}" if len(seeds) > 1 else ""
            budgets.append([format_tokens(int(tokens)), f"{statistics.mean(seeds):.4f}{spread}", f"{fitted:.4f}",
                            str(len(seeds))])
        parts += [f"AdamW's curve: {curve.describe()}.", "",
                  markdown_table(["AdamW budget", "best val loss", "curve", "seeds"], budgets), ""]
        others = {r.budget for r in setting_runs if r.optimizer != REFERENCE}
        rows = []
        for row in row_order(setting_runs):
            for budget in sorted({r.budget for r in setting_runs if r.row == row}):
                chosen = [r for r in setting_runs if r.row == row and r.budget == budget]
                if chosen[0].optimizer == REFERENCE and budget not in others:
                    continue
                losses = [r.best_val_loss for r in chosen]
                result = token_speedup(curve, losses, budget)
                reached = "-" if result.value in (0.0, math.inf) else format_tokens(int(result.value * budget))
                projected = gpu.projection(chosen[0].optimizer, result)
                if speedups is not None:
                    reference = chosen[0].optimizer == REFERENCE
                    speedups.append(dict(
                        optimizer=row, setting=setting, tokens=budget, seeds=len(losses),
                        loss_mean=f"{statistics.mean(losses):.6g}",
                        loss_std=f"{statistics.stdev(losses):.6g}" if len(losses) > 1 else "0",
                        speedup=1 if reference else f"{result.value:.6g}",
                        low="" if reference or result.low is None else f"{result.low:.6g}",
                        high="" if reference or result.high is None else f"{result.high:.6g}",
                        lowest=f"{result.lowest:.6g}", highest=f"{result.highest:.6g}"))  # (0 and inf's bounds)
                rows.append([row, format_tokens(budget), f"{statistics.mean(losses):.4f}", reached, result.text(),
                             projected.text() if projected else "", str(len(losses))])
        optimizers = list(dict.fromkeys(r.optimizer for r in setting_runs))
        parts += [markdown_table(["optimizer", "tokens", "best val loss", "AdamW's tokens for it",
                                  f"speedup ({LEVEL:.0%} interval)", gpu.header(optimizers), "seeds"], rows), "",
                  gpu.note(optimizers)]
    return parts


# -----------------------------------------------------------------------------
# Plots


X_AXES = {"tokens": "tokens", "time": "training time", "passes": "forward-backward passes over the batch"}


def curve(run: Run, x_axis: str) -> list[tuple[float, float]]:
    """(x, val loss) per evaluation; x in tokens, training seconds or forward-backward passes
    (MARS-exact's steps count two, so compute-matched comparisons read off one axis)."""
    column = {"tokens": 1, "time": 2}.get(x_axis)
    return [(v[column] if column else v[0] * run.passes_per_step, v[3]) for v in run.val]


def plot_val_loss(runs: list[Run], x_axis: str, path: str) -> None:
    """One panel per setting; per row the mean over its seeds, with a band from their lowest to
    highest loss (the x of an evaluation is the seeds' mean: clocks differ)."""
    columns = group_by_setting(runs)
    rows = row_order(runs)
    colors = {name: f"C{i}" for i, name in enumerate(rows)}
    ncols = min(3, len(columns))
    nrows = -(-len(columns) // ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(5.5 * ncols, 4 * nrows), squeeze=False)
    scale, unit = 1.0, ""
    if x_axis == "time":
        hours = max(v[2] for run in runs for v in run.val) > 2 * 3600
        scale, unit = (3600.0, " (hours)") if hours else (60.0, " (minutes)")
    for ax, (column, column_runs) in zip(axes.flat, columns.items()):
        for row in [r for r in rows if any(run.row == r for run in column_runs)]:
            seeds = [curve(run, x_axis) for run in column_runs if run.row == row]
            length = min(len(c) for c in seeds)  # the evaluations every seed has reached
            x = [statistics.mean(c[i][0] for c in seeds) / scale for i in range(length)]
            losses = [[c[i][1] for c in seeds] for i in range(length)]
            complete = all(run.complete for run in column_runs if run.row == row)
            label = f"{row}{f' ({len(seeds)} seeds)' if len(seeds) > 1 else ''}{'' if complete else ' (incomplete)'}"
            ax.plot(x, [statistics.mean(v) for v in losses], color=colors[row], label=label)
            if len(seeds) > 1:
                ax.fill_between(x, [min(v) for v in losses], [max(v) for v in losses], color=colors[row], alpha=0.2)
        # Zoom past the first evaluations, where all curves are high and alike.
        losses = sorted(v[3] for run in column_runs for v in run.val if v[0] > 0) or [column_runs[0].val[0][3]]
        low, high = losses[0], losses[int(0.9 * (len(losses) - 1))]
        ax.set_ylim(low - 0.05 * (high - low) - 1e-3, high + 1e-3)
        ax.set_title(column)
        ax.set_xlabel(X_AXES[x_axis] + unit)
        ax.set_ylabel("validation loss")
        ax.grid(alpha=0.3)
        ax.legend()
    for ax in list(axes.flat)[len(columns):]:
        ax.axis("off")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_speedup(runs: list[Run], path: str) -> bool:
    """Per setting with an AdamW curve: AdamW's seeds and curve against tokens, and every other optimizer's
    mean best loss at its budget, joined by a dashed line to the tokens AdamW needs for it (an arrow past
    the largest budget: a bound). False if no setting has a curve."""
    panels = [(name, setting_runs, curve) for name, setting_runs in speedup_settings(runs).items()
              if (curve := AdamWCurve.of(adamw_ladder(setting_runs))) is not None]
    if not panels:
        return False
    fig, axes = plt.subplots(1, len(panels), figsize=(9 * len(panels), 6), squeeze=False)
    for ax, (name, setting_runs, curve) in zip(axes.flat, panels):
        for tokens, seeds in zip(curve.tokens, curve.seeds):
            ax.scatter([tokens] * len(seeds), seeds, color="black", s=12, zorder=3)
        span = np.geomspace(curve.tokens[0], curve.tokens[-1], 200)
        kind = "power law" if curve.power_law else "interpolation"
        ax.plot(span, curve.loss(span), color="black", label=f"{REFERENCE} at each budget ({kind})")
        others = [row for row in row_order(setting_runs) if not row.startswith(REFERENCE)]
        for i, row in enumerate(others):
            color = plt.get_cmap("tab20")(i % 20)
            for budget in sorted({r.budget for r in setting_runs if r.row == row}):
                losses = [r.best_val_loss for r in setting_runs if r.row == row and r.budget == budget]
                loss, result = statistics.mean(losses), token_speedup(curve, losses, budget)
                reached = min(max(result.value * budget, curve.tokens[0]), curve.tokens[-1])
                ax.scatter([budget], [loss], color=color, marker="D", zorder=4, label=f"{row}: {result.text()}")
                ax.plot([budget, reached], [loss, loss], color=color, linestyle="--", linewidth=1)
                if result.value in (0.0, math.inf):
                    ax.annotate("", xy=(reached * (1.25 if result.value else 0.8), loss), xytext=(reached, loss),
                                arrowprops=dict(arrowstyle="->", color=color))
        ax.set_xscale("log")
        ax.set_xlabel("tokens (each AdamW run to the end of its own schedule)")
        ax.set_ylabel("best validation loss")
        ax.set_title(name)
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=7, loc="upper right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


DIAGNOSTICS = {"update_rms": "update RMS", "mars/grad_change": "||g - g_prev|| / ||g||",
               "mars/grad_cos": "cos(g, g_prev)", "mars/clipped_fraction": "fraction of tensors with c clipped"}


def plot_diagnostics(runs: list[Run], path: str) -> bool:
    """The optimizer diagnostics of the logs against tokens, per row (mean over seeds); False if none."""
    present = [key for key in DIAGNOSTICS if any(key in row for run in runs for row in run.train_rows)]
    if not present:
        return False
    whole_runs = list({r.path: r for r in runs}.values())
    fig, axes = plt.subplots(1, len(present), figsize=(5 * len(present), 4), squeeze=False)
    rows = row_order(whole_runs)
    for ax, key in zip(axes.flat, present):
        for i, row in enumerate(rows):
            points: dict[int, list[float]] = {}
            for run in (r for r in whole_runs if r.row == row):
                for train_row in run.train_rows:
                    if key in train_row:
                        points.setdefault(train_row["tokens"], []).append(train_row[key])
            if points:
                tokens = sorted(points)
                ax.plot(tokens, [statistics.mean(points[t]) for t in tokens], color=f"C{i}", label=row)
        ax.set_title(DIAGNOSTICS[key])
        ax.set_xlabel("tokens")
        ax.grid(alpha=0.3)
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def main(argv: list[str] | None = None) -> str:
    parser = argparse.ArgumentParser(
        prog="python -m experiments.report", description="Tables and plots from training runs' logs.")
    parser.add_argument("paths", nargs="+", help="run folders, or folders to search for runs")
    parser.add_argument("--out", default="report", help="folder for report.md and the plots")
    parser.add_argument("--x", default="tokens,time,passes",
                        help="the curves' x-axes: tokens, time (training wall-clock) and/or passes (forward-backward "
                             "passes: MARS-exact's steps count two)")
    parser.add_argument("--gpu-rows", metavar="CARD:MODEL",
                        help="the measured GPU rows the projected GPU-time speedup reads (results/gpu/"
                             f"whole_steps.json), e.g. 'H200:llama-124m'; default: {GPU_MODEL} on the card that "
                             "measured AdamW and the most other optimizers on it")
    args = parser.parse_args(argv)
    with exit_on_input_error():
        x_axes = args.x.split(",")
        for x_axis in x_axes:
            if x_axis not in X_AXES:
                raise InputError(f"--x {x_axis}: choose among {', '.join(X_AXES)}")
        gpu = gpu_rows(read_whole_steps(), args.gpu_rows)
        for path in args.paths:
            if not os.path.isdir(path):
                raise InputError(f"{path} is not a folder; give run folders (out/<run>) or folders holding them")
        runs = find_runs(args.paths)
        if not runs:  # (SystemExit with the message: tests read it)
            sys.exit(f"error: no runs with a validation result (config.json and metrics.jsonl) under "
                     f"{', '.join(args.paths)}")
        try:
            os.makedirs(args.out, exist_ok=True)
        except OSError as e:
            raise InputError(f"cannot create the report folder {args.out} ({e.strerror}); give another --out") from e
    plot_files = []
    for x_axis in x_axes:
        plot_files.append(f"val_loss_vs_{x_axis}.png")
        plot_val_loss(runs, x_axis, os.path.join(args.out, plot_files[-1]))
    if plot_diagnostics(runs, os.path.join(args.out, "diagnostics.png")):
        plot_files.append("diagnostics.png")
    if plot_speedup(runs, os.path.join(args.out, "speedup.png")):
        plot_files.append("speedup.png")
    speedups: list[dict] = []
    text = report_markdown(runs, plot_files, gpu, speedups)
    if speedups:  # (the input of python -m experiments.tables)
        with open(os.path.join(args.out, "speedups.csv"), "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=list(speedups[0]), lineterminator="\n")
            writer.writeheader()
            writer.writerows(speedups)
    with open(os.path.join(args.out, "report.md"), "w") as f:
        f.write(text)
    print(text)
    return text


if __name__ == "__main__":
    main()
