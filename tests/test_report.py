"""experiments/report.py on synthetic runs: the paper's table (rows optimizers, columns model size x token
budget, seeds averaged, incomplete runs marked), a sweep's rows per learning rate, wall-clock time
from the logged ms/step with a resumed run's repeated steps, the downstream table, the plots, and the
token-equivalent speedup over AdamW (its curve's fit and inversion, the "> x" bound, the interval's
coverage) on synthetic curves with known answers, and the GPU time it projects from measured step times."""

import json
import math
import statistics

import numpy as np
import pytest

from optim import load_config
from config.cells import mini_recipes

from experiments import budget_ladder, rankings, report

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def write_run(folder, val_losses: list[float], total_iters: int = 100, last_step: int | None = None,
              num_params: int = 124_337_664, ms_per_step: float = 1000.0, **config) -> str:
    """A run folder as train.py leaves it: config.json, and metrics.jsonl with the given validation
    losses at evenly spaced steps from 0 to last_step (default: the end), a train row before each."""
    cfg = load_config([], base=dict(max_iters=total_iters, **config))
    folder.mkdir(parents=True)
    info = dict(config=cfg.to_dict(), num_params=num_params, total_iters=cfg.total_iters(), world_size=1)
    (folder / "config.json").write_text(json.dumps(info))
    last_step = cfg.total_iters() if last_step is None else last_step
    rows = []
    for i, loss in enumerate(val_losses):
        step = last_step * i // max(len(val_losses) - 1, 1)
        if step:
            rows.append(dict(type="train", step=step, tokens=step * cfg.total_batch_size, loss=loss + 0.1,
                             ms_per_step=ms_per_step, time=1e9 + step))
        rows.append(dict(type="val", step=step, tokens=step * cfg.total_batch_size, val_loss=loss, time=1e9 + step))
    (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(folder)


MARS = dict(optimizer="mars", mars_type="mars-adamw")
SMALL_5B = dict(model="small", max_tokens=5_000_000_000)  # 10173 steps of 480 x 1024 tokens


@pytest.mark.quick
def test_paper_table_with_seeds_budgets_and_an_incomplete_run(tmp_path):
    runs = tmp_path / "runs"
    write_run(runs / "adamw_s1", [11.0, 3.5, 3.2], optimizer="adamw", seed=1, **SMALL_5B)
    write_run(runs / "adamw_s2", [11.0, 3.4, 3.3], optimizer="adamw", seed=2, **SMALL_5B)
    write_run(runs / "mars_approx", [11.0, 3.3, 3.1], is_approx=True, **MARS, **SMALL_5B)
    write_run(runs / "mars_exact", [11.0, 3.15], last_step=5000, is_approx=False, **MARS, **SMALL_5B)
    write_run(runs / "muon_medium", [11.0, 2.9, 2.8], optimizer="muon", model="medium",
              max_tokens=20_000_000_000, num_params=354_551_808)
    write_run(runs / "just_started", [], optimizer="adamw")  # no evaluation yet: left out
    text = report.main([str(runs), "--out", str(tmp_path / "report")])

    assert ("|  | GPT-2 small (5B tokens, own schedule over the budget) "
            "| GPT-2 medium (20B tokens, own schedule over the budget) |\n"
            "|---|---|---|\n"
            "| AdamW | 3.250 ± 0.071 (n=2) | - |\n"
            "| Muon | - | **2.800** |\n"
            "| MARS-exact | 3.150* | - |\n"
            "| MARS-approx | **3.100** | - |\n") in text
    assert "## Incomplete runs\n\n- " + str(runs / "mars_exact") + ": step 5000 of 10173\n" in text
    assert "just_started" not in text and "Downstream" not in text
    for name in ("report.md", "val_loss_vs_tokens.png", "val_loss_vs_time.png"):
        assert (tmp_path / "report" / name).exists()
    for name in ("val_loss_vs_tokens.png", "val_loss_vs_time.png"):
        data = (tmp_path / "report" / name).read_bytes()
        assert data.startswith(PNG_MAGIC) and len(data) > 10_000
    assert (tmp_path / "report" / "report.md").read_text() == text


def test_100k_step_runs_fill_the_papers_token_columns_with_their_best_loss_by_then(tmp_path):
    # 100k steps of 491,520 tokens: evaluations at 0, 20k, 40k, 60k, 80k, 100k steps = 0, 9.8B, ... 49.2B tokens
    write_run(tmp_path / "adamw", [11.0, 3.6, 3.4, 3.3, 3.2, 3.1], total_iters=100_000, optimizer="adamw")
    write_run(tmp_path / "mars", [11.0, 3.5, 3.3, 3.25], last_step=60_000, total_iters=100_000, **MARS)
    text = report.main([str(tmp_path), "--out", str(tmp_path / "report")])
    runs = "in 100k-step runs) "
    assert (f"|  | GPT-2 small (5B tokens, best by then {runs}| GPT-2 small (20B tokens, best by then {runs}"
            f"| GPT-2 small (50B tokens, best by then {runs}|\n"
            "|---|---|---|---|\n"
            "| AdamW | **11.000** | 3.400 | **3.100** |\n"
            "| MARS-approx | **11.000** | **3.300** | 3.250* |\n") in text
    assert text.count(str(tmp_path / "adamw") + " |") == 1  # one row in the runs table, not one per column


def test_a_sweep_gets_a_row_per_learning_rate(tmp_path):
    for lr, loss in ((1e-3, 4.0), (2e-3, 3.8), (4e-3, 3.9)):
        write_run(tmp_path / f"adamw_{lr}", [11.0, loss], total_iters=10, optimizer="adamw", learning_rate=lr)
    write_run(tmp_path / "muon", [11.0, 3.7], total_iters=10, optimizer="muon", learning_rate=2e-2)
    table = report.loss_table(report.find_runs([str(tmp_path)]))
    assert [line.split(" | ")[0] for line in table.splitlines()[2:]] == [
        "| AdamW lr=0.001", "| AdamW lr=0.002", "| AdamW lr=0.004", "| Muon"]
    assert "| Muon | **3.700** |" in table


def test_resumed_run_keeps_the_last_rows_and_times_training_from_ms_per_step(tmp_path):
    folder = tmp_path / "run"
    write_run(folder, [11.0, 5.0, 4.0], total_iters=20, ms_per_step=500.0, optimizer="adamw")
    # Preempted after step 20's evaluation but before its checkpoint: steps 11-20 are redone.
    with open(folder / "metrics.jsonl", "a") as f:
        f.write(json.dumps(dict(type="train", step=20, tokens=0, loss=4.2, ms_per_step=2000.0, time=0)) + "\n")
        f.write(json.dumps(dict(type="val", step=20, tokens=0, val_loss=4.5, time=0)) + "\n")
        f.write('{"type": "val", "st')  # a line cut short by a crash
    run = report.load_run(str(folder))
    assert run.complete and run.best_val_loss == 4.5
    # 10 steps at 0.5 s, then 10 at 2 s (the redone steps replace the first attempt's)
    assert [seconds for _, _, seconds, _ in run.val] == [0.0, 5.0, 25.0]


def test_downstream_table_from_eval_results(tmp_path):
    folder = tmp_path / "xl_mars"
    write_run(folder, [11.0, 2.5], total_iters=10, model="xl", dataset="fineweb-edu", **MARS)
    results = {"results": {"arc_easy": {"acc,none": 0.6, "acc_norm,none": 0.55},
                           "boolq": {"acc,none": 0.625}}}
    (folder / "ckpt_lm_eval.json").write_text(json.dumps(results))
    table = report.downstream_table(report.find_runs([str(tmp_path)]))
    header, _, row = table.splitlines()
    assert header.startswith("| Optimizer | Model | ARC-E | ARC-C | BoolQ | HellaSwag |") and header.endswith("| Avg. |")
    # ARC-E reports acc_norm (55), BoolQ only acc (62.5); Avg. over the two
    assert row == ("| MARS-approx | GPT-2 xl (4.92M tokens, fineweb-edu) | 55.00 | - | 62.50 | - | - | - | - | - | - "
                   "| 58.75 |")


def test_no_runs_is_an_error(tmp_path):
    with pytest.raises(SystemExit, match="no runs"):
        report.main([str(tmp_path)])


def test_a_nan_validation_loss_is_a_damaged_file_named_and_nothing_is_written(tmp_path, capsys):
    write_run(tmp_path / "runs" / "ok", [11.0, 3.0], optimizer="adamw")
    write_run(tmp_path / "runs" / "damaged", [11.0, float("nan")], optimizer="adamw")  # (train.py stops instead)
    with pytest.raises(SystemExit, match="2"):
        report.main([str(tmp_path / "runs"), "--out", str(tmp_path / "report")])
    error = capsys.readouterr().err
    assert "damaged/metrics.jsonl: validation loss nan at step 100, which train.py never writes" in error
    assert not (tmp_path / "report").exists()


@pytest.mark.parametrize("tokens, text", [(5_000_232_960, "5B"), (49_152_000_000, "49.2B"), (61_440, "61.4K"), (512, "512")])
def test_token_counts_read_like_the_papers(tokens, text):
    assert report.format_tokens(tokens) == text


def student_t_two_sided_p(t: float, df: float) -> float:
    """2 * P(T > |t|) for Student's t with df degrees of freedom, by Simpson's rule on its density."""
    density = lambda x: math.gamma((df + 1) / 2) / (math.sqrt(df * math.pi) * math.gamma(df / 2)) * (
        1 + x * x / df) ** (-(df + 1) / 2)
    n, a = 20_000, abs(t)
    h = a / n
    inner = h / 3 * (density(0) + density(a) + sum((4 if i % 2 else 2) * density(i * h) for i in range(1, n)))
    return 2 * (0.5 - inner)


def test_significance_is_welchs_t_test_between_every_pair(tmp_path):
    losses = {"adamw": [3.20, 3.25, 3.22], "mars": [3.10, 3.12, 3.15]}
    for seed in range(3):
        write_run(tmp_path / f"adamw{seed}", [11.0, losses["adamw"][seed]], total_iters=10, optimizer="adamw",
                  seed=seed)
        write_run(tmp_path / f"mars{seed}", [11.0, losses["mars"][seed]], total_iters=10, seed=seed, **MARS)
    table = report.significance_table(report.find_runs([str(tmp_path)]))
    a, b = losses["adamw"], losses["mars"]
    va, vb = statistics.variance(a) / 3, statistics.variance(b) / 3
    t = (statistics.mean(a) - statistics.mean(b)) / math.sqrt(va + vb)
    df = (va + vb) ** 2 / (va**2 / 2 + vb**2 / 2)  # Welch-Satterthwaite
    row = table.splitlines()[2].split(" | ")
    assert row[1:3] == ["AdamW", "MARS-approx"]
    assert float(row[4]) == pytest.approx(t, abs=0.01)
    assert float(row[5]) == pytest.approx(student_t_two_sided_p(t, df), rel=1e-2)


BUDGETS = np.array([0.25, 0.5, 1, 2, 4]) * 1e6  # tokens: AdamW's ladder in the speedup tests


def power_law(tokens):
    """The synthetic AdamW curve the speedup tests know: L(D) = 2 + 0.5 (D / 1M)^-0.6."""
    return 2.0 + 0.5 * (tokens / 1e6) ** -0.6


def ladder_of(curve, spread=(-0.01, 0.0, 0.01)) -> dict[int, list[float]]:
    """Budget -> three seeds' losses whose mean lies on curve."""
    return {int(b): [float(curve(b)) + d for d in spread] for b in BUDGETS}


def test_power_law_fit_and_inversion_recover_a_known_curve():
    offset, amplitude, alpha = report.fit_power_law(BUDGETS, power_law(BUDGETS)[None, :])
    assert (offset[0], amplitude[0], alpha[0]) == pytest.approx((2.0, 0.5, 0.6), rel=1e-3)
    curve = report.AdamWCurve.of(ladder_of(power_law))
    assert curve.power_law and curve.misfit_p > 0.99 and "saturating power law" in curve.describe()
    # an optimizer reaching in 0.5M tokens what AdamW reaches in 1.5M: 3x the data
    result = report.token_speedup(curve, [float(power_law(1.5e6))] * 3, int(0.5e6))
    assert result.value == pytest.approx(3.0, rel=1e-3)
    assert result.low < 3.0 < result.high  # the seeds' spread, through both sides
    assert result.text().startswith("3x (")


def test_the_interpolation_serves_where_no_power_law_fits():
    """A straight line in log tokens is no saturating power law (alpha runs to 0): interpolation, exact
    for such a line; a kink the seeds' noise cannot explain is refused by the F-test."""
    line = lambda tokens: 3.0 - 0.2 * np.log(tokens / 1e6)
    curve = report.AdamWCurve.of(ladder_of(line))
    assert not curve.power_law and curve.misfit_p is None and "no saturating power law fits" in curve.describe()
    assert report.token_speedup(curve, [float(line(1.5e6))] * 3, int(1e6)).value == pytest.approx(1.5)
    kinked = lambda tokens: power_law(tokens) + 0.1 * (tokens == 1e6)
    curve = report.AdamWCurve.of(ladder_of(kinked, spread=(-0.001, 0.0, 0.001)))
    assert not curve.power_law and curve.misfit_p < report.FIT_P and "misfit" in curve.describe()
    # the interpolation is monotone: a budget that did worse than a smaller one does not bend it back
    worse_at_the_end = {**ladder_of(line), int(4e6): [5.0, 5.0, 5.0]}
    envelope = report.AdamWCurve.of(worse_at_the_end).loss(BUDGETS)
    assert list(envelope) == pytest.approx(list(line(BUDGETS[:4])) + [float(line(2e6))])


def test_a_speedup_past_the_ladder_is_a_bound_not_a_number():
    curve = report.AdamWCurve.of(ladder_of(power_law))
    # below AdamW's loss at its largest budget (4M tokens), from 1M tokens: more than 4x, no more is known
    beyond = report.token_speedup(curve, [1.5, 1.51, 1.49], int(1e6))
    assert beyond.value == math.inf and beyond.text() == "> 4x (> 4)"
    # above AdamW's loss at its smallest budget (0.25M), from 1M tokens: less than 0.25x
    short = report.token_speedup(curve, [4.0, 4.01, 3.99], int(1e6))
    assert short.value == 0.0 and short.text() == "< 0.25x (< 0.25)"
    # just inside the largest budget: a number, its interval open at the top
    edge = report.token_speedup(curve, [float(power_law(3.9e6)) + d for d in (-0.01, 0.0, 0.01)], int(1e6))
    assert edge.value == pytest.approx(3.9, rel=1e-3) and edge.text().endswith("to > 4)")


@pytest.mark.parametrize("curve, speedup", [(power_law, 2.0), (lambda t: 2.4 - 0.36 * np.log(t / 1e6), 2.8)],
                         ids=["power law", "straight in log tokens"])
def test_the_interval_covers_the_true_speedup_on_synthetic_seeds(curve, speedup):
    """Ladders of three noisy seeds a budget around a known curve (a saturating one, and one like the mini
    reproduction's, which the interpolation serves), an optimizer of three seeds with a known speedup: the
    95% interval covers it at least 93% of the time (it is conservative, see report.draw_means), and stays
    narrow enough to say something (a median high / low under 1.6)."""
    rng = np.random.default_rng(0)
    hits, widths = 0, []
    trials = 150
    for trial in range(trials):
        ladder = {int(b): list(curve(b) + 0.015 * rng.standard_normal(3)) for b in BUDGETS}
        losses = list(curve(speedup * 1e6) + 0.015 * rng.standard_normal(3))
        result = report.token_speedup(report.AdamWCurve.of(ladder), losses, int(1e6), draws=400, seed=trial)
        hits += result.low <= speedup <= result.high
        widths.append(result.high / result.low)
    assert hits / trials >= 0.93
    assert statistics.median(widths) < 1.6


def test_report_prices_each_optimizer_in_adamws_tokens(tmp_path):
    """Through report.main: AdamW run to the end of its own schedule at five budgets (the ladder), MARS at
    one; the speedup section, its figure, and a setting without a ladder saying so."""
    steps = [8, 16, 32, 64, 128]  # x 491,520 tokens a step: 3.9M to 62.9M tokens
    for total_iters in steps:
        for seed, d in enumerate((-0.01, 0.0, 0.01)):
            loss = float(power_law(total_iters * 491_520)) + d
            write_run(tmp_path / f"adamw{total_iters}_{seed}", [11.0, loss], total_iters=total_iters,
                      optimizer="adamw", seed=seed)
    mars = [float(power_law(3 * 32 * 491_520)) + d for d in (-0.01, 0.0, 0.01)]  # AdamW's loss at 3x its tokens
    for seed, loss in enumerate(mars):
        write_run(tmp_path / f"mars{seed}", [11.0, loss], total_iters=32, seed=seed, **MARS)
    write_run(tmp_path / "muon_medium", [11.0, 2.9], total_iters=10, optimizer="muon", model="medium",
              num_params=354_551_808)
    text = report.main([str(tmp_path), "--out", str(tmp_path / "report")])

    assert "## Token-equivalent speedup over AdamW" in text
    assert "AdamW's curve: a saturating power law fitted to the budgets' means by least squares" in text
    runs = report.find_runs([str(tmp_path)])
    curve = report.AdamWCurve.of(report.adamw_ladder([r for r in runs if r.optimizer == "AdamW"]))
    expected = report.token_speedup(curve, mars, 32 * 491_520)
    assert expected.value == pytest.approx(3.0, rel=1e-3)
    # beside it, the GPU time it projects on the default rows (results/gpu/whole_steps.json's GPT-2 small), the
    # column named as a projection from those rows (the numbers: the next test's synthetic rows)
    gpu = report.gpu_rows(report.read_whole_steps())
    adamw_ms, mars_ms = (gpu.rows[name]["whole_step_ms"] for name in ("AdamW", "MARS-approx"))
    projected = report.projected_gpu_speedup(expected, adamw_ms, mars_ms)
    assert gpu.model == "GPT-2 small" and projected.value == pytest.approx(3.0 * adamw_ms / mars_ms, rel=1e-3)
    header = gpu.header(["AdamW", "MARS-approx"])
    assert header.startswith(f"projected GPU-time speedup ({gpu.card}, GPT-2 small, 20") and header.endswith(" rows)")
    assert f"| speedup (95% interval) | {header} | seeds |" in text
    assert (f"| MARS-approx | 15.7M | {statistics.mean(mars):.4f} | 47.2M | {expected.text()} | {projected.text()} "
            "| 3 |") in text
    assert f"| AdamW | 15.7M | {power_law(32 * 491_520):.4f} | 15.7M | 1x (" in text  # the curve through its own point
    assert (f"GPU rows: {gpu.card}, GPT-2 small, {gpu.setting}; whole step ms: AdamW {adamw_ms:g}, "
            f"MARS-approx {mars_ms:g}") in text
    assert "No speedup: AdamW ran to the end of its own schedule at 0 budget(s) here (none)" in text
    assert (tmp_path / "report" / "speedup.png").read_bytes().startswith(PNG_MAGIC)
    with pytest.raises(SystemExit, match="2"):  # a card without rows: refused by name (report.gpu_rows below)
        report.main([str(tmp_path), "--out", str(tmp_path / "report"), "--gpu-rows", "A100:GPT-2 small"])


def test_a_run_from_a_checkpoint_is_never_a_rung_of_adamw_from_scratch(tmp_path, capsys):
    """AdamW's ladder from scratch, and an AdamW run started from Hugging Face weights (init_from=hf:...) at one of
    its budgets with a far lower loss: the report groups by origin, so that run is a setting and a column of its own,
    never a seed of the ladder's rung nor the best AdamW cell beside runs from scratch. Folders it leaves out (no
    metrics.jsonl, no evaluation yet) and a line cut short are named on stderr."""
    for total_iters in (8, 16, 32, 64, 128):
        for seed, d in enumerate((-0.01, 0.0, 0.01)):
            write_run(tmp_path / f"adamw{total_iters}_{seed}", [11.0, float(power_law(total_iters * 491_520)) + d],
                      total_iters=total_iters, optimizer="adamw", seed=seed)
    tuned = write_run(tmp_path / "adamw_from_gpt2", [3.0, 2.0], total_iters=32, optimizer="adamw")
    info = json.loads((tmp_path / "adamw_from_gpt2" / "config.json").read_text())
    info["config"]["init_from"] = "hf:gpt2"
    (tmp_path / "adamw_from_gpt2" / "config.json").write_text(json.dumps(info))
    (tmp_path / "not_started").mkdir()
    (tmp_path / "not_started" / "config.json").write_text(json.dumps(info))
    with open(tmp_path / "adamw8_0" / "metrics.jsonl", "a") as f:
        f.write('{"type": "val", "st')  # (a crash while a row was written)
    runs = report.find_runs([str(tmp_path)])
    assert f"left out {tmp_path / 'not_started'}: no metrics.jsonl" in capsys.readouterr().err
    settings = report.speedup_settings(runs)
    (from_gpt2,) = [runs for name, runs in settings.items() if "from hf:gpt2" in name]
    assert [r.path for r in from_gpt2] == [tuned]
    (scratch,) = [runs for name, runs in settings.items() if "from hf:" not in name]
    assert report.adamw_ladder(scratch)[32 * 491_520] == pytest.approx(
        [float(power_law(32 * 491_520)) + d for d in (-0.01, 0.0, 0.01)])
    columns = report.group_by_setting(runs)
    assert [len(c) for name, c in columns.items() if "from hf:gpt2" in name] == [1]
    report.read_rows(str(tmp_path / "adamw8_0" / "metrics.jsonl"))
    assert "line 4: cut short" in capsys.readouterr().err


def whole_step(card: str, date: str, optimizer: str, ms: float, micro_batch: int = 16) -> dict:
    """A row of results/gpu/whole_steps.json."""
    return dict(card=card, date=date, model="GPT-2 small", optimizer=optimizer, micro_batch=micro_batch,
                sequence_length=1024, setup="one process", whole_step_ms=ms, fwd_bwd_ms=ms / 2,
                optimizer_step_ms=ms / 4, source=f"{card.lower()}_{date}.md")


def test_the_projected_gpu_time_speedup_is_the_data_speedup_times_adamws_step_over_the_optimizers(tmp_path):
    """On a synthetic row set: each optimizer's newest row on the chosen card, in AdamW's setting, scales the
    speedup, its interval's ends and its bounds by AdamW's whole step over its own; an optimizer without a row
    there gets an empty cell; the default card is the one that measured the most optimizers beside AdamW."""
    rows = [whole_step("X1", "2026-01-01", "AdamW", 40.0), whole_step("X1", "2026-01-02", "AdamW", 30.0),
            whole_step("X1", "2026-01-01", "Muon", 50.0), whole_step("X1", "2026-01-02", "Muon", 60.0),
            whole_step("X1", "2026-01-01", "Lion", 33.0),
            whole_step("X1", "2026-01-03", "MARS-exact", 20.0, micro_batch=32),  # another setting: no ratio
            whole_step("X2", "2026-02-01", "AdamW", 25.0), whole_step("X2", "2026-02-01", "SOAP", 100.0)]
    gpu = report.gpu_rows(rows)
    assert (gpu.card, gpu.setting) == ("X1", "micro-batch 16 x 1024, one process")  # two optimizers beside AdamW
    speedup = report.Speedup(2.8, 2.6, 3.0, 0.25, 4.0)
    muon = gpu.projection("Muon", speedup)  # x 30 / 60: the newest rows
    assert (muon.value, muon.low, muon.high) == pytest.approx((1.4, 1.3, 1.5)) and muon.text() == "1.4x (1.3 to 1.5)"
    past = gpu.projection("Muon", report.Speedup(math.inf, 3.2, math.inf, 0.25, 4.0))  # '> 4x' stays a bound
    assert past.text() == "> 2x (1.6 to > 2)"
    assert gpu.projection("AdamW", speedup).text() == speedup.text()
    assert gpu.projection("MARS-exact", speedup) is None and gpu.projection("Kron", speedup) is None
    assert gpu.header(["Muon", "Kron"]) == "projected GPU-time speedup (X1, GPT-2 small, 2026-01-02 rows)"
    assert gpu.header(["Lion"]) == "projected GPU-time speedup (X1, GPT-2 small, 2026-01-01 and 2026-01-02 rows)"
    other = report.gpu_rows(rows, "x2: gpt-2 SMALL")
    assert other.projection("SOAP", speedup).text() == "0.7x (0.65 to 0.75)"  # x 25 / 100
    with pytest.raises(report.InputError, match="choose among X1:GPT-2 small, X2:GPT-2 small"):
        report.gpu_rows(rows, "X3:GPT-2 small")

    # the report's table: the labelled column beside the speedup, an unmeasured optimizer's cell empty
    for total_iters in (8, 16, 32, 64, 128):
        for seed, d in enumerate((-0.01, 0.0, 0.01)):
            write_run(tmp_path / f"adamw{total_iters}_{seed}", [11.0, float(power_law(total_iters * 491_520)) + d],
                      total_iters=total_iters, optimizer="adamw", seed=seed)
    losses = [float(power_law(2 * 32 * 491_520)) + d for d in (-0.01, 0.0, 0.01)]  # AdamW's loss at 2x its tokens
    for name in ("muon", "kron"):
        for seed, loss in enumerate(losses):
            write_run(tmp_path / f"{name}{seed}", [11.0, loss], total_iters=32, optimizer=name, seed=seed)
    runs = report.find_runs([str(tmp_path)])
    data = report.token_speedup(report.AdamWCurve.of(report.adamw_ladder(runs)), losses, 32 * 491_520)
    speedups = []
    text = "\n".join(report.speedup_section(runs, gpu, speedups))
    table = text[text.index("| optimizer | tokens |"):].splitlines()
    # and as speedups.csv's rows (experiments.tables' input): AdamW at 1x the reference, the others' full values
    by_name = {row["optimizer"]: row for row in speedups}
    assert sorted(by_name) == ["AdamW", "Kron", "Muon"]
    assert (by_name["AdamW"]["speedup"], by_name["AdamW"]["low"]) == (1, "")
    assert float(by_name["Muon"]["speedup"]) == pytest.approx(data.value, rel=1e-5)
    assert float(by_name["Muon"]["low"]) == pytest.approx(data.low, rel=1e-5)
    assert table[0].endswith("| speedup (95% interval) | projected GPU-time speedup (X1, GPT-2 small, 2026-01-02 "
                             "rows) | seeds |")
    projected = gpu.projection("Muon", data)
    assert data.value == pytest.approx(2.0, rel=1e-3) and projected.value == pytest.approx(1.0, rel=1e-3)
    loss = f"{statistics.mean(losses):.4f}"
    assert f"| Muon | 15.7M | {loss} | 31.5M | {data.text()} | {projected.text()} | 3 |" in table
    assert f"| Kron | 15.7M | {loss} | 31.5M | {data.text()} |  | 3 |" in table  # not measured: empty
    assert "GPU rows: X1, GPT-2 small, micro-batch 16 x 1024, one process; whole step ms: AdamW 30, Muon 60" in text


def test_curves_against_passes_count_mars_exact_twice_and_band_the_seeds(tmp_path):
    write_run(tmp_path / "exact", [11.0, 4.0, 3.0], total_iters=10, is_approx=False, **MARS)
    write_run(tmp_path / "approx1", [11.0, 4.2, 3.3], total_iters=10, seed=1, is_approx=True, **MARS)
    write_run(tmp_path / "approx2", [11.0, 4.4, 3.1], total_iters=10, seed=2, is_approx=True, **MARS)
    runs = {r.path.rsplit("/", 1)[-1]: r for r in report.find_runs([str(tmp_path)])}
    assert report.curve(runs["exact"], "passes") == [(0, 11.0), (10, 4.0), (20, 3.0)]
    assert report.curve(runs["approx1"], "passes") == [(0, 11.0), (5, 4.2), (10, 3.3)]
    text = report.main([str(tmp_path), "--out", str(tmp_path / "r"), "--x", "passes"])
    assert "val_loss_vs_passes.png" in text and (tmp_path / "r" / "val_loss_vs_passes.png").exists()


def test_batch_ladder_report_reads_the_tuned_point_of_each_size(tmp_path):
    """experiments/batch_ladder.py's report on synthetic runs: the tuned rate is the tuning seed's best, the
    table shows its seeds' mean and whether the rate is bracketed, Welch's test of MARS against AdamW at
    that size, MARS-exact at equal passes, the tuning, and the diagnostics' means."""
    from experiments import batch_ladder

    def ladder_run(recipe, lr, seed, losses, last_step=None, **config):
        folder = tmp_path / recipe / f"learning_rate={lr}" / f"seed{seed}"
        write_run(folder, losses, total_iters=8, last_step=last_step, seed=seed, learning_rate=float(lr),
                  total_batch_size=4096, micro_batch_size=16, block_size=256, **config)
        rows = [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]
        for row in rows:
            if row["type"] == "train":
                row["clip_rate"] = 0.25 * (seed - 1)
                if config.get("optimizer") == "mars":
                    row.update({"mars/grad_cos": 0.1 * seed, "mars/clipped_fraction": 0.5})
        (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))

    ladder_run("adamw@4K", "0.002", 1, [5.0, 3.0, 2.50])
    ladder_run("adamw@4K", "0.004", 1, [5.0, 3.0, 2.30])  # the tuned rate; the tuning seed is left out
    ladder_run("adamw@4K", "0.004", 2, [5.0, 3.0, 2.40])
    ladder_run("adamw@4K", "0.004", 3, [5.0, 3.0, 2.42])
    ladder_run("adamw@4K", "0.004", 4, [5.0, 3.0, 2.44])
    ladder_run("adamw@4K", "0.008", 1, [5.0, 9.0], last_step=4)
    (tmp_path / "adamw@4K" / "learning_rate=0.008" / "seed1" / "diverged.txt").write_text("nan")  # brackets 0.004
    ladder_run("mars_exact@4K", "0.0015", 1, [5.0, 3.0, 2.5])
    ladder_run("mars_exact@4K", "0.006", 1, [5.0, 4.0], last_step=4)  # unfinished: brackets nothing yet
    for seed, loss in ((1, 2.2), (2, 2.30), (3, 2.31), (4, 2.35)):
        ladder_run("mars_exact@4K", "0.003", seed, [5.0, 2.89 + seed / 100, loss], optimizer="mars", is_approx=False)
    text = batch_ladder.report(str(tmp_path))

    assert "| adamw | 4K | 0.004 | 2.4200 ± 0.0200 |  | - | 3 |" in text  # bracketed by 0.002 and a divergence
    # at equal passes: the evaluation at half the tokens (step 4 of 8): 2.91, 2.92, 2.93
    # a finished rate below 0.003, an unfinished one above: not bracketed
    assert "| mars_exact | 4K | 0.003 (edge) | 2.3200 ± 0.0265 | 2.9200 | - | 3 |" in text
    # one AdamW budget per size: no curve to price MARS in AdamW's tokens, and the report says where
    assert "AdamW's runs do not allow it at 4K (1 budget: 32.8K), 16K (0 budgets), 64K (0 budgets)" in text
    difference, t, p = report.welch([2.30, 2.31, 2.35], [2.40, 2.42, 2.44])
    assert f"| 4K | mars_exact | {difference:+.4f} | {t:.2f} | {p:.3g} |" in text and p < 0.05
    assert "| mars_exact | 4K | 0.300 | 0.500 | 0.500 |" in text  # cos 0.2, 0.3, 0.4; clip rate 0.25, 0.5, 0.75
    assert "| adamw | 4K |  |  | 0.500 |" in text
    assert "| adamw | 4K | 0.002: 2.500, **0.004: 2.300**, 0.008: inf |" in text  # the tuning; inf: diverged
    assert (tmp_path / "report" / "ladder.png").read_bytes().startswith(PNG_MAGIC)


