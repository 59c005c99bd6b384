"""experiments.compare: the recipe it tunes for a name, the committed tuned AdamW unpacked and replayed for its run cap
(the estimate printed before any run), and the row it prints, on the committed runs themselves (a recipe whose tuned
point is the tuned AdamW's own runs must come out at 1x, p = 1)."""

import dataclasses
import os
import shutil
import subprocess

import pytest

from conftest import PYTHON, REPO
from errors import InputError
from experiments import compare


@pytest.mark.quick
def test_the_recipe_for_a_name():
    assert compare.recipe_for("muon", [])[0] == "muon"
    assert compare.recipe_for("mars", [])[0] == "mars_exact"  # (a registry optimizer: its first mini recipe)
    name, recipe = compare.recipe_for("torch.optim:Muon", ["--external_params=matrices", "--learning_rate=0.02"])
    assert name == "torch_optim_Muon" and recipe.args.split() == [
        "--optimizer=torch.optim:Muon", "--external_params=matrices", "--learning_rate=0.02"]
    assert recipe.tune == ("warmup_iters",)
    with pytest.raises(InputError, match="tuned from its mini recipe"):
        compare.recipe_for("muon", ["--learning_rate=1"])
    with pytest.raises(InputError, match="leave out --muon_momentum=0.9, a key its search tunes"):
        compare.recipe_for("muon", ["--muon_momentum=0.9"])
    # a variant of a registry recipe: its settings on top of the recipe, searched as the recipe is
    name, recipe = compare.recipe_for("muon", ["--muon_eq=True", "--cautious_weight_decay=True"])
    muon = compare.recipe_for("muon", [])[1]
    assert name == "muon+muon_eq_True+cautious_weight_decay_True"
    assert recipe == dataclasses.replace(muon, args=muon.args + " --muon_eq=True --cautious_weight_decay=True")
    with pytest.raises(InputError, match="no mini recipe or registry optimizer 'muonn'"):
        compare.recipe_for("muonn", [])
    # a setting that brings keys of its own: they are searched with the recipe's, so they are not given
    adamw = compare.recipe_for("adamw", [])[1]
    name, recipe = compare.recipe_for("adamw", ["--weight_averaging=ema", "--averaging_interval=1"])
    assert name == "adamw+weight_averaging_ema+averaging_interval_1" and recipe.tune == (*adamw.tune, "ema_decay")
    with pytest.raises(InputError, match="leave out --ema_decay=0.9, a key its search tunes"):
        compare.recipe_for("adamw", ["--weight_averaging=ema", "--ema_decay=0.9"])
    assert compare.recipe_for("adamw", ["--weight_averaging=uniform"])[1].tune == (*adamw.tune, "averaging_start")


@pytest.mark.quick
def test_a_settings_own_keys_have_ladders_the_config_takes():
    """Each key a setting brings (SETTING_KEYS) has a ladder in experiments.tune, and every value of it, beside its
    setting, is a config train.py accepts on the mini."""
    from experiments.tune import LADDERS
    from optim import load_config

    for (key, value), brought in compare.SETTING_KEYS.items():
        for own in brought:
            for rung in LADDERS[own]:
                cfg = load_config(["config/mini.py", "config/mini_adamw.py", f"--{key}={value}", f"--{own}={rung}"])
                assert getattr(cfg, own) == rung and getattr(cfg, key) == value


def test_the_estimate_and_the_row_from_the_committed_tuned_adamw(tmp_path):
    """The estimate, before any run: AdamW's search replayed from its committed runs (30) plus seeds 2-4 and the
    sensitivity. The row: a recipe whose tuned point is AdamW's own four seeds is 1x over the tuned AdamW."""
    folder = str(tmp_path / "cmp")
    proc = subprocess.run([PYTHON, "-m", "experiments.compare", "torch.optim:Muon", "--external_params=matrices",
                           "--learning_rate=0.02", "--estimate", "--folder", folder], capture_output=True, text=True,
                          cwd=REPO, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "torch_optim_Muon on the GPT-2 mini: at most 35 runs to go, about" in proc.stdout, proc.stdout
    os.makedirs(os.path.join(folder, "tuned", "twin", "base"))
    for seed in (1, 2, 3, 4):
        os.symlink(os.path.realpath(os.path.join(folder, "tuned", "adamw", "base", f"seed{seed}")),
                   os.path.join(folder, "tuned", "twin", "base", f"seed{seed}"))
    row = compare.the_row(folder, "twin", "results/tune/speedups.csv")
    assert row.startswith("| AdamW | 2.281 ± 0.023 | 1x (") and "| p = 1 |" in row, row
    # a variant of AdamW (its runs are AdamW's too) is tested against the tuned AdamW's seeds alone, on their ladder,
    # and ranked beside AdamW's row: here AdamW's seeds 0.05 lower
    import json
    import statistics

    from scipy.stats import ttest_ind

    losses = {}
    for seed in (1, 2, 3, 4):
        source = os.path.realpath(os.path.join(folder, "tuned", "adamw", "base", f"seed{seed}"))
        target = os.path.join(folder, "tuned", "adamw+lower", "base", f"seed{seed}")
        os.makedirs(target)
        shutil.copy(os.path.join(source, "config.json"), target)
        with open(os.path.join(source, "metrics.jsonl")) as f:
            rows = [json.loads(line) for line in f]
        for r in rows:
            if "val_loss" in r:
                r["val_loss"] -= 0.05
        with open(os.path.join(target, "metrics.jsonl"), "w") as f:
            f.writelines(json.dumps(r) + "\n" for r in rows)
        losses[seed] = min(r["val_loss"] for r in rows if "val_loss" in r)
    adamw = [loss + 0.05 for loss in losses.values()]
    row = compare.the_row(folder, "adamw+lower", "results/tune/speedups.csv")
    p = ttest_ind(list(losses.values()), adamw, equal_var=False).pvalue
    assert row.startswith(f"| AdamW | {statistics.mean(losses.values()):.3f} ± ") and f"| p = {p:.2g} |" in row, row
    speedup = float(row.split(" | ")[2].split("x")[0])
    assert speedup > 1.1, row
    with open(os.path.join(REPO, "results", "tune", "speedups.csv")) as f:
        tuned_rows = len(f.readlines()) - 1
    assert row.endswith(f" of {tuned_rows + 1} |"), row  # (the tuned rows, AdamW's among them, and this one)
