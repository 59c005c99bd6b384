"""config/: every file and every cell of config/cells.py loads and validates. The paper settings for every preset and
optimizer (bench/recipes.py) load, and every cell is in them. Each official run's cell builds the paper's model size,
takes a global batch of 480 x 1024 tokens on 1 to 32 GPUs with its default micro-batch, and equals the official
repository's config (AGI-Arena/MARS for GPT-2, epfml/llm-optimizer-benchmark's scripts for the Llama rows); its out_dir
and run name are the ones scripts/common.sh's launch gives the run (the cell's name)."""

import ast
import glob
import os

import pytest
import torch

from bench.recipes import SETTINGS, TABLE, VARIANTS, paper_config_args
from conftest import REPO
from config import ConfigError, read_config_file
from config.cells import CELLS
from model import GPT, GPTConfig
from config.cells import MINI_RECIPES, mini_recipes
from optim import OPTIMIZERS, load_config

CONFIG_FILES = sorted(p for p in glob.glob(str(REPO / "config" / "*.py"))  # (the package's modules are not configs)
                      if os.path.basename(p) not in ("__init__.py", "cells.py", "models.py"))
CELL_PATHS = [str(REPO / "config" / f"{name}.py") for name in CELLS]  # (config/<cell>.py: no file on disk)

# GPT-2's published parameter counts (facts about GPT-2, not about the configs)
GPT2_PARAMS = {"small": 124e6, "medium": 355e6, "large": 774e6, "xl": 1558e6}

# The official configs: the reference the config files are checked against. The official repository is not available
# offline, so its values are restated here, once, in its own names. AGI-Arena/MARS config/train_gpt2_<size>_<optimizer>.py
# at d07f4c9 (small MARS at a497a76, whose weight_decay is 1e-2 where d07f4c9's is 0; xl AdamW at a71ddfc, xl MARS at
# 01e6475); MARS-M and Moonlight: MARS_M/config/train_gpt2_<size>_{mars_m,moonlight}.py (with MARS_M/scripts/
# run_*_<size>.sh's --batch_size and --gradient_accumulation_steps). Every one also sets what OFFICIAL_COMMON holds.
OFFICIAL_COMMON = dict(block_size=1024, dropout=0.0, bias=False, max_iters=100_000, lr_decay_iters=100_000,
                       warmup_iters=2000, grad_clip=1.0, eval_interval=1000, log_interval=10)
OFFICIAL_BATCH = {"small": dict(batch_size=15, gradient_accumulation_steps=4),
                  "medium": dict(batch_size=15, gradient_accumulation_steps=4),
                  "large": dict(batch_size=5, gradient_accumulation_steps=12),
                  "xl": dict(batch_size=5, gradient_accumulation_steps=12)}
