"""scripts/: every shell script parses, and runs end to end in its dry-run mode on CPU (DRY_RUN=1:
2 steps of a tiny model, here on the tiny dataset): scripts/run.sh with one size of each paper-cell family of
config/cells.py (a family's sizes differ only in numbers and in the dimensions the dry run replaces: checked for
every cell), so a broken flag never reaches a cluster. Also: the token budget, torchrun with 2 processes, the
multi-node rendezvous, resuming by rerunning, the mini reproduction's scripts, and the downstream
evaluation feeding report.py's table. A dry run stays out of the real run's folder, and paths with spaces
work."""

import dataclasses
import glob
import json
import os
import re
import subprocess
from concurrent.futures import ThreadPoolExecutor

import pytest

from conftest import PRELOADED_BIN, PYTHON, REPO, free_port, tiny_run_args
from config import read_config_file
from config.cells import CELLS
from config.models import PRESETS
from optim import load_config

SCRIPTS = sorted(os.path.basename(p) for p in glob.glob(str(REPO / "scripts" / "*.sh")))

# The paper cells: the paper's and the MARS-M paper's GPT-2 runs (MARS-exact and the FineWeb-Edu runs included) and the
# Llama benchmark's AdamW, MARS and Muon (the other cells load in test_paper_configs.py)
PAPER_CELLS = [name for name in CELLS
               if re.fullmatch(r"(gpt2|llama)_[a-z0-9]+_(adamw|mars|muon|mars_m|moonlight)(_exact|_fw)?", name)]
# What the dry run replaces (scripts/common.sh), and what launch sets per run
DRY_RUN_KEYS = {"device", "compile", "n_layer", "n_head", "n_embd", "block_size", "micro_batch_size",
                "total_batch_size", "max_tokens", "max_iters", "warmup_iters", "eval_interval", "eval_sequences",
                "log_interval", "out_dir", "wandb_run_name", "data_dir"}


def family(cell: str) -> str:
    """A paper cell's name less its size (gpt2_xl_mars_fw: gpt2_mars_fw)."""
    return re.sub(r"_(small|medium|large|xl|124m|210m|720m)(?=_|$)", "", cell)


# The cells dry-run: each family's first size. run.sh launches every cell alike, and a family's other sizes differ
# from it only in what the dry run replaces and in numbers (test_a_familys_sizes_differ_only_in_numbers), which
# tests/test_paper_configs.py loads and validates for every cell.
DRY_RUN_CELLS = [cell for i, cell in enumerate(PAPER_CELLS) if family(cell) not in map(family, PAPER_CELLS[:i])]
FIRST_OF_FAMILY = {family(cell): cell for cell in DRY_RUN_CELLS}


def run_script(script: str, out_root, data_dir: str, *args: str, **env: str) -> subprocess.CompletedProcess:
    """bash scripts/<script> in dry-run mode (unless env says DRY_RUN=0), runs under out_root."""
    env = {**os.environ, "DRY_RUN": "1", "DATA_DIR": data_dir, "OUT_ROOT": str(out_root), "OMP_NUM_THREADS": "1",
           "PATH": f"{PRELOADED_BIN}:{os.environ['PATH']}", **env}
    return subprocess.run(["bash", str(REPO / "scripts" / script), *args], env=env, capture_output=True,
                          text=True, timeout=600, cwd=REPO)


def dry_run_root(out_root) -> str:
    """Where the dry runs of OUT_ROOT=out_root go: apart from its real runs."""
    return os.path.join(out_root, "dry_run")


def check_ok(proc: subprocess.CompletedProcess) -> None:
    assert proc.returncode == 0, f"failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"


def read_run(out_dir) -> tuple[dict, list[dict]]:
    with open(os.path.join(out_dir, "config.json")) as f:
        info = json.load(f)
    with open(os.path.join(out_dir, "metrics.jsonl")) as f:
        return info, [json.loads(line) for line in f]


# mini_paper.sh's dry run: these recipes, by the name its report gives each; mini_sweep.sh's: MINI_SWEEP_RECIPES
# (every recipe, its default, is the sweep tool's --recipes mini: tests/test_sweep.py; the resume matrix trains each)
MINI_PAPER_RECIPES = {"adamw": "AdamW", "muon": "Muon", "mars_exact": "MARS-exact", "mars_approx": "MARS-approx",
                      "mars_m": "MARS-M-approx", "moonlight": "Moonlight"}