def test_batch_ladder_widens_a_grid_past_the_edge_its_best_rate_sits_on():
    """Tuning goes on past an edge: a best rate at the top adds double the top, at the bottom half the
    bottom; an interior best leaves the grid as it was (which ends the tuning)."""
    from experiments import batch_ladder

    grid = [1e-3, 2e-3, 4e-3]
    assert batch_ladder.widened(grid, 4e-3) == [1e-3, 2e-3, 4e-3, 8e-3]
    assert batch_ladder.widened(grid, 1e-3) == [5e-4, 1e-3, 2e-3, 4e-3]
    assert batch_ladder.widened(grid, 2e-3) == grid
    assert batch_ladder.widened(grid, None) == grid  # nothing finished: nothing to follow


def test_the_budget_ladder_stretches_adamws_schedule_to_each_budget():
    """Each rung of experiments/budget_ladder.py is AdamW's mini recipe run to factor x the mini budget, its
    warmup and evaluations at the same fractions of the run; a factor that does not divide the schedule
    is refused."""
    recipe = [budget_ladder.BASE, *mini_recipes()[budget_ladder.RECIPE].args.split()]
    base = load_config(recipe)
    assert budget_ladder.rung_name(1) == "adamw" and budget_ladder.rung_name(0.25) == "adamw@0.25x"
    for factor in budget_ladder.FACTORS:
        cfg = load_config([*recipe, *budget_ladder.stretched(recipe, factor).split()])
        assert cfg.max_iters * cfg.total_batch_size == factor * base.max_iters * base.total_batch_size
        assert cfg.eval_interval / cfg.max_iters == base.eval_interval / base.max_iters
        assert cfg.warmup_iters / cfg.max_iters == pytest.approx(base.warmup_iters / base.max_iters, abs=0.01)
        assert cfg.learning_rate == base.learning_rate and cfg.total_batch_size == base.total_batch_size
    with pytest.raises(ValueError, match="does not divide the mini schedule"):
        budget_ladder.stretched(recipe, 0.3)


