"""The order of the house: config -> data -> model -> optimizers -> checkpoints -> evaluation. A module imports only
its own layer and those before it (errors.py and files.py, the standard library's helpers, below them all), so the
configuration reads without the model, the data without the model, and nothing imports the evaluation but the tools
above it. Checked on every import statement of the project's modules (the tools, benchmarks and tests above the
layers may import any)."""

import ast
import subprocess
import sys

from conftest import REPO

LAYERS = {"errors": -1, "files": -1, "config": 0, "data": 1, "model": 2, "huggingface": 2, "optim": 3,
          "checkpoint": 4, "eval": 5}


def imports_against_the_order() -> list[str]:
    found = []
    for path in sorted(REPO.rglob("*.py")):
        module = path.relative_to(REPO).parts[0].removesuffix(".py")
        if module not in LAYERS:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([alias.name for alias in node.names] if isinstance(node, ast.Import) else
                     [node.module] if isinstance(node, ast.ImportFrom) and node.module and node.level == 0 else [])
            for name in names:
                imported = name.split(".")[0]
                if LAYERS.get(imported, -2) > LAYERS[module]:
                    found.append(f"{path.relative_to(REPO)} imports {name}")
    return found


def test_no_module_imports_one_above_it():
    assert imports_against_the_order() == []


def test_the_configuration_reads_without_torch():
    """config/ imports nothing of the model: a cell is read, and a config built and checked, in a process without
    torch."""
    probe = ("import sys, config\n"
             "values = config.read_config_file('config/gpt2_small_mars.py')\n"
             "config.TrainConfig(model=values['model'], learning_rate=values['learning_rate']).model_args()\n"
             "assert 'torch' not in sys.modules, sorted(m for m in sys.modules if m.startswith('torch'))[:3]\n")
    # (a fresh interpreter, not conftest's PYTHON, which may be a preloaded one with torch imported)
    subprocess.run([sys.executable, "-c", probe], cwd=REPO, check=True, timeout=60)