MINI_SWEEP_RECIPES = ("adamw", "soap", "mars_exact")
# job name: (script, its arguments, extra environment); all run at once (two at a time) in the fixture below
JOBS = {
    **{cell: ("run.sh", (cell,), {}) for cell in DRY_RUN_CELLS},
    "multinode": ("run.sh", ("gpt2_small_mars",), {"NNODES": "1", "RDZV_ENDPOINT": f"localhost:{free_port()}"}),
    "budget": ("run.sh", ("gpt2_small_adamw",), {"TOKENS": "5B"}),
    "torchrun": ("run.sh", ("gpt2_small_muon",), {"NGPU": "2"}),
    "mini_sweep.sh": ("mini_sweep.sh", (), {"JOBS": "1", "RECIPES": ",".join(MINI_SWEEP_RECIPES)}),
    "mini_paper.sh": ("mini_paper.sh", (), {"JOBS": "1", "SEEDS": "1", "RECIPES": ",".join(MINI_PAPER_RECIPES)}),
}


@pytest.fixture(scope="module")
def dry_runs(tiny_dataset, tmp_path_factory) -> dict[str, tuple[subprocess.CompletedProcess, str]]:
    """Every job's finished process and the folder its dry runs went to."""
    root = tmp_path_factory.mktemp("dry_runs")

    def run(job: str) -> tuple[subprocess.CompletedProcess, str]:
        script, args, env = JOBS[job]
        out_root = str(root / job)
        return run_script(script, out_root, tiny_dataset, *args, **env), dry_run_root(out_root)

    with ThreadPoolExecutor(max_workers=2) as pool:
        return dict(zip(JOBS, pool.map(run, JOBS)))


@pytest.mark.parametrize("script", SCRIPTS)
def test_bash_syntax(script):
    subprocess.run(["bash", "-n", str(REPO / "scripts" / script)], check=True)


def test_the_paper_cells_count():
    """The paper's 19 GPT-2 runs, MARS-exact, the 8 FineWeb-Edu runs and the Llama's 9 (a new paper cell joins)."""
    assert len(PAPER_CELLS) == 19 + 1 + 8 + 9


def test_a_familys_sizes_differ_only_in_numbers():
    """Each paper cell resolves to its family's dry-run cell's config but for the dimensions the dry run replaces
    (the model presets differ in nothing else) and numbers (learning rates, gradient scale, clipping, betas), each
    zero where the other is: a size that sets another kind of value (a parallelism, a schedule, a dtype) or turns a
    numeric one on or off (an evaluation interval, dropout, clipping) makes its own family."""
    # GPT-2's AdamW, MARS, Muon, MARS-M, Moonlight, MARS-exact and four on FineWeb-Edu; the Llama's three
    assert len(FIRST_OF_FAMILY) == 13

    def settings(cell: str) -> dict:  # (the optimizer's own settings beside the others)
        config = dataclasses.asdict(load_config([str(REPO / "config" / f"{cell}.py")]))
        own = config.pop("hyperparameters")
        return config | {f"hyperparameters.{k}": v for k, v in own.items()}

    for cell in PAPER_CELLS:
        resolved, reference = settings(cell), settings(FIRST_OF_FAMILY[family(cell)])
        differ = {key for key in resolved if resolved[key] != reference[key]} - DRY_RUN_KEYS - {"model"}
        kinds = {key: (type(resolved[key]), type(reference[key])) for key in differ}
        assert all(set(kind) <= {int, float} for kind in kinds.values()), (cell, kinds)
        switched = {key for key in differ if (resolved[key] == 0) != (reference[key] == 0)}
        assert not switched, (cell, switched)
        presets = [{k: v for k, v in PRESETS[config["model"]].items() if k not in DRY_RUN_KEYS}
                   for config in (resolved, reference)]
        assert presets[0] == presets[1], (cell, presets)


