"""config/: every file loads and validates; each paper setting has the paper's model size (built on the
meta device), hyperparameters (the issue's list, checked against the official AGI-Arena/MARS configs)
and a global batch of 480 x 1024 tokens on 1 to 32 GPUs with its default micro-batch."""

import glob
import json
import os

import pytest
import torch

from conftest import REPO
from config import ConfigError, read_config_file
from model import GPT, GPTConfig
from optim import load_config, mini_recipes

RESOLVED = REPO / "tests" / "data" / "paper_configs_resolved.json"
CONFIG_FILES = sorted(p for p in glob.glob(str(REPO / "config" / "*.py")) if not p.endswith("__init__.py"))

# size: (GPT-2's published parameter count, min_lr, AdamW lr, Muon lr, Muon's AdamW lr, MARS lr, MARS lr_1d)
PAPER = {
    "small": (124e6, 3e-5, 6e-4, 2e-2, 3e-3, 6e-3, 3e-3),
    "medium": (355e6, 6e-5, 3e-4, 1e-2, 1.5e-3, 3e-3, 1.5e-3),
    "large": (774e6, 1e-5, 2e-4, 6.67e-3, 1e-3, 2e-3, 1e-3),
    "xl": (1558e6, 1e-5, 2e-4, None, None, 2e-3, 1e-3),
}
PAPER_CONFIGS = [(size, opt) for size in PAPER for opt in ("adamw", "muon", "mars") if PAPER[size][3] or opt != "muon"]


def paper_config_path(size: str, optimizer: str) -> str:
    return str(REPO / "config" / f"gpt2_{size}_{optimizer}.py")


def test_the_paper_configs_are_all_there():
    names = {os.path.basename(p) for p in CONFIG_FILES}
    assert {os.path.basename(paper_config_path(*c)) for c in PAPER_CONFIGS} <= names
    assert len(PAPER_CONFIGS) == 11


@pytest.mark.parametrize("path", CONFIG_FILES, ids=os.path.basename)
def test_every_config_file_loads_and_validates(path):
    values = read_config_file(path)
    assert values, f"{path} assigns nothing"
    cfg = load_config([path])
    for key, value in values.items():
        assert cfg.to_dict()[key] == value


@pytest.mark.parametrize("recipe, arguments", [(name, r.args) for name, r in mini_recipes().items()])
def test_mini_recipes_apply_after_the_mini_setting(recipe, arguments):
    cfg = load_config([str(REPO / "config" / "mini.py")] + arguments.split())
    assert (cfg.dataset, cfg.tokenizer, cfg.vocab_size, cfg.device, cfg.n_layer) == ("stdlib_bytes", "bytes", 264, "cpu", 4)
    assert cfg.optimizer == {"mars_exact": "mars", "mars_approx": "mars"}.get(recipe, recipe.replace("_", "-"))
    # its sweep's learning rates bracket the rate the config chose
    rates = mini_recipes()[recipe].learning_rates
    assert min(rates) < cfg.learning_rate < max(rates)


