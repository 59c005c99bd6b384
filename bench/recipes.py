"""
The paper settings for every model preset and optimizer variant: (model preset, optimizer variant) -> the config
files and overrides of that run. bench.gpu's rows and bench.memory's tables read it; tests/test_paper_configs.py
checks that every entry loads, and that every cell of config/cells.py is in it.

A setting (a model preset: small ... xl, llama-124m ...) is its model, batch and schedule (`recipe`) and the
optimizers with a cell of their own, <stem>_<optimizer> (config/cells.py's table, never listed here). An optimizer
without one is composed by one of two rules, each written once, in `compose`:
- a setting that `borrows` another (the Llama sizes): that setting's optimizer file on this size's recipe
  (Semenov et al. keep each optimizer's 124M settings at every size);
- otherwise: the size's recipe and the optimizer's paper recipe, config/paper_<optimizer>.py, or, for an optimizer
  whose recipes are only rows of config/cells.py (no paper file), the optimizer at its defaults.
"""

import os
from dataclasses import dataclass

from config.cells import CELLS
from config.models import PRESETS
from optim import OPTIMIZERS

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Benchmark variant -> (the optimizer's part of a config file's name, overrides): every optimizer of the registry,
# MARS as its two forms (exact: two gradients per step).
VARIANTS: dict[str, tuple[str, tuple[str, ...]]] = {}
for _name in OPTIMIZERS:
    if _name == "mars":
        VARIANTS["mars-exact"] = ("mars", ("--is_approx=False",))
        VARIANTS["mars-approx"] = ("mars", ())
    else:
        VARIANTS[_name] = (_name.replace("-", "_"), ())


@dataclass(frozen=True)
class Setting:
    """A model preset's paper setting: the cell <stem>_<optimizer> for each optimizer that has one (config/cells.py:
    adding a cell adds it here); `recipe` (config files and overrides) what an optimizer without a cell goes on;
    `borrows`: the setting whose cells it takes for those ("": the optimizer's config/paper_<optimizer>.py
    instead)."""

    stem: str
    recipe: tuple[str, ...]
    borrows: str = ""

    @property
    def optimizers(self) -> tuple[str, ...]:
        """The registry parts (VARIANTS) with a cell <stem>_<part>."""
        parts = dict.fromkeys(part for part, _ in VARIANTS.values())
        return tuple(p for p in parts if f"{self.stem}_{p}" in CELLS)


SETTINGS: dict[str, Setting] = {
    "small": Setting("gpt2_small", ("config/gpt2_small.py",)),
    "medium": Setting("gpt2_medium", ("config/gpt2_medium.py",)),
    "large": Setting("gpt2_large", ("config/gpt2_large.py",)),
    "xl": Setting("gpt2_xl", ("config/gpt2_xl.py",)),
    "llama-124m": Setting("llama_124m", ("config/llama_124m.py",)),
    "llama-210m": Setting("llama_210m", ("config/llama_124m.py", "--model=llama-210m"), borrows="llama-124m"),
    "llama-720m": Setting("llama_720m", ("config/llama_720m.py",), borrows="llama-124m"),
    # the other Llama presets (llm-baselines' shapes) have no files: the 124M's settings with the model swapped
    **{preset: Setting(preset.replace("-", "_").replace(".", "_"), ("config/llama_124m.py", f"--model={preset}"),
                       borrows="llama-124m")
       for preset, shape in PRESETS.items() if shape.get("architecture") == "llama" and preset not in
       ("llama-124m", "llama-210m", "llama-720m")},
}


@dataclass(frozen=True)
class PaperRun:
    """One entry of the table: load_config's arguments (files relative to the repository root, then overrides) and,
    when the setting has no file for the optimizer, how the run was composed."""

    files: tuple[str, ...]
    overrides: tuple[str, ...]
    note: str = ""

    def args(self) -> list[str]:
        return [*(os.path.join(REPO, f) for f in self.files), *self.overrides]


def _split(items: tuple[str, ...]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    return tuple(i for i in items if not i.startswith("--")), tuple(i for i in items if i.startswith("--"))


def compose(model: str, variant: str) -> PaperRun:
    """The table's entry for a model preset and a variant (the rules of the module's docstring)."""
    setting, (part, variant_overrides) = SETTINGS[model], VARIANTS[variant]
    if part in setting.optimizers:
        return PaperRun((f"config/{setting.stem}_{part}.py",), variant_overrides)
    files, overrides = _split(setting.recipe)
    lender = SETTINGS.get(setting.borrows)
    if lender and part in lender.optimizers:
        own = f"config/{lender.stem}_{part}.py"
        files = tuple(f for f in files if f not in lender.recipe)  # (that cell holds the lender's recipe)
        return PaperRun((own, *files), (*overrides, *variant_overrides),
                        f"no cell {setting.stem}_{part}: {lender.stem}_{part} on "
                        f"{' '.join(os.path.basename(f) for f in (*files, *overrides)) or 'its recipe'}")
    if not os.path.exists(os.path.join(REPO, "config", f"paper_{part}.py")):
        return PaperRun(files, (*overrides, f"--optimizer={variant}", *variant_overrides),
                        f"no cell {setting.stem}_{part}, no paper_{part}.py: {variant} at its defaults on "
                        f"{' + '.join(os.path.basename(f) for f in files)}")
    return PaperRun((*files, f"config/paper_{part}.py"), (*overrides, *variant_overrides),
                    f"no cell {setting.stem}_{part}: {' + '.join(os.path.basename(f) for f in files)} + paper_{part}.py")


TABLE: dict[tuple[str, str], PaperRun] = {(model, variant): compose(model, variant)
                                          for model in SETTINGS for variant in VARIANTS}


def paper_config_args(model: str, variant: str) -> tuple[list[str], str]:
    """load_config's arguments for a model preset and a variant (TABLE's entry), and a note when the setting has no
    cell of its own for the optimizer."""
    run = TABLE[(model, variant)]
    return run.args(), run.note
