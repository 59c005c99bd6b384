"""
The README and docs/ kept honest: every relative link and image resolves; every `python -m MODULE`, script
and config file they name exists; every `--key=value` they show is a key its command accepts (train.py's
and the run scripts': load_config's keys; another module's: its --help); every train.py (or train.sbatch)
command they show, its config files and overrides, is one load_config accepts as it stands; the README is
a front page of at most 250 lines with the quickstart, the GPU command lines and the headline results in
its first screenful. The checks are functions, so the last test shows each failing on a broken page.
"""

import functools
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import PYTHON, REPO
from optim import HYPERPARAMETERS, help_text, load_config
from config import HELP_FLAGS, PRINT_CONFIG_FLAG, ConfigError, TrainConfig
from config.cells import CELLS

PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
MODULE = re.compile(r"python3? -m ([a-zA-Z_][\w.]*)")
PATH = re.compile(r"\b((?:scripts|experiments|results|config|bench|eval|data|tests|docs)/[\w./-]+\.(?:py|sh|sbatch|md|png|json|csv))\b")
KEY = re.compile(r"(?<![\w-])--([a-z][a-z0-9_]*)=")
# train.py's keys: the loop's and every optimizer's
TRAIN_KEYS = {name for name in TrainConfig.__dataclass_fields__} | {
    name for schema in HYPERPARAMETERS.values() for name in schema.__dataclass_fields__}
# modules that are not Python modules of ours, but tools the docs run
TOOLS = {"pytest", "torch.distributed.run", "pip", "lm_eval"}


def broken_links(page: Path) -> list[str]:
    out = []
    for target in LINK.findall(page.read_text()):
        if target.startswith(("http://", "https://", "mailto:")):
            continue
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.exists():
            out.append(f"{page.name}: {target} does not exist")
        elif anchor and file.suffix == ".md" and anchor not in anchors(file):
            out.append(f"{page.name}: {target}: no heading #{anchor} in {file.name}")
    return out


def anchors(page: Path) -> set[str]:
    """GitHub's anchors of a page's headings."""
    headings = re.findall(r"^#+ (.+)$", page.read_text(), flags=re.M)
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in headings}


def missing_names(page: Path) -> list[str]:
    """Modules, scripts and config files (or cells) the page names that are not in the repository."""
    text, out = page.read_text(), []
    for module in set(MODULE.findall(text)) - TOOLS:
        if not any((REPO / (module.replace(".", "/") + suffix)).exists() for suffix in (".py", "/__init__.py")):
            out.append(f"{page.name}: python -m {module}: no such module")
    cells = {f"config/{name}.py" for name in CELLS}  # (a cell is a config file's name, not on disk)
    for path in set(PATH.findall(text)) - cells:
        if not (REPO / path).exists() and "<" not in path and "*" not in path:
            out.append(f"{page.name}: {path} does not exist")
    return out


@functools.cache
def flags_of(module: str) -> set[str]:
    """The --flags a module's --help lists (its own command line, not train.py's)."""
    proc = subprocess.run([PYTHON, "-m", module, "--help"], capture_output=True, text=True, cwd=REPO,
                          timeout=120)
    return set(re.findall(r"--([a-z][a-z0-9_-]*)", proc.stdout))


def external_keys(path: str) -> set[str]:
    """The config keys of an optimizer from outside the project (none where the path is a placeholder's)."""
    try:
        return set(HYPERPARAMETERS[path].__dataclass_fields__)
    except ConfigError:
        return set()


def unknown_keys(page: Path) -> list[str]:
    """--key=value settings on a line that train.py would refuse, or that the module the line runs does
    not list; a line's command is the nearest `python -m MODULE` on it or the lines above in its block. A line
    that names an optimizer from outside the project (--optimizer=package.module:Name) may set its keys too."""
    out, command = [], None
    for line in page.read_text().splitlines():
        external = {name for path in re.findall(r"--optimizer=([\w.]+:[\w.]+)", line)
                    for name in external_keys(path)}
        if line.startswith("```") or not line.strip():
            command = None
        modules = [m for m in MODULE.findall(line) if m not in TOOLS]
        if "train.py" in line or "train.sbatch" in line or ".sh" in line:
            command = None
        if modules:
            command = modules[-1]
        for key in KEY.findall(line):
            if key == "key" or f"unknown config key '{key}'" in line or key in external:  # (a placeholder; an
                continue  # error's own example; an external optimizer's keyword argument)
            if command and command not in ("train",):
                if key not in flags_of(command) and key not in TRAIN_KEYS:
                    out.append(f"{page.name}: --{key}= is not an option of python -m {command}")
            elif key not in TRAIN_KEYS and key not in {"nproc_per_node", "nnodes", "rdzv_backend", "rdzv_endpoint",
                                                      "rdzv_id", "time", "signal", "nodes", "partition",
                                                      "gpus-per-task", "slurm", "ntasks-per-node"}:
                out.append(f"{page.name}: --{key}= is not a train.py setting")
    return out


CODE = re.compile(r"^```\w*\n(.*?)^```|`([^`\n]+)`", flags=re.S | re.M)
TRAIN_ENTRY = re.compile(r"\b(?:python3?|torchrun|sbatch)\b[^#|]*?\btrain\.(?:py|sbatch)\b(.*)")  # (a command, not a message)