OFFICIAL = {
    "small": {
        "adamw": dict(learning_rate=6e-4, weight_decay=1e-1, beta1=0.9, beta2=0.95, min_lr=3e-5),
        "muon": dict(muon_learning_rate=2e-2, muon_weight_decay=0.0, learning_rate=3e-3, weight_decay=1e-1, beta1=0.9,
                     beta2=0.95, min_lr=3e-5),
        "mars": dict(learning_rate=6e-3, lr_1d=3e-3, weight_decay=1e-2, beta1=0.95, beta2=0.99, gamma=0.025, min_lr=3e-5),
        "mars_m": dict(learning_rate=6e-3, weight_decay=1e-2, beta1=0.95, gamma=0.025, min_lr=3e-5),
        "moonlight": dict(learning_rate=6e-3, weight_decay=1e-1, beta1=0.95, min_lr=3e-5),
    },
    "medium": {
        "adamw": dict(learning_rate=3e-4, weight_decay=1e-1, beta1=0.9, beta2=0.95, min_lr=6e-5),
        "muon": dict(muon_learning_rate=1e-2, muon_weight_decay=0.0, learning_rate=1.5e-3, weight_decay=1e-1, beta1=0.9,
                     beta2=0.95, min_lr=6e-5),
        "mars": dict(learning_rate=3e-3, lr_1d=1.5e-3, weight_decay=1e-2, beta1=0.95, beta2=0.99, gamma=0.025,
                     min_lr=6e-5),
        "mars_m": dict(learning_rate=5e-3, weight_decay=1e-2, beta1=0.95, gamma=0.025, min_lr=6e-5),
        "moonlight": dict(learning_rate=5e-3, weight_decay=1e-1, beta1=0.95, min_lr=6e-5),
    },
    "large": {
        "adamw": dict(learning_rate=2e-4, weight_decay=1e-1, beta1=0.9, beta2=0.95, min_lr=1e-5),
        "muon": dict(muon_learning_rate=6.67e-3, muon_weight_decay=0.0, learning_rate=1e-3, weight_decay=1e-1, beta1=0.9,
                     beta2=0.95, min_lr=1e-5),
        "mars": dict(learning_rate=2e-3, lr_1d=1e-3, weight_decay=1e-2, beta1=0.95, beta2=0.99, gamma=0.025, min_lr=1e-5),
        "mars_m": dict(learning_rate=5e-3, weight_decay=1e-2, beta1=0.95, gamma=0.025, min_lr=1e-5),
        "moonlight": dict(learning_rate=5e-3, weight_decay=1e-1, beta1=0.95, min_lr=1e-5),
    },
    "xl": {
        "adamw": dict(learning_rate=2e-4, weight_decay=1e-1, beta1=0.9, beta2=0.95, min_lr=1e-5),
        "mars": dict(learning_rate=2e-3, lr_1d=1e-3, weight_decay=1e-2, beta1=0.95, beta2=0.99, gamma=0.025, min_lr=1e-5),
        "mars_m": dict(learning_rate=3e-3, weight_decay=1e-2, beta1=0.95, gamma=0.025, min_lr=1e-5),
        "moonlight": dict(learning_rate=3e-3, weight_decay=1e-1, beta1=0.95, min_lr=1e-5),
    },
}
# An official key's name here, where it differs: train_muon.py's AdamW (learning_rate, weight_decay, betas) takes the
# 1-D parameters, its Muon the matrices; and the paper-era train_muon.py ignored min_lr (None: not compared).
OUR_NAME = {"muon": dict(muon_learning_rate="learning_rate", muon_weight_decay="weight_decay", learning_rate="lr_1d",
                         weight_decay="weight_decay_1d", beta1="beta1_1d", beta2="beta2_1d", min_lr=None)}
PAPER_CONFIGS = [(size, optimizer) for size in OFFICIAL for optimizer in OFFICIAL[size]]


def paper_config_path(size: str, optimizer: str) -> str:
    return str(REPO / "config" / f"gpt2_{size}_{optimizer}.py")


def test_the_paper_configs_are_all_there():
    assert {f"gpt2_{size}_{optimizer}" for size, optimizer in PAPER_CONFIGS} <= CELLS.keys()
    assert len(PAPER_CONFIGS) == 19  # the paper's 11 runs, and the MARS-M paper's 8


def test_a_cell_is_its_files_then_its_values():
    """config/gpt2_small_mars.py, not on disk, reads as gpt2_small.py, then paper_mars.py, then the cell's own values;
    a cell built on a cell (the FineWeb-Edu runs) takes that cell's values, then its own; a name that is neither a
    file nor a cell is an error that suggests the nearest."""
    assert not os.path.exists(REPO / "config" / "gpt2_small_mars.py")
    files = read_config_file(str(REPO / "config" / "gpt2_small.py")) | read_config_file(
        str(REPO / "config" / "paper_mars.py"))
    expected = files | {"out_dir": "out/gpt2_small_mars", "wandb_run_name": "gpt2_small_mars", "learning_rate": 6e-3,
                        "lr_1d": 3e-3}
    assert read_config_file(str(REPO / "config" / "gpt2_small_mars.py")) == expected
    fineweb = read_config_file(str(REPO / "config" / "gpt2_small_mars_fw.py"))
    assert fineweb == expected | {"out_dir": "out/gpt2_small_mars_fw", "wandb_run_name": "gpt2_small_mars_fw",
                                  "dataset": "fineweb-edu100B"}
    with pytest.raises(ConfigError, match=r"config/gpt2_small_marz\.py.*did you mean 'gpt2_small_mars'"):
        read_config_file(str(REPO / "config" / "gpt2_small_marz.py"))
    with pytest.raises(ConfigError, match="cannot read config file"):  # a cell's name outside config/ is a file
        read_config_file(str(REPO / "gpt2_small_mars.py"))


