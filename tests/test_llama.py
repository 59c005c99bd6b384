"""The Llama presets: each one's parameter count against its paper's, the rotary embeddings against Meta's
complex-number form, RMSNorm and SwiGLU against their definitions, every Llama parameter routed by every
optimizer of the registry (none left out, the head with the embedding), a tiny Llama trained by train.py with
its loss falling, and the bad input the issue names refused by name: a GPT-2 checkpoint resumed under a Llama
preset (and the reverse) before any step, an odd head size at load. The Hugging Face export's logits:
tests/test_eval.py."""

import json
import math

import pytest
import torch
import torch.nn.functional as F

from conftest import run_train, tiny_run_args
from config.models import PRESETS
from model import GPT, GPTConfig, apply_rotary, rotary_tables, swiglu_hidden
from optim import OPTIMIZERS, build_optimizer, load_config
from optim.routing import parameter_kinds
from test_train import read_metrics

TINY_LLAMA = ["--model=llama-124m"]  # (after conftest's tiny shape: 2 layers of 32, 2 heads)


@pytest.mark.quick
@pytest.mark.parametrize("preset, count", [
    # Semenov et al.: every parameter, the tied embedding once (llm-baselines' get_num_params; README: 123.59M)
    ("llama-124m", 123_587_328), ("llama-210m", 208_540_416), ("llama-720m", 719_636_480),
])
def test_semenov_presets_have_their_parameter_counts(preset, count):
    with torch.device("meta"):
        assert GPT(GPTConfig(**PRESETS[preset])).num_params() == count


@pytest.mark.quick
@pytest.mark.parametrize("preset, count", [
    # Wen et al. name their sizes by the blocks' matrices alone: 32 (3 d ff + 4 d^2)
    ("llama-130m", 134_217_728), ("llama-300m", 301_989_888), ("llama-520m", 536_870_912),
    ("llama-1.2b", 1_207_959_552),
])
def test_wen_presets_count_their_matrices_as_the_paper_does(preset, count):
    with torch.device("meta"):
        model = GPT(GPTConfig(**PRESETS[preset]))
    kinds = parameter_kinds(model)
    assert sum(p.numel() for kind in ("attention", "mlp") for p in kinds[kind]) == count
    assert model.lm_head.weight is not model.transformer.wte.weight  # untied, as levanter's default


def test_swiglu_hidden_size_is_llm_baselines_rule():
    assert [swiglu_hidden(n) for n in (768, 2048, 32)] == [2048, 5632, 256]


@pytest.mark.quick
def test_rotary_embeddings_equal_metas_complex_form():
    """Adjacent pairs (0, 1), (2, 3), ... rotated by position * theta^(-2i/d): Meta's view_as_complex * polar
    (another pairing, Hugging Face's halves, is off by O(1))."""
    config = GPTConfig(architecture="llama", n_head=2, n_embd=16, rope_theta=500.0)
    x = torch.randn(3, 7, 2, 8, dtype=torch.float64)
    ours = apply_rotary(x, rotary_tables(config, 7, torch.device("cpu")).double())
    freqs = 1.0 / 500.0 ** (torch.arange(0, 8, 2, dtype=torch.float64) / 8)
    rotations = torch.polar(torch.ones(7, 4, dtype=torch.float64), torch.outer(torch.arange(7.0).double(), freqs))
    meta = torch.view_as_real(torch.view_as_complex(x.reshape(3, 7, 2, 4, 2)) * rotations[None, :, None, :])
    torch.testing.assert_close(ours, meta.reshape(3, 7, 2, 8), rtol=0, atol=1e-6)  # (the tables are fp32)


@pytest.mark.quick
def test_a_llama_block_is_rmsnorm_attention_and_swiglu():
    torch.manual_seed(0)
    model = GPT(GPTConfig(architecture="llama", n_layer=1, n_head=2, n_embd=32, block_size=8, vocab_size=64,
                          bias=False)).double()
    block, x = model.transformer.h[0], torch.randn(2, 8, 32, dtype=torch.float64)
    with torch.no_grad():
        block.ln_1.weight.uniform_(0.5, 1.5)
    rms = x / x.pow(2).mean(-1, keepdim=True).add(1e-5).sqrt() * block.ln_1.weight
    torch.testing.assert_close(block.ln_1(x), rms)
    mlp = block.mlp
    torch.testing.assert_close(mlp(x), mlp.c_proj(F.silu(mlp.w1(x)) * mlp.w2(x)))
    assert mlp.w1.out_features == 256 and all(m.bias is None for m in model.modules() if isinstance(m, torch.nn.Linear))
    assert "wpe" not in model.transformer and not any(isinstance(m, torch.nn.LayerNorm) for m in model.modules())
    # causal: a later token leaves the earlier positions' logits alone
    idx = torch.randint(0, 64, (1, 8))
    changed = idx.clone()
    changed[0, -1] = (idx[0, -1] + 1) % 64
    first, _ = model(idx, all_logits=True)
    second, _ = model(changed, all_logits=True)
    torch.testing.assert_close(first[:, :-1], second[:, :-1])