def refused_train_commands(page: Path) -> list[str]:
    """train.py and train.sbatch command lines in the page's code (blocks and inline spans; a block's lines
    continued with a backslash joined) that load_config refuses: an unknown key, another optimizer's key, a
    missing config file, an override not written --key=value. The arguments run to a comment or a shell
    operator; a placeholder (<...>, $VAR, ...) skips the command; a --help line must print its help."""
    out = []
    for block, span in CODE.findall(page.read_text()):
        for line in (block or span).replace("\\\n", " ").splitlines():
            match = TRAIN_ENTRY.search(line)
            if not match:
                continue
            args = re.split(r"\s+(?:#|\||&&|;|>)", " " + match[1])[0].split()
            if any(c in arg for arg in args for c in "<$*[") or "..." in args or "…" in " ".join(args):
                continue
            args = [str(REPO / a) if a.endswith(".py") else a for a in args if a != PRINT_CONFIG_FLAG]
            try:
                help_text(args) if any(a in HELP_FLAGS for a in args) else load_config(args)
            except (ConfigError, OSError) as e:
                out.append(f"{page.name}: train.py {' '.join(args)}: {e}")
    return out


@pytest.mark.quick
def test_the_readme_is_a_front_page():
    """At most 250 lines; its first screenful (50 lines) holds the quickstart, the GPU command lines and the
    start of the headline results (the GPU throughput against nanoGPT), the mini reproduction's speedups soon
    after."""
    lines = (REPO / "README.md").read_text().splitlines()
    assert len(lines) <= 250, len(lines)
    first_screen = "\n".join(lines[:50])
    assert "scripts/quickstart.sh" in first_screen and "torchrun" in first_screen, first_screen
    assert "## Headline results" in first_screen and "nanoGPT's `train.py`" in first_screen, first_screen
    assert "speedup over AdamW" in "\n".join(lines[:70])


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_links_names_and_keys_resolve(page):
    problems = broken_links(page) + missing_names(page) + unknown_keys(page) + refused_train_commands(page)
    assert not problems, "\n".join(problems)


def test_every_docs_page_is_listed_in_the_readme():
    readme = (REPO / "README.md").read_text()
    assert [p.name for p in PAGES[1:] if f"(docs/{p.name})" not in readme] == []


def test_the_checks_fail_on_a_broken_page(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("See [a page](nowhere.md), ![a figure](missing.png) and [a section](#no-such-heading).\n\n"
                    "```bash\npython train.py config/gpt2_small_mars.py --learning_rat=1e-3\n"
                    "python -m scripts.nonexistent --x=1\npython -m bench.memory config/nothing_here.py --world_sise=8\n"
                    "sbatch scripts/slurm/train.sbatch config/gpt2_small_adamw.py \\\n    --is_approx=False  # MARS's key\n```\n"
                    "Or `python train.py config/gpt2_small_mars.py --max_iters 100`.\n")
    problems = broken_links(page) + missing_names(page) + unknown_keys(page) + refused_train_commands(page)
    assert any("nowhere.md" in p for p in problems) and any("missing.png" in p for p in problems)
    assert any("#no-such-heading" in p for p in problems)
    assert any("'is_approx' is a setting of" in p and "'adamw'" in p for p in problems), problems  # another's key
    assert any("--max_iters" in p and "written --key=value" in p for p in problems), problems
    assert any("--learning_rat=" in p for p in problems)
    assert any("scripts.nonexistent" in p for p in problems)
    assert any("config/nothing_here.py" in p for p in problems)
    assert any("--world_sise=" in p and "bench.memory" in p for p in problems)


def test_the_resume_matrixs_case_count_is_stated_once_and_true():
    """docs/testing.md states how many cases the resume matrix runs once, and that number is what pytest collects."""
    page = (REPO / "docs" / "testing.md").read_text()
    stated = re.findall(r"(\d+)\s+cases\s+(?:come\s+)?from\s+four\s+launches", page)
    collected = subprocess.run([PYTHON, "-m", "pytest", "--collect-only", "-q", "-p", "no:xdist",
                                "tests/test_resume_matrix.py"], capture_output=True, text=True, cwd=REPO).stdout
    count = int(re.search(r"(\d+) tests? collected", collected).group(1))
    assert stated == [str(count)], (stated, count)


def test_the_suite_runs_without_pytest_xdist_and_writes_nothing_outside_the_checkout(tmp_path):
    """pytest without pytest-xdist (the single-file runs docs/testing.md suggests, on a machine without the plugin)
    runs; and a clone without ../shared beside it (no ready tiktoken cache) creates no ../shared: a copy of the
    checkout's files in tmp_path/clone runs a test that loads the GPT-2 BPE."""
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], capture_output=True, text=True,
                           cwd=REPO, check=True).stdout.split()
    clone = tmp_path / "clone"
    for name in files:
        if (REPO / name).is_file():
            (clone / name).parent.mkdir(parents=True, exist_ok=True)
            (clone / name).write_bytes((REPO / name).read_bytes())
    env = {k: v for k, v in os.environ.items() if k != "TIKTOKEN_CACHE_DIR"}
    proc = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:xdist", "-q", "-p", "no:cacheprovider",
                           "tests/test_tokenizer.py::test_loads_from_tiktoken_cache"], capture_output=True, text=True,
                          cwd=clone, env=env, timeout=300)
    ran = "1 passed" in proc.stdout or "1 failed" in proc.stdout  # (failed: no network for the vocabulary here)
    assert ran and "unrecognized arguments" not in proc.stderr, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert not (tmp_path / "shared").exists()