@pytest.mark.parametrize("path", CONFIG_FILES + CELL_PATHS, ids=os.path.basename)
def test_every_config_file_loads_and_validates(path):
    values = read_config_file(path)
    assert values, f"{path} assigns nothing"
    cfg = load_config([path])
    for key, value in values.items():
        assert cfg.to_dict()[key] == value


def test_every_registry_optimizer_has_its_mini_recipes():
    """The sweep, the tuner and the resume matrix go over MINI_RECIPES: an optimizer missing there is never run."""
    assert MINI_RECIPES.keys() == OPTIMIZERS.keys()
    for name, recipes in MINI_RECIPES.items():
        assert recipes and all(load_config(r.args.split()).optimizer == name for r in recipes.values()), name


@pytest.mark.parametrize("mini", sorted(p for p in CONFIG_FILES if os.path.exists(
    p.replace("mini_", "paper_")) and os.path.basename(p).startswith("mini_")), ids=os.path.basename)
def test_a_mini_recipe_builds_on_its_paper_recipe(mini):
    """config/mini_<x>.py includes config/paper_<x>.py and sets only what differs from it: a value the paper's
    recipe already has is not restated (so the mini says, key by key, where it departs from the paper)."""
    paper = mini.replace("mini_", "paper_")
    tree = ast.parse(open(mini).read())
    assigned = [t.id for node in tree.body if isinstance(node, ast.Assign) for t in node.targets]
    assert assigned[0] == "include" and read_config_file(mini).keys() >= read_config_file(paper).keys()
    assert ast.literal_eval(tree.body[0].value) == [os.path.basename(paper)]
    mini_values, paper_values = read_config_file(mini), read_config_file(paper)
    restated = [key for key in assigned[1:] if key in paper_values and paper_values[key] == mini_values[key]]
    assert not restated, f"{mini} restates the paper's {restated}"


@pytest.mark.parametrize("recipe, arguments", [(name, r.args) for name, r in mini_recipes().items()])
def test_mini_recipes_apply_after_the_mini_setting(recipe, arguments):
    cfg = load_config([str(REPO / "config" / "mini.py")] + arguments.split())
    assert (cfg.dataset, cfg.tokenizer, cfg.vocab_size, cfg.device, cfg.n_layer) == ("stdlib_bytes", "bytes", 264, "cpu", 4)
    assert cfg.optimizer == {"mars_exact": "mars", "mars_approx": "mars"}.get(recipe, recipe.replace("_", "-"))
    # its sweep's learning rates bracket the rate the config chose
    rates = mini_recipes()[recipe].learning_rates
    assert min(rates) < cfg.learning_rate < max(rates)


