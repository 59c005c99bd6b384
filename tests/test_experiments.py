"""The layout of issue 62: the experiment tools as the experiments package (each `python -m experiments.<tool>`,
its usage line saying so, a file run directly naming the command), the published rankings as
data files with their sources, and the generated tables of the README and docs/reproducing.md equal to what
`python -m experiments.tables` makes of the committed results."""

import json
import os
import shutil
import subprocess

import pytest

from conftest import PYTHON, REPO

TOOLS = ("sweep", "tune", "report", "batch_ladder", "budget_ladder", "rankings", "tables")


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([PYTHON, *args], capture_output=True, text=True, cwd=REPO, timeout=300)


def test_a_tool_run_as_a_file_names_the_command():
    for tool in ("sweep", "tables"):
        proc = run(f"experiments/{tool}.py")
        assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
        assert f"run python -m experiments.{tool} from the repository root" in proc.stderr, proc.stderr


@pytest.mark.quick
def test_every_tool_runs_as_a_module_and_its_usage_line_says_so():
    for tool in TOOLS:
        proc = run("-m", f"experiments.{tool}", "--help")
        assert proc.returncode == 0, (tool, proc.stderr)
        if tool != "rankings":  # (its help is its docstring, which shows the command)
            assert proc.stdout.startswith(f"usage: python -m experiments.{tool} "), proc.stdout[:200]
        assert f"python -m experiments.{tool}" in proc.stdout


def test_scripts_holds_only_launchers():
    files = [p.relative_to(REPO / "scripts") for p in (REPO / "scripts").rglob("*") if p.is_file()
             and "__pycache__" not in p.parts]
    assert sorted(str(f) for f in files if f.suffix not in (".sh", ".sbatch")) == [], files


@pytest.mark.quick
def test_the_published_rankings_are_data_with_their_sources():
    from experiments import rankings

    files = sorted((REPO / "results" / "rankings").glob("*.json"))
    assert [f.name for f in files] == ["modded_nanogpt_track3.json", "semenov2025.json", "wen2025.json"]
    for file in files:
        record = json.loads(file.read_text())
        assert record["url"].startswith(("https://arxiv.org/abs/", "https://github.com/")) and record["citation"]
        assert record["source"] and record["value"] in ("loss", "tier", "steps")
    assert list(rankings.PUBLISHED) == ["Wen et al. 130M, 1x Chinchilla",
                                        "Semenov et al. 124M, to 16.8B tokens (tiers: our reading of their text)",
                                        "modded-nanogpt optimization track (GPT-2 small, steps to 3.28)"]
    wen, semenov, track = rankings.PUBLISHED.values()
    assert track["Muon"] == track["NorMuon"] == 3250 and track["Shampoo"] == 4100 and len(track) == 6
    assert wen["Muon"] == 3.464 and wen["MARS-approx"] == 3.537 and len(wen) == 11
    assert semenov["AdEMAMix"] == 1 and semenov["AdamW"] == 3 and len(semenov) == 11
    usage = run("-m", "experiments.rankings", "--help").stdout
    assert all(f.name in usage for f in files), usage  # (its help names every ranking it reads)


@pytest.mark.quick
def test_the_readmes_tables_are_what_the_command_makes_of_the_results():
    """Every marked region of README.md and docs/ equals experiments.tables' rendering of the committed
    results; the README has the mini table's region, and --check passes."""
    from experiments import tables

    readme = (REPO / "README.md").read_text()
    assert "<!-- table:mini -->\n| optimizer | learning rate only | speedup over AdamW | projected GPU-time" in readme
    for page in tables.pages():
        text = open(page).read()
        assert tables.render(text) == text, f"{page}: run python -m experiments.tables"
    proc = run("-m", "experiments.tables", "--check")
    assert proc.returncode == 0 and "every table is up to date" in proc.stdout, proc.stdout + proc.stderr