def test_the_budget_ladders_own_arguments_win_over_the_recipe(monkeypatch):
    """The mini Llama's ladder at the AdamW point tuned on it: config files and overrides after the folder go
    after the recipe's config in every rung (its beta1 0.9 loses to --beta1=0.85), and each rung's schedule is
    stretched from what they resolve to (a warmup of 100, not the recipe's 150)."""
    captured = []
    monkeypatch.setattr(budget_ladder.sweep, "main", captured.append)
    monkeypatch.setattr(budget_ladder.report, "main", lambda argv: None)
    budget_ladder.main(["out/x", "--jobs", "2", "config/mini_llama.py", "--beta1=0.85", "--warmup_iters=100"])
    argv = captured[0]
    assert argv[:6] == ["out/x", budget_ladder.BASE, "--jobs", "2", "--seeds", "1,2,3"]
    rungs = dict(value.partition("=")[::2] for option, value in zip(argv[6::2], argv[7::2]) if option == "--recipe")
    assert sorted(rungs) == sorted(budget_ladder.rung_name(f) for f in budget_ladder.FACTORS)
    for factor in budget_ladder.FACTORS:
        cfg = load_config([budget_ladder.BASE, *rungs[budget_ladder.rung_name(factor)].split()])
        assert (cfg.model, cfg.hyperparameters.beta1) == ("llama-124m", 0.85)
        assert (cfg.max_iters, cfg.warmup_iters) == (256 * factor, 100 * factor)