@pytest.mark.parametrize("size, optimizer", PAPER_CONFIGS)
def test_paper_configs_are_the_official_ones(size, optimizer):
    cfg = load_config([paper_config_path(size, optimizer)])
    values, hp = cfg.to_dict(), cfg.hyperparameters
    official = {**OFFICIAL_COMMON, **OFFICIAL[size][optimizer]}
    micro, accumulation = OFFICIAL_BATCH[size]["batch_size"], OFFICIAL_BATCH[size]["gradient_accumulation_steps"]
    assert (cfg.model, cfg.dataset, cfg.vocab_size, cfg.scale_attn_by_inverse_layer_idx) == (size, "openwebtext", 50304,
                                                                                             True)
    for key in ("block_size", "dropout", "bias", "max_iters", "warmup_iters", "grad_clip", "eval_interval",
                "log_interval"):
        assert values[key] == official[key], key
    # the cosine spans max_iters (lr_decay_iters 0 here: the run's length); no token budget
    assert (official["lr_decay_iters"], cfg.lr_decay_iters, cfg.max_tokens) == (cfg.max_iters, 0, 0)
    # 8 GPUs of batch_size x gradient_accumulation_steps; their gradient is the sum over the per-GPU accumulation
    assert cfg.total_batch_size == 8 * micro * accumulation * cfg.block_size
    assert (cfg.micro_batch_size, cfg.grad_multiplier) == (micro, accumulation)
    # the optimizer's own keys, in this repository's names
    names = OUR_NAME.get(optimizer, {})
    for key, value in OFFICIAL[size][optimizer].items():
        ours = names.get(key, key)
        if ours is not None:
            assert values[ours] == value, f"{key} (here {ours})"
    # what the official training scripts hard-code (train_mars.py, train_muon.py, train_adamw.py, MARS_M/train_*.py)
    assert cfg.optimizer == optimizer.replace("_", "-")
    if optimizer == "muon":  # the paper-era train_muon.py: constant, then linear to 0 over the last 2000 steps
        assert (cfg.lr_schedule, cfg.wsd_decay_frac * cfg.max_iters, cfg.min_lr) == ("wsd", 2000, 0.0)
        assert (hp.muon_adamw, hp.muon_momentum, hp.muon_nesterov) == ("official", 0.95, True)
        assert not hp.muon_embeddings_on_adamw  # the paper's Muon: embeddings on Muon
    else:
        assert (cfg.lr_schedule, cfg.min_lr_groups) == ("cosine", "scaled")
    if optimizer in ("adamw", "mars"):  # configure_optimizers decays the nn.Linear weights only
        assert not hp.decay_embeddings
    if optimizer == "mars":
        assert (hp.mars_type, hp.is_approx, hp.optimize_1d) == ("mars-adamw", True, False)
        assert (hp.weight_decay_1d, hp.beta1_1d, hp.beta2_1d) == (0.1, 0.9, 0.95)
    if optimizer in ("mars_m", "moonlight"):  # AdamW on the embeddings, the head and the 1-D parameters
        assert (hp.beta1_1d, hp.beta2_1d) == (0.9, 0.95)
    if optimizer == "mars_m":
        assert hp.is_approx


# Semenov et al.'s rows (epfml/llm-optimizer-benchmark at fdecd5d, scripts/<size>/<optimizer>.sh), as their flags
# say: size: (preset, sequences per step = batch_size x acc_steps, iterations, grad_clip, AdamW's beta1)
SEMENOV = {"124m": ("llama-124m", 64 * 4, 128_000, 0.5, 0.8), "210m": ("llama-210m", 64 * 4, 128_000, 0.5, 0.9),
           "720m": ("llama-720m", 62 * 32, 48_000, 0.1, 0.9)}


