"""
The paper config a benchmark row runs: a model preset (small ... xl, llama-124m ...) and a benchmark variant
(the registry's mini recipe names: adamw, mars-approx, mars-exact, muon, ...). bench.gpu and bench.memory
both read their configs here.
"""

import os

from optim import mini_recipes

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Benchmark name -> (the optimizer's part of a paper config's file name, overrides): the registry's mini
# recipes (config/mini_<part>.py [overrides]), so every optimizer appears.
VARIANTS = {name.replace("_", "-"): (recipe.args.split()[0].removeprefix("config/mini_").removesuffix(".py"),
                                     tuple(recipe.args.split()[1:]))
            for name, recipe in mini_recipes().items()}
LLAMA_BASE = "llama_124m"  # the Llama presets without files of their own take these, with --model set


def paper_config_args(model: str, variant: str) -> tuple[list[str], str]:
    """load_config's arguments for a model preset and a variant: config/<prefix>_<optimizer>.py (gpt2_small_mars,
    llama_124m_mars) and the variant's overrides; else, for a Llama, the optimizer's 124M file on the size's
    (config/llama_124m_<optimizer>.py, config/<prefix>.py); else the size's file and the optimizer's paper
    recipe (config/<prefix>.py, config/paper_<optimizer>.py); and a note when it is not the first."""
    part, overrides = VARIANTS[variant]
    llama = model.startswith("llama")
    prefix = model.replace("-", "_") if llama else f"gpt2_{model}"
    if llama and not os.path.exists(os.path.join(REPO, "config", f"{prefix}.py")):
        prefix, overrides = LLAMA_BASE, (*overrides, f"--model={model}")
    path = os.path.join(REPO, "config", f"{prefix}_{part}.py")
    if os.path.exists(path):
        return [path, *overrides], ""
    base_path = os.path.join(REPO, "config", f"{LLAMA_BASE}_{part}.py")
    if llama and os.path.exists(base_path):  # Semenov et al. keep each optimizer's 124M settings at every size
        return [base_path, os.path.join(REPO, "config", f"{prefix}.py"), *overrides], \
            f"no {prefix}_{part}.py: {LLAMA_BASE}_{part}.py on {prefix}.py"
    paths = [os.path.join(REPO, "config", f"{prefix}.py"), os.path.join(REPO, "config", f"paper_{part}.py")]
    return [*paths, *overrides], f"no {prefix}_{part}.py: {prefix}.py + paper_{part}.py"
