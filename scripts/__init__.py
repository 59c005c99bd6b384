"""
The run scripts (*.sh, slurm/): launchers only. The experiment tools that lived here moved to experiments/;
MOVED lists them, and `python -m scripts.<tool>` (or `from scripts import <tool>`) names the new place instead
of failing with a bare "No module named".
"""

import importlib.abc
import importlib.machinery
import sys

MOVED = {f"scripts.{tool}": f"experiments.{tool}"
         for tool in ("sweep", "tune", "report", "batch_ladder", "budget_ladder", "rankings")}


def moved_message(name: str) -> str:
    return f"{name} moved: run python -m {MOVED[name]}"


class _MovedLoader(importlib.abc.Loader):
    """Loads a moved module as an error: run (python -m: runpy executes get_code's code) it exits 2 with the
    message and no traceback; imported, it raises ImportError naming the new module (an ImportError, not a
    ModuleNotFoundError, which `from scripts import report` would swallow into a vaguer one)."""

    def create_module(self, spec):
        return None

    def exec_module(self, module):
        name = module.__name__
        raise ImportError(f"{name} moved: import {MOVED[name]} (python -m {MOVED[name]})", name=name)

    def get_code(self, name):
        return compile(f"import sys\nprint({('error: ' + moved_message(name))!r}, file=sys.stderr)\nsys.exit(2)\n",
                       f"<{name}: moved>", "exec")

    def is_package(self, name):
        return False


class _MovedFinder(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name in MOVED:
            return importlib.machinery.ModuleSpec(name, _MovedLoader())
        return None


if not any(isinstance(finder, _MovedFinder) for finder in sys.meta_path):
    sys.meta_path.insert(0, _MovedFinder())
