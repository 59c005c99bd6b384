"""
The paper's tables and figures from training logs.

    python -m scripts.report out/gpt2_small_* out/gpt2_medium_* --out report
    python -m scripts.report out/mini_paper --out out/mini_paper/report    # every run below a folder

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
"""

import argparse
import glob
import json
import os
import dataclasses
import statistics
import sys
from dataclasses import dataclass, field

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402

from eval.paper import PAPER_COLUMNS, paper_scores  # noqa: E402
from config import TrainConfig  # noqa: E402
from optim import display_name, gradients_per_step  # noqa: E402
from runtime import InputError, exit_on_input_error  # noqa: E402

# The paper's row order; other optimizers (MARS-Lion, ...) follow in alphabetical order.
OPTIMIZER_ORDER = ["AdamW", "Muon", "MARS-exact", "MARS-approx"]
# What the report reads from each kind of metrics.jsonl row (other kinds are passed over)
ROW_KEYS = {"train": ("step", "ms_per_step"), "val": ("step", "tokens", "val_loss")}


@dataclass
class Run:
    path: str
    optimizer: str  # e.g. "MARS-approx"
    model: str  # e.g. "GPT-2 small", or the parameter count of a custom size
    num_params: int
    dataset: str
    budget: int  # tokens the run is set to train on
    total_iters: int
    seed: int
    learning_rate: float
    # (step, tokens, training seconds, val loss) per evaluation, in step order
    val: list[tuple[int, int, float, float]]
    passes_per_step: int = 1  # forward-backward passes over the batch per step (MARS-exact: 2)
    train_rows: list[dict] = field(default_factory=list)  # the logged training rows (diagnostics included)
    downstream: dict | None = field(default=None)  # lm-eval results, if the run was evaluated
    row: str = ""  # the table's row: the optimizer, and its learning rate in a sweep (see name_rows)
    protocol: str = ""  # how the budget was reached, for the column name (see paper_budget_views)
    past_budget: bool = False  # a paper-budget view whose run trained past the budget

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
    checkpoint) keeps its last row. A line cut short by a crash is skipped."""
    rows: dict[tuple[str, int], dict] = {}
    with open(path) as f:
        for number, line in enumerate(f, start=1):
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
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


def run_of(folder: str, info: dict, rows: list[dict]) -> Run | None:
    cfg = TrainConfig().to_dict() | info["config"]  # a run from before a key existed has its default
    clock = training_seconds([r for r in rows if r["type"] == "train"])
    val = []
    for row in (r for r in rows if r["type"] == "val"):
        seconds = max((s for step, s in clock if step <= row["step"]), default=0.0)
        val.append((row["step"], row["tokens"], seconds, row["val_loss"]))
    if not val:
        return None
    custom_size = any(cfg[k] for k in ("n_layer", "n_head", "n_embd"))
    model = f"{info['num_params'] / 1e6:.3g}M GPT" if custom_size else f"GPT-2 {cfg['model']}"
    downstream = None
    for results_file in sorted(glob.glob(os.path.join(folder, "*_lm_eval.json"))):
        downstream = read_json(results_file)
        if not isinstance(downstream, dict):
            raise InputError(f"{results_file} is not eval/harness.py's results; evaluate again or delete it")
    optimizer = display_name(cfg)
    protocol = "own schedule over the budget" if cfg["max_tokens"] else ""
    return Run(path=folder, optimizer=optimizer, model=model, num_params=info["num_params"],
               dataset=os.path.basename(os.path.normpath(cfg["data_dir"])) if cfg["data_dir"] else cfg["dataset"],
               budget=info["total_iters"] * cfg["total_batch_size"], total_iters=info["total_iters"],
               seed=cfg["seed"], learning_rate=cfg["learning_rate"], val=val, downstream=downstream, row=optimizer,
               protocol=protocol, passes_per_step=gradients_per_step(cfg),
               train_rows=[r for r in rows if r["type"] == "train"])


def find_runs(paths: list[str]) -> list[Run]:
    folders = []
    for path in paths:
        found = glob.glob(os.path.join(path, "**", "metrics.jsonl"), recursive=True)
        folders += [os.path.dirname(f) for f in sorted(found)]
    runs = [load_run(f) for f in dict.fromkeys(folders) if os.path.exists(os.path.join(f, "config.json"))]
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
    """Runs per column of the table (model size x token budget, and the dataset when they differ),
    columns ordered by model size, then budget."""
    with_dataset = len({r.dataset for r in runs}) > 1
    columns: dict[str, list[Run]] = {}
    for run in sorted(runs, key=lambda r: (r.dataset if with_dataset else "", r.num_params, r.budget)):
        protocol = f", {run.protocol}" if run.protocol else ""
        name = f"{run.model}{' ' + run.dataset if with_dataset else ''} ({format_tokens(run.budget)} tokens{protocol})"
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


def report_markdown(runs: list[Run], plot_files: list[str]) -> str:
    parts = ["# Results", "", "## Best validation loss", "", loss_table(runs), "",
             "Bold: the lowest of its column. Where a cell holds several runs (seeds): mean ± standard "
             "deviation of their best losses. *: not finished, best loss so far."]
    table = significance_table(runs)
    if table:
        parts += ["", "## Significance", "", "Welch's t-test (two-sided, unequal variances) on the best "
                  "validation loss of each seed: a p-value below 0.05 says the difference of the means is "
                  "unlikely to be seed noise.", "", table]
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
    parser = argparse.ArgumentParser(description="Tables and plots from training runs' logs.")
    parser.add_argument("paths", nargs="+", help="run folders, or folders to search for runs")
    parser.add_argument("--out", default="report", help="folder for report.md and the plots")
    parser.add_argument("--x", default="tokens,time,passes",
                        help="the curves' x-axes: tokens, time (training wall-clock) and/or passes (forward-backward "
                             "passes: MARS-exact's steps count two)")
    args = parser.parse_args(argv)
    with exit_on_input_error():
        x_axes = args.x.split(",")
        for x_axis in x_axes:
            if x_axis not in X_AXES:
                raise InputError(f"--x {x_axis}: choose among {', '.join(X_AXES)}")
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
    text = report_markdown(runs, plot_files)
    with open(os.path.join(args.out, "report.md"), "w") as f:
        f.write(text)
    print(text)
    return text


if __name__ == "__main__":
    main()