DOCS_TABLES = {
    "mini_lr": "| 0.49M GPT, 1.05M byte tokens | best val loss | learning rate | vs AdamW (Welch, p) |",
    "llama": "| optimizer | mini recipe | GPT-2 mini | Llama mini | vs the Llama's AdamW (Welch, p) |",
    "llama_tuned": "| optimizer | GPT-2 recipe on the Llama | runs | what tuning on the Llama moved | tuned, seeds 1-4 |",
    "tuned": "| optimizer | learning rate only | speedup over AdamW | projected GPU-time speedup",
    "ladder": "| best val loss (nats/byte), tuned lr | 4K tokens/step (1,024 steps) |",
    "new_2026": "| optimizer | mini recipe | learning rate | best val loss | vs the tuned AdamW (Welch, p) |",
    "new_2026_llama": "| optimizer | mini recipe | GPT-2 mini | Llama mini | vs the tuned Llama AdamW (Welch, p) |",
    "tuned_baselines": "| optimizer | search runs | tuned, seeds 1-4 | over the tuned AdamW | Welch p | core-hours |",
    "compare": "| row (results/compare/) | tuned by the protocol, seeds 1-4 | speedup over the tuned AdamW |",
    "rankings": "| benchmark | their order, best first | here | Kendall's tau (p) |",
    "trend": "| optimizer | the mini (0.44M, 2.4 tokens per parameter) | 4x the tokens",
}


def regions(text: str) -> dict[str, str]:
    from experiments import tables

    return {match[2]: match[3] for match in tables.REGION.finditer(text)}