@pytest.mark.quick
def test_the_report_ranks_its_optimizers_beside_the_published_ones(tmp_path):
    """Kendall's tau between the mean best losses of the runs' setting and Wen et al.'s 130M ranking, over the
    optimizers both hold: four of them here, one pair swapped against theirs (tau = (5 - 1) / 6)."""
    losses = {"adamw": 3.30, "nadamw": 3.20, "lion": 3.50, "muon": 3.00}  # Wen: Muon, AdamW, NAdamW, Lion
    for name, loss in losses.items():
        for seed in (1, 2):
            write_run(tmp_path / f"{name}{seed}", [11.0, loss + 0.01 * seed], total_iters=10, optimizer=name, seed=seed)
    lines = report.ranking_section(report.find_runs([str(tmp_path)]))
    row = next(line for line in lines if line.startswith("| Wen et al."))
    assert "| Muon > AdamW > NAdamW > Lion | Muon > NAdamW > AdamW > Lion | 0.67 " in row, row
    assert rankings.agreement({"AdamW": 1.0, "Muon": 0.5}, rankings.PUBLISHED["Wen et al. 130M, 1x Chinchilla"]) is None


@pytest.mark.quick
def test_a_ranking_in_tiers_counts_a_tiers_members_as_tied():
    """Semenov et al. rank in tiers (their text, not their figures): which of two optimizers of one tier is
    ahead here changes nothing, and the row shows the tiers."""
    ours = {"AdEMAMix": 1.0, "SOAP": 2.0, "Moonlight": 2.5, "AdamW": 3.0, "Lion": 4.0}
    swapped = dict(ours, SOAP=2.5, Moonlight=2.0)
    theirs = next(ranking for name, ranking in rankings.PUBLISHED.items() if name.startswith("Semenov"))
    (common, tau, _), (_, tau_swapped, _) = rankings.agreement(ours, theirs), rankings.agreement(swapped, theirs)
    assert set(common) == set(ours) and tau == tau_swapped and 0.9 < tau < 1.0  # (tau-b: ties keep it below 1)
    assert "| AdEMAMix > Moonlight, SOAP > AdamW > Lion |" in "\n".join(rankings.agreement_lines(ours))
    assert rankings.agreement({"ADOPT": 1.0, "Moonlight": 2.0, "SOAP": 3.0}, theirs) is None  # one tier: no ranking