@pytest.mark.parametrize("cell", DRY_RUN_CELLS)
def test_run_sh_dry_runs_each_paper_cell(cell, dry_runs):
    """scripts/run.sh <cell> runs the cell's resolved config (bar what the dry run shrinks) as run <cell>."""
    proc, out_root = dry_runs[cell]
    check_ok(proc)
    info, rows = read_run(os.path.join(out_root, cell))
    expected = {k: v for k, v in read_config_file(str(REPO / "config" / f"{cell}.py")).items() if k not in DRY_RUN_KEYS}
    assert {k: info["config"][k] for k in expected} == expected
    assert info["config"]["dataset"] == ("fineweb-edu100B" if cell.endswith("_fw") else
                                         "fineweb100B" if cell.startswith("llama") else "openwebtext")
    assert (info["config"]["wandb_run_name"], info["world_size"]) == (cell, 1)
    assert [r["step"] for r in rows if r["type"] == "val"] == [0, 2]


def test_token_budget_is_one_override(dry_runs):
    proc, out_root = dry_runs["budget"]
    check_ok(proc)
    assert "--max_tokens=5000000000" in proc.stderr  # the launch line (set -x); the dry run then caps the steps
    info, _ = read_run(os.path.join(out_root, "gpt2_small_adamw_5B"))
    assert info["config"]["wandb_run_name"] == "gpt2_small_adamw_5B"
    convert = 'source scripts/common.sh; tokens_to_int 5B; tokens_to_int 20B; tokens_to_int 750M; tokens_to_int 123'
    out = subprocess.run(["bash", "-c", convert], capture_output=True, text=True, check=True, cwd=REPO).stdout
    assert out.split() == ["5000000000", "20000000000", "750000000", "123"]
    bad = subprocess.run(["bash", "-c", "source scripts/common.sh; tokens_to_int 5.5B"], capture_output=True, text=True, cwd=REPO)
    assert bad.returncode != 0 and "TOKENS must be" in bad.stderr


def test_several_gpus_go_through_torchrun(dry_runs):
    proc, out_root = dry_runs["torchrun"]
    check_ok(proc)
    assert "torchrun --standalone --nproc_per_node=2" in proc.stderr
    info, rows = read_run(os.path.join(out_root, "gpt2_small_muon"))
    assert info["world_size"] == 2 and [r["step"] for r in rows if r["type"] == "val"] == [0, 2]


def test_multinode_uses_the_rendezvous(dry_runs):
    proc, _ = dry_runs["multinode"]
    assert "torchrun --nnodes=1 --nproc_per_node=1 --rdzv_backend=c10d --rdzv_endpoint=localhost:" in proc.stderr
    missing = subprocess.run(["bash", str(REPO / "scripts" / "run.sh"), "gpt2_small_mars"], capture_output=True,
                             text=True, env={**{k: v for k, v in os.environ.items() if k != "RDZV_ENDPOINT"},
                                             "NNODES": "2"}, cwd=REPO)
    assert missing.returncode != 0 and "set RDZV_ENDPOINT" in missing.stderr


def test_rerunning_a_script_resumes_its_run(tiny_dataset, tmp_path):
    first = run_script("run.sh", tmp_path, tiny_dataset, "gpt2_medium_adamw", "--max_iters=1")  # "preempted" at step 1
    check_ok(first)
    second = run_script("run.sh", tmp_path, tiny_dataset, "gpt2_medium_adamw")
    check_ok(second)
    assert "ckpt.pt exists: resuming it" in second.stdout and "resuming" in second.stdout
    assert "--init_from=resume" in second.stderr
    _, rows = read_run(os.path.join(dry_run_root(tmp_path), "gpt2_medium_adamw"))
    assert [r["step"] for r in rows if r["type"] == "train"] == [1, 2]


def test_a_dry_run_leaves_the_real_runs_folder_alone(tiny_dataset, tmp_path):
    dry = run_script("run.sh", tmp_path, tiny_dataset, "gpt2_small_adamw")
    check_ok(dry)
    real_dir = tmp_path / "gpt2_small_adamw"
    assert not real_dir.exists() and os.path.exists(os.path.join(dry_run_root(tmp_path), "gpt2_small_adamw", "ckpt.pt"))
    # the real launch (made tiny by its overrides; its folder as the script names it) starts from scratch
    real = run_script("run.sh", tmp_path, tiny_dataset, "gpt2_small_adamw",
                      *tiny_run_args(tiny_dataset, str(real_dir), max_iters=2, eval_interval=2, compile=False),
                      DRY_RUN="0", NGPU="1")
    check_ok(real)
    assert "resuming" not in real.stdout and "--init_from=resume" not in real.stderr
    info, _ = read_run(real_dir)
    assert info["config"]["n_layer"] == 2 and info["config"]["init_from"] == "scratch"