def test_untied_llama_flops_count_the_head_not_the_embedding_lookup():
    config = GPTConfig(architecture="llama", n_layer=2, n_head=2, n_embd=32, block_size=16, vocab_size=64,
                       tie_embeddings=False)
    model = GPT(config)
    matrices = sum(p.numel() for p in model.parameters()) - model.transformer.wte.weight.numel()
    assert model.flops_per_token() == 6 * matrices + 12 * 2 * 32 * 16


@pytest.mark.parametrize("tied", [True, False], ids=["tied", "untied"])
def test_every_optimizer_routes_every_llama_parameter_once(tied):
    """The registry's every optimizer, built on a tiny Llama (tied as llm-baselines', untied as Wen et al.'s):
    its param groups hold each parameter exactly once, the head with the embedding wherever the optimizer
    sends the embedding (but Scion's, whose authors give the first and the output layer different norms, and AdamH's
    and MuonH's, whose authors put an untied head on AdamH and the embedding on Adam), and
    every SwiGLU matrix where it sends the blocks' matrices."""
    overrides = [] if tied else ["--model=llama-130m"]
    for name in OPTIMIZERS:
        cfg = load_config(["config/mini.py", f"--optimizer={name}", "--lr_schedule=constant", "--compile=False",
                           *(overrides or TINY_LLAMA), "--n_layer=2", "--n_head=2", "--n_embd=32"])
        model = GPT(GPTConfig(**cfg.model_args()))
        assert (model.lm_head.weight is model.transformer.wte.weight) == tied
        optimizer = build_optimizer(model, cfg, "cpu")
        grouped = [p for group in optimizer.param_groups for p in group["params"]]
        assert sorted(map(id, grouped)) == sorted(map(id, model.parameters())), name  # each once, none left out
        group_of = {id(p): i for i, group in enumerate(optimizer.param_groups) for p in group["params"]}
        kinds = parameter_kinds(model)
        if name == "scion" and not tied:  # the embedding takes the first layer's Sign, the head the output's
            assert [optimizer.param_groups[group_of[id(p)]]["lmo"] for p in kinds["embeddings"]] == [
                "sign", "sign_normalized"], name
        elif name in ("adamh", "muonh") and not tied:  # the embedding takes Adam, the head AdamH (marin's mask)
            assert [optimizer.param_groups[group_of[id(p)]]["rule"] for p in kinds["embeddings"]] == [
                "adam", "adamh"], name
        else:
            assert {group_of[id(p)] for p in kinds["embeddings"]} == {group_of[id(model.transformer.wte.weight)]}, name
        swiglu = [model.transformer.h[0].mlp.w1.weight, model.transformer.h[0].mlp.w2.weight]
        assert {group_of[id(p)] for p in swiglu} == {group_of[id(model.transformer.h[0].mlp.c_proj.weight)]}, name


def test_odd_head_size_is_a_named_config_error():
    with pytest.raises(Exception, match="head size .* odd: rotary embeddings rotate a head's dimensions in pairs"):
        load_config(["config/mini.py", "--model=llama-124m", "--n_head=4", "--n_embd=12"])


def test_a_llama_config_records_the_model_it_builds():
    """A Llama has no biases whatever the schema's default (True, GPT-2's) or a config file says: its resolved config,
    the one config.json records, says bias=False and no 1/(layer+1) scale, while a GPT-2 config keeps its own
    settings; either asked for on the command line with a Llama is refused by name, never dropped."""
    from config import ConfigError

    assert load_config(["config/llama_124m_mars.py"]).to_dict()["bias"] is False
    mini_llama = load_config(["config/mini.py", "config/mini_llama.py"]).to_dict()  # (mini.py's scale: dropped)
    assert (mini_llama["bias"], mini_llama["scale_attn_by_inverse_layer_idx"]) == (False, False)
    for override in ("--bias=True", "--scale_attn_by_inverse_layer_idx=True"):
        with pytest.raises(ConfigError, match=f"{override}: model 'llama-124m' is a Llama"):
            load_config(["config/llama_124m_mars.py", override])
    assert load_config(["config/mini.py", "--bias=True"]).to_dict()["bias"] is True


def test_a_tiny_llama_learns_and_a_gpt2_checkpoint_is_refused_under_it(tiny_dataset, tmp_path):
    out = str(tmp_path / "run")
    args = tiny_run_args(tiny_dataset, out, max_iters=12, eval_interval=6)
    run_train(args + TINY_LLAMA, check=True)
    with open(f"{out}/config.json") as f:  # the model as built: no biases
        assert json.load(f)["config"]["bias"] is False
    losses = [row["val_loss"] for row in read_metrics(out, "val")]
    assert losses[-1] < losses[0] - 0.1, losses
    # a GPT-2 resume of this Llama run, and a Llama resume of a GPT-2 run: refused by name, before any step (no
    # config file on the line: the run's own config, here asked to be a GPT-2)
    proc = run_train(args + ["--init_from=resume", "--max_iters=14", "--model=small"], check=False)
    assert proc.returncode == 2 and "holds a Llama model and the config asks for a GPT-2" in proc.stderr
    gpt2_out = str(tmp_path / "gpt2")
    run_train(tiny_run_args(tiny_dataset, gpt2_out, max_iters=2, eval_interval=2), check=True)
    proc = run_train(tiny_run_args(tiny_dataset, gpt2_out, max_iters=4, eval_interval=2) + TINY_LLAMA
                     + ["--init_from=resume"], check=False)
    assert proc.returncode == 2 and "holds a GPT-2 model and the config asks for a Llama" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert math.isfinite(losses[-1])