@pytest.mark.quick
def test_the_reproducing_pages_tables_are_generated():
    """docs/reproducing.md's learning-rate-only, tuned, tuned baselines', compare, ranking, mini Llama (carried over and tuned
    on it), ladder, 2026 (GPT-2 and Llama) and trend tables are marked regions, each what experiments.tables makes of the committed results (a row of each
    pinned), and an emptied region is rewritten to the same bytes."""
    from experiments import tables

    text = (REPO / "docs" / "reproducing.md").read_text()
    found = regions(text)
    assert sorted(found) == sorted(DOCS_TABLES), found.keys()
    for name, header in DOCS_TABLES.items():
        assert found[name].startswith(header), (name, found[name][:200])
        assert tables.TABLES[name]() == found[name], f"{name}: run python -m experiments.tables"
    emptied = tables.REGION.sub(lambda m: m[1] + m[4], text)
    assert emptied != text and tables.render(emptied) == text
    assert "| MARS-exact | 2.398 ± 0.020 | 3e-3 | +0.011, p = 0.44 | 0.97x (0.82 to 1.16) | 0.44x (0.37 to 0.53) |" \
        in found["mini_lr"]
    assert ("| Muon | 2.032 ± 0.005 | 2.82x (2.64 to 3.05) | 2.22x (2.08 to 2.40) | 29, capped | lr 4e-2 → 5.66e-2, "
            "momentum 0.95 → 0.85, warmup 25 → 0, decay 0 → 1e-3 | 1.740 ± 0.008 | 1.739 / 2.045 / 1.975 | "
            "-0.541, p < 0.001 | 3.34x (3.24 to 3.44) | 2.63x (2.55 to 2.71) |") in found["tuned"]
    assert "| MARS-exact | tuned | 2.270 ± 0.021 | 1.656 ± 0.035 | +0.002, p = 0.92 | 1.02x (0.82 to 1.26) |" \
        in found["llama"]
    assert "| Lion | learning rate | 2.645 ± 0.005 | 2.402 ± 0.019 | +0.749, p < 0.001 | 0.28x (< 0.25 to 0.32) |" \
        in found["llama"]
    assert ("| MARS-approx | 1.684 ± 0.006 | 19, capped | lr 6e-3 → 1.7e-2, gamma 0.025 → 0.05 | 1.600 ± 0.018 | "
            "1.643 / 1.674 | -0.022, p = 0.091 | 1.06x (0.98 to 1.15) | 1.02x (0.94 to 1.10) |") in found["llama_tuned"]
    assert "| MARS-exact | 1.656 ± 0.035 | 13 | nothing |" in found["llama_tuned"]
    assert "| AdamW | 1.653 ± 0.023 | 20 | beta1 0.9 → 0.85 | 1.622 ± 0.011 | 1.688 / 1.650 | | 1x (0.96 to 1.06) |" \
        in found["llama_tuned"]
    assert "| MARS-exact − AdamW (Welch p) | −0.049 (0.60) | +0.012 (0.32) | −0.102 (0.047) |" in found["ladder"]
    assert "| NorMuon | learning rate | 2e-2 | 1.912 ± 0.002 | -0.368, p < 0.001 | 2.48x (2.40 to 2.55) |" \
        in found["new_2026"]
    assert "| Dion2 | added: tuned only |  |  |  |  | 1.706 ± 0.013 | -0.574, p < 0.001 | 3.54x (3.39 to 3.68) |" \
        in found["new_2026"]
    assert "| AdamH | learning rate | 3.6e-2 | 2.335 ± 0.008 | +0.054, p = 0.01 | 0.83x (0.71 to 0.95) | 2.289 ± 0.004 | " \
        "+0.008, p = 0.51 | 0.97x (0.87 to 1.07) |" in found["new_2026"]
    assert ("| Shampoo | learning rate | 2.135 ± 0.013 | 1.694 ± 0.019 | +0.071, p = 0.0099 | 0.88x (0.81 to 0.96) |"
            in found["new_2026_llama"])
    assert "| Kron | 29, capped | 1.945 ± 0.079 | 2.35x (1.78 to 2.94) | 0.002, ahead | 1.3 |" in found["tuned_baselines"]
    assert "| Signum | 15 | 2.544 ± 0.012 | 0.43x (0.39 to 0.48) | < 0.001, behind | 0.5 |" in found["tuned_baselines"]
    assert "| `torch_optim_Muon` | 2.114 ± 0.005 | 1.61x (1.51 to 1.70) | p < 0.001 | 11 |  |  |" in found["compare"]
    assert "| Muon |" not in found["tuned_baselines"] and found["tuned_baselines"].count("\n") == 2 + 12
    assert ("| Semenov et al. 124M, to 16.8B tokens | AdEMAMix > ADOPT, Moonlight, SOAP > AdamW > Lion, MARS-approx, "
            "Prodigy, Schedule-Free AdamW, Signum, Sophia | Moonlight > SOAP > Schedule-Free AdamW > ADOPT > AdamW > "
            "Prodigy > MARS-approx > Sophia > AdEMAMix > Signum > Lion | 0.38 (p = 0.14) |") in found["rankings"]
    assert found["rankings"].splitlines()[2].endswith(" | 0.82 (p < 0.001) |"), found["rankings"]


def test_a_hand_edited_docs_table_fails_the_check(tmp_path, monkeypatch):
    """A number edited by hand in a docs/reproducing.md region is what --check catches: the command exits 1
    naming the page, and a rewrite restores the generated bytes."""
    from experiments import tables

    docs = tmp_path / "docs"
    docs.mkdir()
    original = (REPO / "docs" / "reproducing.md").read_text()
    (tmp_path / "README.md").write_text((REPO / "README.md").read_text())
    for name, old, new in [("mini_lr", "| Lion | 2.645 ± 0.005 |", "| Lion | 2.640 ± 0.005 |"),
                           ("tuned", "| 23 | decay 1e-2", "| 24 | decay 1e-2"),
                           ("llama", "+0.749, p < 0.001", "+0.750, p < 0.001"),
                           ("llama_tuned", "| 19, capped |", "| 20, capped |"),
                           ("ladder", "| 0.09, 0.81 |", "| 0.10, 0.81 |"),
                           ("tuned_baselines", "| 0.002, ahead | 1.3 |", "| 0.002, ahead | 1.4 |"),
                           ("rankings", "| 0.38 (p = 0.14) |", "| 0.39 (p = 0.14) |")]:
        assert regions(original)[name].count(old) == 1, (name, old)
        edited = original.replace(old, new)
        page = docs / "reproducing.md"
        page.write_text(edited)
        monkeypatch.setattr(tables, "REPO", str(tmp_path))
        assert tables.main(["--check"]) == 1, name
        assert page.read_text() == edited
        assert tables.main([]) == 0 and page.read_text() == original, name
        assert tables.main(["--check"]) == 0, name