@pytest.mark.parametrize("size, optimizer", PAPER_CONFIGS)
def test_paper_hyperparameters(size, optimizer):
    cfg = load_config([paper_config_path(size, optimizer)])
    hp = cfg.hyperparameters
    _, min_lr, adamw_lr, muon_lr, muon_adamw_lr, mars_lr, mars_lr_1d = PAPER[size]
    # shared by every run of the paper (and the official code's model: no biases, inverse-layer attention scaling)
    assert (cfg.model, cfg.dataset, cfg.vocab_size, cfg.block_size) == (size, "openwebtext", 50304, 1024)
    assert (cfg.bias, cfg.dropout, cfg.scale_attn_by_inverse_layer_idx) == (False, 0.0, True)
    assert (cfg.total_batch_size, cfg.max_iters, cfg.max_tokens) == (480 * 1024, 100_000, 0)
    assert (cfg.warmup_iters, cfg.lr_decay_iters, cfg.grad_clip) == (2000, 0, 1.0)
    # the official scripts' gradient: their per-GPU accumulation count (480 / 8 GPUs / micro-batch) x the mean
    assert cfg.grad_multiplier == {"small": 4, "medium": 4, "large": 12, "xl": 12}[size]
    assert cfg.optimizer == optimizer
    if optimizer == "muon":  # the paper-era train_muon.py: constant, then linear to 0 over the last 2000 steps
        assert (cfg.lr_schedule, cfg.wsd_decay_frac * cfg.max_iters, cfg.min_lr) == ("wsd", 2000, 0.0)
        assert hp.muon_adamw == "official"
    else:
        assert (cfg.lr_schedule, cfg.min_lr, cfg.min_lr_groups, hp.decay_embeddings) == ("cosine", min_lr, "scaled", False)
    if optimizer == "adamw":
        assert (cfg.learning_rate, hp.weight_decay, hp.beta1, hp.beta2) == (adamw_lr, 0.1, 0.9, 0.95)
    elif optimizer == "muon":
        assert (cfg.learning_rate, hp.weight_decay, hp.muon_momentum, hp.muon_nesterov) == (muon_lr, 0.0, 0.95, True)
        assert not hp.muon_embeddings_on_adamw  # the paper's Muon: embeddings on Muon
        assert (hp.lr_1d, hp.weight_decay_1d, hp.beta1_1d, hp.beta2_1d) == (muon_adamw_lr, 0.1, 0.9, 0.95)
    else:
        assert (hp.mars_type, hp.is_approx, hp.gamma, hp.optimize_1d) == ("mars-adamw", True, 0.025, False)
        assert (cfg.learning_rate, hp.weight_decay, hp.beta1, hp.beta2) == (mars_lr, 1e-2, 0.95, 0.99)
        assert (hp.lr_1d, hp.weight_decay_1d, hp.beta1_1d, hp.beta2_1d) == (mars_lr_1d, 0.1, 0.9, 0.95)


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
    """bench.gpu and bench.memory build llama-720m's ADOPT from config/llama_124m_adopt.py on the 720M recipe:
    the benchmark keeps each optimizer's 124M settings at every size."""
    from bench.recipes import paper_config_args

    paths, note = paper_config_args("llama-720m", "adopt")
    cfg, adopt_124m = load_config(paths), load_config([str(REPO / "config" / "llama_124m_adopt.py")])
    assert "llama_124m_adopt.py on llama_720m.py" in note
    assert (cfg.model, cfg.total_batch_size, cfg.grad_clip) == ("llama-720m", 1984 * 512, 0.1)
    assert (cfg.learning_rate, cfg.min_lr, cfg.hyperparameters) == (adopt_124m.learning_rate, adopt_124m.min_lr,
                                                                    adopt_124m.hyperparameters)


@pytest.mark.parametrize("size, optimizer", PAPER_CONFIGS)
def test_paper_model_sizes(size, optimizer):
    cfg = load_config([paper_config_path(size, optimizer)])
    with torch.device("meta"):
        model = GPT(GPTConfig(**cfg.model_args()))
    # GPT-2's published sizes count its 50257-token vocabulary and biases; without the padding, the
    # bias-free models (as the official runs) are within 0.3% of them.
    unpadded = model.num_params() - (50304 - 50257) * model.config.n_embd
    assert unpadded == pytest.approx(PAPER[size][0], rel=3e-3)


@pytest.mark.parametrize("size, optimizer", PAPER_CONFIGS)
@pytest.mark.parametrize("world_size", [1, 2, 4, 8, 16, 32])
def test_global_batch_is_480_sequences_on_any_gpu_count(size, optimizer, world_size):
    cfg = load_config([paper_config_path(size, optimizer)])
    accumulation = cfg.grad_accum_steps(world_size)  # raises if it does not divide
    assert accumulation * cfg.micro_batch_size * world_size == 480


@pytest.mark.parametrize("name", sorted(json.loads(RESOLVED.read_text())))
def test_composed_paper_configs_resolve_as_before(name):
    """Each paper config is now a model size (config/gpt2_<size>.py) plus an optimizer recipe
    (config/paper_<optimizer>.py) plus its learning rates; every resolved value equals that of the
    self-contained file it replaced (frozen in tests/data/paper_configs_resolved.json). A key added to
    the schema since then resolves to its default, so the recipe still runs as it did."""
    before = json.loads(RESOLVED.read_text())[name]
    resolved = load_config([str(REPO / "config" / name)]).to_dict()
    defaults = load_config([]).to_dict()
    assert {key: resolved[key] for key in before} == before
    assert {key: value for key, value in resolved.items() if key not in before} == {
        key: defaults[key] for key in resolved if key not in before
    }


def test_an_include_cycle_is_a_named_error(tmp_path):
    (tmp_path / "a.py").write_text('include = ["b.py"]\nlearning_rate = 1e-3\n')
    (tmp_path / "b.py").write_text('include = ["a.py"]\n')
    with pytest.raises(ConfigError, match="includes a.py, which includes it"):
        load_config([str(tmp_path / "a.py")])