@pytest.mark.parametrize("size, optimizer", [(s, o) for s in SEMENOV for o in ("adamw", "mars", "muon")])
def test_llama_benchmark_configs_are_their_scripts(size, optimizer):
    cfg = load_config([str(REPO / "config" / f"llama_{size}_{optimizer}.py")])
    hp = cfg.hyperparameters
    preset, sequences, iterations, grad_clip, adamw_beta1 = SEMENOV[size]
    assert (cfg.model, cfg.dataset, cfg.block_size) == (preset, "fineweb100B", 512)
    assert cfg.total_batch_size == sequences * 512
    assert (cfg.max_iters, cfg.warmup_iters, cfg.grad_clip, cfg.dropout) == (iterations, 2000, grad_clip, 0.0)
    # --scheduler cos: torch's OneCycleLR from lr / 100, to lr / 100 (final_div_factor 1)
    assert (cfg.lr_schedule, cfg.min_lr) == ("onecycle", pytest.approx(cfg.learning_rate / 100))
    side = (hp.lr_1d, hp.beta1_1d, hp.beta2_1d, hp.weight_decay_1d) if optimizer != "adamw" else None
    if optimizer == "adamw":  # --lr 1e-3 --weight_decay 0.1 --beta1 --beta2 0.999
        assert (cfg.learning_rate, hp.weight_decay, hp.beta1, hp.beta2) == (1e-3, 0.1, adamw_beta1, 0.999)
    elif optimizer == "mars":  # --mars_lr 3e-3 --mars_beta1 0.95 --mars_beta2 0.99; the 1-D on --lr, --beta1/2
        assert (hp.mars_type, hp.is_approx, hp.gamma) == ("mars-adamw", True, 0.025)
        assert (cfg.learning_rate, hp.weight_decay, hp.beta1, hp.beta2) == (3e-3, 0.1, 0.95, 0.99)
        assert side == (1e-3, 0.8, 0.999, 0.1)
    else:  # --muon_lr_factor 1e-2 --momentum 0.95 --nesterov True; the rest on AdamW at --lr, --beta1/2
        assert (cfg.learning_rate, hp.weight_decay, hp.muon_momentum, hp.muon_nesterov) == (1e-2, 0.0, 0.95, True)
        assert hp.muon_embeddings_on_adamw and side == (1e-3, 0.8, 0.999, 0.1)


def test_a_llama_size_without_an_optimizers_file_takes_its_124m_settings():
    """bench.gpu and bench.memory build llama-720m's ADOPT from the cell llama_124m_adopt on the 720M recipe:
    the benchmark keeps each optimizer's 124M settings at every size."""
    paths, note = paper_config_args("llama-720m", "adopt")
    cfg, adopt_124m = load_config(paths), load_config([str(REPO / "config" / "llama_124m_adopt.py")])
    assert "llama_124m_adopt on llama_720m.py" in note
    assert (cfg.model, cfg.total_batch_size, cfg.grad_clip) == ("llama-720m", 1984 * 512, 0.1)
    assert (cfg.learning_rate, cfg.min_lr, cfg.hyperparameters) == (adopt_124m.learning_rate, adopt_124m.min_lr,
                                                                    adopt_124m.hyperparameters)


def test_a_gpt2_size_without_an_optimizers_file_takes_its_paper_recipe():
    paths, note = paper_config_args("xl", "lion")
    assert [os.path.relpath(p, REPO) for p in paths] == ["config/gpt2_xl.py", "config/paper_lion.py"]
    assert note == "no cell gpt2_xl_lion: gpt2_xl.py + paper_lion.py"
    assert (load_config(paths).model, load_config(paths).optimizer) == ("xl", "lion")


def test_an_optimizer_whose_recipes_are_rows_runs_at_its_defaults_elsewhere(monkeypatch):
    """An optimizer added as its module, its registry line, its rows of config/cells.py, its test and its docs row
    (no paper_<name>.py): at a size without its cell, the benchmarks run it at its defaults on the size's recipe."""
    import bench.recipes

    real = os.path.exists
    monkeypatch.setattr(bench.recipes.os.path, "exists", lambda path: not path.endswith("paper_lion.py") and real(path))
    run = bench.recipes.compose("xl", "lion")
    assert run.files == ("config/gpt2_xl.py",) and run.overrides == ("--optimizer=lion",)
    assert "no paper_lion.py: lion at its defaults on gpt2_xl.py" in run.note
    monkeypatch.undo()
    cfg = load_config(run.args())
    assert (cfg.model, cfg.optimizer, cfg.learning_rate) == ("xl", "lion", load_config([]).learning_rate)