def test_a_compare_row_of_a_variant_is_tested_against_its_recipe(tmp_path):
    """The compare table reads each results/compare/<name>/ folder: a variant's tuned seeds (tuned.json's point in
    tuning.csv, not its sensitivity runs), its row.md's speedup and p, its tuning.md's runs, and Welch's test against
    its recipe's tuned seeds in results/tune/report.md; a point short of its four seeds is named, not averaged."""
    import statistics

    from scipy.stats import ttest_ind

    from errors import InputError
    from experiments import tables

    results = tmp_path / "results"
    (results / "tune").mkdir(parents=True)
    shutil.copy(REPO / "results" / "tune" / "report.md", results / "tune" / "report.md")
    muon = tables.seed_losses(str(results / "tune" / "report.md"))["Muon"]
    variant = results / "compare" / "muon+muon_eq_True"
    variant.mkdir(parents=True)
    (variant / "tuned.json").write_text(json.dumps({"muon+muon_eq_True": {"learning_rate": "0.04",
                                                                         "muon_momentum": "0.85"}}))
    mine = [1.70, 1.71, 1.72, 1.74]
    rows = [f'muon+muon_eq_True,"learning_rate=0.04,muon_momentum=0.85",{seed},{loss}'
            for seed, loss in enumerate(mine, start=1)]
    rows.append('muon+muon_eq_True,"learning_rate=0.08,muon_momentum=0.85",1,1.60')  # (the 2x run: not a seed)
    (variant / "tuning.csv").write_text("recipe,values,seed,best_val_loss\n" + "\n".join(rows) + "\n")
    (variant / "tuning.md").write_text("| recipe | runs | noise |\n| --- | --- | --- |\n"
                                       "| adamw | 30 | 0.0100 |\n| muon+muon_eq_True | 17 (capped) | 0.0100 |\n")
    (variant / "row.md").write_text(
        "| optimizer | best val loss (seeds 1-4) | speedup over tuned AdamW | projected GPU-time speedup | Welch's p "
        "against AdamW | rank by loss |\n| --- | --- | --- | --- | --- | --- |\n"
        "| Muon | 1.718 ± 0.017 | 3.6x (3.41 to > 4) |  | p = 0.0042 | 1 of 30 |\n")
    (results / "compare" / "README.md").write_text("what the folder holds\n")  # (a file, not a row)
    table = tables.compare_table(str(results))
    assert table.count("\n") == 3, table
    difference = statistics.mean(mine) - statistics.mean(muon)
    p = float(ttest_ind(mine, muon, equal_var=False).pvalue)
    assert table.splitlines()[2] == (
        f"| `muon+muon_eq_True` | 1.718 ± 0.017 | 3.60x (3.41 to > 4.00) | p = 0.004 | 17, capped | "
        f"{statistics.mean(muon):.3f} ± {statistics.stdev(muon):.3f} | {difference:+.3f}, "
        f"{tables.p_decimals(repr(p))} |"), table
    (variant / "tuning.csv").write_text("recipe,values,seed,best_val_loss\n" + "\n".join([*rows[:3], rows[3].replace(
        ",1.74", ",nan")]) + "\n")
    with pytest.raises(InputError, match="has a loss that is not finite"):
        tables.compare_table(str(results))
    (variant / "tuning.csv").write_text("recipe,values,seed,best_val_loss\n" + "\n".join(rows[:3]) + "\n")
    with pytest.raises(InputError, match="tuned point has 3 seed"):
        tables.compare_table(str(results))