def test_paths_with_spaces(tiny_dataset, tmp_path):
    data_dir, out_root = tmp_path / "my data", tmp_path / "my runs"
    data_dir.symlink_to(tiny_dataset, target_is_directory=True)
    proc = run_script("run.sh", out_root, str(data_dir), "gpt2_small_mars")
    check_ok(proc)
    info, rows = read_run(os.path.join(dry_run_root(out_root), "gpt2_small_mars"))
    assert info["config"]["data_dir"] == str(data_dir) and [r["step"] for r in rows if r["type"] == "val"] == [0, 2]


def test_mini_sweep_runs_its_recipes_through_the_sweep_tool(dry_runs):
    proc, out_root = dry_runs["mini_sweep.sh"]
    check_ok(proc)
    with open(os.path.join(out_root, "mini_sweep", "sweep.md")) as f:
        table = f.read()
    for recipe in MINI_SWEEP_RECIPES:
        assert f"| **{recipe}** | " in table  # one point each in a dry run: the best of its recipe
    runs = glob.glob(os.path.join(out_root, "mini_sweep", "*", "*", "seed1", "ckpt.pt"))
    assert sorted(path.split(os.sep)[-4] for path in runs) == sorted(MINI_SWEEP_RECIPES)


def test_mini_paper_reports_every_optimizer_it_ran(dry_runs):
    proc, out_root = dry_runs["mini_paper.sh"]
    check_ok(proc)
    with open(os.path.join(out_root, "mini_paper", "report", "report.md")) as f:
        table = f.read().split("## Runs")[0]
    for optimizer in MINI_PAPER_RECIPES.values():
        assert f"| {optimizer} | " in table
    runs = glob.glob(os.path.join(out_root, "mini_paper", "*", "base", "seed1", "ckpt.pt"))
    assert sorted(run.split(os.sep)[-4] for run in runs) == sorted(MINI_PAPER_RECIPES)


def test_downstream_evaluation_feeds_the_report(dry_runs, tmp_path):
    from test_eval import write_hellaswag_jsonl, write_task_yaml

    _, out_root = dry_runs["gpt2_small_mars"]
    run_dir = os.path.join(out_root, "gpt2_small_mars")
    jsonl = write_hellaswag_jsonl(str(tmp_path / "hellaswag.jsonl"))
    task_dir = write_task_yaml(tmp_path / "tasks", jsonl, "hellaswag")
    env = dict(os.environ, DRY_RUN="1", TASKS="hellaswag", PATH=f"{PRELOADED_BIN}:{os.environ['PATH']}")
    proc = subprocess.run(["bash", str(REPO / "scripts" / "eval_downstream.sh"), run_dir, "--include_path", task_dir],
                          env=env, capture_output=True, text=True, timeout=600, cwd=REPO)
    check_ok(proc)
    with open(os.path.join(run_dir, "ckpt_lm_eval.json")) as f:
        accuracy = json.load(f)["results"]["hellaswag"]["acc_norm,none"]
    report = subprocess.run([PYTHON, "-m", "experiments.report", run_dir, "--out", str(tmp_path / "r")],
                            capture_output=True, text=True, cwd=REPO)
    check_ok(report)
    assert "## Downstream tasks" in report.stdout
    assert f"| {100 * accuracy:.2f} | - | - | - | - | - | {100 * accuracy:.2f} |" in report.stdout


def test_run_sh_launches_any_cell_by_name(tiny_dataset, tmp_path):
    """A baseline needs no script of its own: scripts/run.sh <cell> (here Schedule-Free AdamW, whose recipe replaces
    the schedule); a name that is no cell is refused, listing the cells."""
    proc = run_script("run.sh", tmp_path, tiny_dataset, "gpt2_small_schedule_free_adamw")
    check_ok(proc)
    info, rows = read_run(os.path.join(dry_run_root(tmp_path), "gpt2_small_schedule_free_adamw"))
    assert (info["config"]["optimizer"], info["config"]["lr_schedule"]) == ("schedule-free-adamw", "constant")
    assert [r["step"] for r in rows if r["type"] == "val"] == [0, 2]
    proc = run_script("run.sh", tmp_path, tiny_dataset, "gpt2_small_sgd")
    assert proc.returncode == 2 and "is not a cell of config/cells.py; give one of: " in proc.stderr and "gpt2_small_lion" in proc.stderr