@pytest.mark.parametrize("model", SETTINGS)
def test_every_table_entry_loads(model):
    for variant, (part, overrides) in VARIANTS.items():
        run = TABLE[(model, variant)]
        for path in run.files:
            name = os.path.basename(path).removesuffix(".py")
            assert os.path.isfile(REPO / path) or name in CELLS, f"({model}, {variant}): {path} is no file or cell"
        cfg = load_config(run.args())
        assert (cfg.model, cfg.optimizer) == (model, part.replace("_", "-"))
        if part == "mars":
            assert cfg.hyperparameters.is_approx == (variant == "mars-approx")
        # the setting's own file, alone, when it has one; else a note says how the run was composed
        own = part in SETTINGS[model].optimizers
        assert (run.files == (f"config/{SETTINGS[model].stem}_{part}.py",)) == own and (run.note == "") == own


def test_every_cell_is_in_the_table():
    """No orphan: every cell of a size and a registry optimizer is some entry's own (the rest are its variants: the
    FineWeb-Edu runs, MARS-exact), and every own cell the table names exists."""
    variants = {name for name in CELLS if name.endswith(("_fw", "_exact"))}
    files = {f"config/{name}.py" for name in CELLS.keys() - variants}
    own = {f"config/{s.stem}_{part}.py" for s in SETTINGS.values() for part in s.optimizers}
    assert files == own, f"not in the table: {sorted(files - own)}; in the table, no cell: {sorted(own - files)}"
    assert files <= {f for run in TABLE.values() for f in run.files}
    assert all(CELLS[name].bases[0] in CELLS for name in variants)
    assert {(size, optimizer) for size, optimizer in PAPER_CONFIGS} <= {
        (model, part) for model, s in SETTINGS.items() for part in s.optimizers}


def test_out_dir_and_run_name_are_the_launch_scripts():
    """A cell's out_dir and wandb_run_name are what scripts/common.sh's launch gives the run of that name
    (OUT_ROOT/RUN_NAME with OUT_ROOT's default, and RUN_NAME), which scripts/run.sh launches by the cell's name
    (TOKENS adds _<TOKENS>); scripts/ holds no launcher of one cell."""
    common = (REPO / "scripts" / "common.sh").read_text()
    assert 'local out_dir="$(out_root)/$run_name"' in common and 'local root="${OUT_ROOT:-out}"' in common
    assert '"--out_dir=$out_dir" "--wandb_run_name=$run_name"' in common
    for path in CELL_PATHS:
        stem, values = os.path.basename(path)[:-3], read_config_file(path)
        assert (values["out_dir"], values["wandb_run_name"]) == (f"out/{stem}", stem), path
    assert 'launch "$name" "config/$name.py"' in (REPO / "scripts" / "run.sh").read_text()
    assert not glob.glob(str(REPO / "scripts" / "run_*.sh"))


@pytest.mark.parametrize("size, optimizer", PAPER_CONFIGS)
def test_paper_model_sizes(size, optimizer):
    cfg = load_config([paper_config_path(size, optimizer)])
    with torch.device("meta"):
        model = GPT(GPTConfig(**cfg.model_args()))
    # GPT-2's published sizes count its 50257-token vocabulary and biases; without the padding, the
    # bias-free models (as the official runs) are within 0.3% of them.
    unpadded = model.num_params() - (50304 - 50257) * model.config.n_embd
    assert unpadded == pytest.approx(GPT2_PARAMS[size], rel=3e-3)


@pytest.mark.parametrize("size, optimizer", PAPER_CONFIGS)
@pytest.mark.parametrize("world_size", [1, 2, 4, 8, 16, 32])
def test_global_batch_is_480_sequences_on_any_gpu_count(size, optimizer, world_size):
    cfg = load_config([paper_config_path(size, optimizer)])
    accumulation = cfg.grad_accum_steps(world_size)  # raises if it does not divide
    assert accumulation * cfg.micro_batch_size * world_size == 480


def test_an_include_cycle_is_a_named_error(tmp_path):
    (tmp_path / "a.py").write_text('include = ["b.py"]\nlearning_rate = 1e-3\n')
    (tmp_path / "b.py").write_text('include = ["a.py"]\n')
    with pytest.raises(ConfigError, match="includes a.py, which includes it"):
        load_config([str(tmp_path / "a.py")])