def test_a_speedups_csv_row_prints_its_bounds_and_a_nan_row_is_refused(tmp_path):
    """speedups.csv carries AdamW's ladder's ends, so a speedup past them prints as report.md writes it; a file
    written before the ends were still reads; a NaN is damage, named."""
    from errors import InputError
    from experiments import tables

    header = "optimizer,setting,tokens,seeds,loss_mean,loss_std,speedup,low,high"
    path = tmp_path / "speedups.csv"
    path.write_text(f"{header},lowest,highest\nA,s,1,4,1.6,0.02,3.99,3.8,inf,0.25,4\n"
                    "B,s,1,4,2.6,0.02,0.3,0,0.4,0.25,4\n")
    rows = tables.read_speedups(str(path))
    assert tables.speedup_text(tables.as_speedup(rows["A"])) == "3.99x (3.80 to > 4)"
    assert tables.speedup_text(tables.as_speedup(rows["B"])) == "0.30x (< 0.25 to 0.40)"
    path.write_text(f"{header}\nAdamW,s,1,4,2.3,0.02,1,,\nC,s,1,4,1.6,0.02,2.5,2.25,2.75\n")  # (no ends)
    rows = tables.read_speedups(str(path))
    texts = [tables.speedup_text(tables.as_speedup(rows[name])) for name in ("AdamW", "C")]
    assert texts == ["1x", "2.50x (2.25 to 2.75)"]
    path.write_text(f"{header}\nC,s,1,4,nan,0.02,2.5,2.25,2.75\n")
    with pytest.raises(InputError, match="line 2: not a speedups.csv row \\(a NaN"):
        tables.read_speedups(str(path))


def test_a_stale_table_is_rewritten_and_check_names_it(tmp_path):
    from experiments import tables

    stale = "before\n<!-- table:mini -->\n| old |\n<!-- /table -->\nafter\n"
    fresh = tables.render(stale)
    assert fresh.startswith("before\n<!-- table:mini -->\n| optimizer |") and fresh.endswith("<!-- /table -->\nafter\n")
    assert "| Muon | 2.032 ± 0.005 | 2.82x (2.64 to 3.05) | 2.22x (2.08 to 2.40) | 1.740 ± 0.008 |" in fresh
    # the best row, its interval's top past AdamW's ladder
    assert "| NorDion2 | (added after these runs) | | | **1.637 ± 0.017** | **3.99x (3.80 to > 4)** |" in fresh
    assert "| Dion2 | (added after these runs) | | | 1.706 ± 0.013 | 3.54x (3.39 to 3.68) |" in fresh
    assert "| Dion | (added after these runs) | | | 1.720 ± 0.012 | 3.46x (3.33 to 3.59) |" in fresh
    assert tables.render(fresh) == fresh
    from errors import InputError
    with pytest.raises(InputError, match="no such table"):
        tables.render("<!-- table:nothing -->\n<!-- /table -->\n")


def test_an_untuned_row_says_whether_its_search_has_begun(tmp_path):
    """The README's mini table: a recipe with no tuned result says "not yet tuned", or, where tuning.md holds its
    search or the runs archive its runs (a search under way: tuning.md holds finished searches), how many runs it has
    had (a search stopped short resumes: it is never silently cut)."""
    import tarfile

    from experiments import tables
    results = tmp_path / "results"
    shutil.copytree(os.path.join(REPO, "results"), results)
    def without(path, prefixes: tuple[str, ...]) -> str:
        return "".join(line for line in path.read_text().splitlines(keepends=True) if not line.startswith(prefixes))

    # Sophia, Lion and AdaMuon as if untuned, whatever results/ holds now; then Lion's search begun (9 runs)
    (results / "tune" / "speedups.csv").write_text(without(results / "tune" / "speedups.csv",
                                                           ("Sophia,", "Lion,", "AdaMuon,")))
    tuning = without(results / "tune" / "tuning.md", ("| sophia |", "| lion |", "| adamuon |"))
    row = "| lion | 9 | 0.0100 | 2.6400 | unchanged | - | inf | inf | 0.4 |\n"
    tuning = tuning.replace("\n\nIn all:", "\n" + row + "\nIn all:", 1)
    (results / "tune" / "tuning.md").write_text(tuning)
    # the archive: two finished runs of AdaMuon's search (and a tuned link's run, not a search's)
    runs = tmp_path / "runs"
    for path in ("mini_tune/adamuon/lr=1/seed1", "mini_tune/adamuon/lr=2/seed1", "mini_tune/tuned/adamw/base/seed1"):
        (runs / path).mkdir(parents=True)
        (runs / path / "metrics.jsonl").write_text("{}\n")
    with tarfile.open(results / "tune" / "runs.tar.xz", "w:xz") as tar:
        tar.add(runs / "mini_tune", arcname="mini_tune")
    rows = {line.split(" | ")[0].removeprefix("| "): line for line in tables.mini_table(str(results)).splitlines()}
    assert "| search under way (9 runs) |" in rows["Lion"]
    assert "| search under way (2 runs) |" in rows["AdaMuon"]
    assert "| not yet tuned |" in rows["Sophia"]
    assert "not yet" not in rows["Muon"] and "under way" not in rows["Muon"]
    # every mini recipe of the registry has its row: those added after the learning-rate-only runs, their tuned
    # cells alone
    from config.cells import mini_recipes
    assert len(rows) - 2 == len(mini_recipes()) and "| (added after these runs) | | |" in rows["SOAP-Muon"]
    assert rows["NorMuon"].startswith("| NorMuon | (added after these runs) | | | 1.9")