@pytest.mark.parametrize("fused_cross_entropy", [False, True], ids=["logits", "fused-cross-entropy"])
def test_a_llama_compiles_into_one_graph_under_bf16_autocast(fused_cross_entropy):
    """torch.compile traces a Llama's training forward (rotary tables, RMSNorm, SwiGLU) whole, under CPU bf16
    autocast as under CUDA's, with no graph break (a break runs the rest eagerly, silently)."""
    model = GPT(GPTConfig(architecture="llama", n_layer=2, n_head=2, n_embd=32, block_size=32, vocab_size=96,
                          bias=False), fused_cross_entropy=fused_cross_entropy)
    x, y = torch.randint(0, 96, (2, 3, 32))
    torch._dynamo.reset()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        explained = torch._dynamo.explain(model)(x, y)
    assert explained.graph_count == 1 and not explained.break_reasons, [r.reason for r in explained.break_reasons]


def test_a_preset_shape_override_keeps_the_presets_mlp_rule():
    """Wen et al.'s presets size the SwiGLU at 4 n_embd, Semenov et al.'s by llm-baselines' rule: either follows
    an overridden width (a tiny model of either family is its family's shape)."""
    for preset, hidden in (("llama-130m", 4 * 64), ("llama-124m", 256)):
        cfg = load_config(["config/mini.py", f"--model={preset}", "--n_layer=2", "--n_head=2", "--n_embd=64"])
        assert GPT(GPTConfig(**cfg.model_args())).transformer.h[0].mlp.w1.out_features == hidden, preset


# ----------------------------------------------------------------------------- one component swapped (docs/scaling.md)

SWAP_MODEL = ["--n_layer=2", "--n_head=2", "--n_embd=32", "--block_size=16", "--vocab_size=64", "--bias=False"]


@pytest.mark.parametrize("swap, module_of", [("--positions=rope", lambda m: m.transformer.h[0].attn.rotary_config),
                                             ("--norm=rmsnorm", lambda m: type(m.transformer.ln_f).__name__ == "RMSNorm"),
                                             ("--mlp=swiglu", lambda m: type(m.transformer.h[0].mlp).__name__ == "SwiGLU")])
def test_one_llama_component_swaps_into_a_gpt2(swap, module_of):
    gpt2 = GPT(GPTConfig(**load_config(SWAP_MODEL).model_args()))
    swapped = GPT(GPTConfig(**load_config([*SWAP_MODEL, swap]).model_args()))
    assert not module_of(gpt2) and module_of(swapped)
    assert ("wpe" in swapped.transformer) == (swap != "--positions=rope")


def test_a_gpt2_with_every_llama_component_computes_the_llama():
    """GPT-2 with rotary positions, RMSNorm, SwiGLU, no biases and no 1/(layer+1) scale is the Llama: the same
    parameters by name, and the same logits from the same weights."""
    llama_cfg = load_config([*SWAP_MODEL, "--model=llama-124m"])
    gpt2_cfg = load_config([*SWAP_MODEL, "--positions=rope", "--norm=rmsnorm", "--mlp=swiglu",
                            "--scale_attn_by_inverse_layer_idx=False"])
    llama, gpt2 = GPT(GPTConfig(**llama_cfg.model_args())), GPT(GPTConfig(**gpt2_cfg.model_args()))
    assert llama.state_dict().keys() == gpt2.state_dict().keys()
    gpt2.load_state_dict(llama.state_dict())
    tokens = torch.randint(0, 64, (2, 16), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        torch.testing.assert_close(gpt2(tokens, all_logits=True)[0], llama(tokens, all_logits=True)[0], rtol=0, atol=0)


def test_a_swapped_model_is_refused_where_it_is_not_modelled():
    """The Hugging Face export (a GPT2LMHeadModel cannot compute rotary positions) and bench.memory (its terms are
    the two architectures') name the swap instead of computing something else."""
    from bench.memory import Run, moment_items
    from errors import InputError
    from huggingface import hf_config

    cfg = load_config([*SWAP_MODEL, "--positions=rope"])
    with pytest.raises(InputError, match="positions"):
        hf_config(GPTConfig(**cfg.model_args()))
    with pytest.raises(InputError, match="bench.memory models GPT-2 and the Llama as they are"):
        moment_items(Run(cfg, world_size=1), [])