@pytest.mark.quick
def test_each_other_reading_of_a_ranking_has_its_own_tau_beside_ours():
    """Semenov et al.'s tiers are our reading of their text: each other reading (results/rankings/semenov2025.json)
    is a row of its own after ours, its tiers changed as it says (the tuned four: 0.91 under ours, 0.71 with AdamW
    level with SOAP and D-Muon, 0.22 with basic Muon ranked behind AdamW)."""
    tuned = {"Muon": 1.740, "Moonlight": 1.810, "SOAP": 2.061, "AdamW": 2.281, "MARS-approx": 2.297}
    lines = rankings.agreement_lines(tuned)
    semenov = [i for i, line in enumerate(lines) if line.startswith("| Semenov")]
    assert len(semenov) == 1 and "(tiers: our reading of their text)" in lines[semenov[0]]
    assert "| 0.91 (p = 0.071) |" in lines[semenov[0]]
    others = {line.split(" | ")[0].removeprefix("| the same, read instead: "): line.split(" | ")[-1]
              for line in lines[semenov[0] + 1:] if line.startswith("| the same, read instead:")}
    assert others["AdamW level with SOAP and D-Muon"].startswith("0.71 ")
    assert others["basic Muon ranked, behind AdamW"].startswith("0.22 ")
    assert others["ADOPT below AdamW"].startswith("0.91 ")  # (ADOPT is not among the four: the same tau)


@pytest.mark.quick
def test_a_runs_model_label_names_its_architecture(tmp_path):
    """A preset's run is labelled by its architecture and size ("GPT-2 small", "Llama 124m", never "GPT-2
    llama-124m"); a run at a shape of its own by its parameter count and architecture ("0.469M Llama")."""
    cases = {"gpt2": ({}, "GPT-2 small"), "llama": (dict(model="llama-124m"), "Llama 124m"),
             "tiny_gpt2": (dict(n_layer=4, n_head=4, n_embd=96), "0.493M GPT-2"),
             "tiny_llama": (dict(model="llama-124m", n_layer=4, n_head=4, n_embd=96), "0.469M Llama")}
    for name, (config, _) in cases.items():
        write_run(tmp_path / name, [11.0, 3.0], total_iters=10, num_params=469_000 if "llama" in name else 493_000,
                  **config)
    labels = {run.path.rsplit("/", 1)[-1]: run.model for run in report.find_runs([str(tmp_path)])}
    assert labels == {name: label for name, (_, label) in cases.items()}