# The modules outside optim/ and config/ (the recipes' rows, config/cells.py, among them) that name a registry
# optimizer other than AdamW (the reference every comparison is to), each with why: an experiment's or a table's own
# choice of a few, which adding an optimizer never edits. Any other name is a list that adding one would have to
# edit, which derives from the registry instead (docs/optimizers.md#adding-an-optimizer).
NAMED_OUTSIDE_OPTIM = {
    ("bench/memory.py", "mars"): "the README's memory rows, MARS-approx and MARS-exact beside AdamW and Muon",
    ("bench/memory.py", "muon"): "the README's memory rows",
    ("bench/recipes.py", "mars"): "MARS's two benchmark variants, exact and approx",
    ("bench/optimizer_step.py", "mars"): "the MARS-Shampoo variant of its step benchmark",
    ("bench/optimizer_step.py", "mars-m"): "the efficient MARS-M variant of its step benchmark",
    ("experiments/batch_ladder.py", "muon"): "the batch-size ladder's two optimizers",
    ("experiments/sweep.py", "signum"): "a signal's number (getattr(e, 'signum')), not the optimizer",
    ("experiments/tune.py", "signum"): "a signal's number (getattr(e, 'signum')), not the optimizer",
    **{("experiments/tables.py", name): "the 2026 group's rows of the README's table (the README names them too)"
       for name in ("adamh", "adamuon", "dion", "muon", "muonclip", "muonh", "normuon", "shampoo", "mars")},
}


def test_no_module_outside_optim_keeps_a_list_of_optimizers():
    """Adding an optimizer touches its module, its registry line, its recipes (rows of config/cells.py's
    table), its test and its row in docs/optimizers.md: no other module names it. Each name a module outside those
    writes as a string is in NAMED_OUTSIDE_OPTIM, with its reason; a new one fails here."""
    import ast

    from optim import OPTIMIZERS

    files = subprocess.run(["git", "ls-files", "*.py"], capture_output=True, text=True, cwd=REPO,
                           check=True).stdout.split()
    names, named = set(OPTIMIZERS), set()  # (the registry's own: iterating it lists no import path)
    for file in files:
        if file.startswith(("optim/", "config/", "tests/")):
            continue
        for node in ast.walk(ast.parse((REPO / file).read_text())):
            if isinstance(node, ast.Constant) and node.value in names and node.value != "adamw":
                named.add((file, node.value))
    assert named <= set(NAMED_OUTSIDE_OPTIM), sorted(named - set(NAMED_OUTSIDE_OPTIM))
    assert set(NAMED_OUTSIDE_OPTIM) <= named, sorted(set(NAMED_OUTSIDE_OPTIM) - named)  # (no stale reason)
