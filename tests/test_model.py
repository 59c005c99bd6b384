import math

import pytest
import torch
import torch.nn.functional as F

from config.models import PRESETS
from model import GPT, GPTConfig


def tiny_config(**kw) -> GPTConfig:
    args = dict(block_size=16, vocab_size=96, n_layer=2, n_head=2, n_embd=32, dropout=0.0, bias=True)
    args.update(kw)
    return GPTConfig(**args)


def test_initial_loss_is_about_ln_vocab():
    torch.manual_seed(0)
    model = GPT(GPTConfig(block_size=64, n_layer=2, n_head=2, n_embd=64))  # the real padded vocab
    idx, targets = torch.randint(0, 50257, (2, 8, 64))
    _, loss = model(idx, targets)
    assert abs(loss.item() - math.log(50304)) < 0.1


@pytest.mark.quick
def test_overfits_one_batch():
    torch.manual_seed(0)
    model = GPT(tiny_config())
    idx = torch.randint(0, 96, (4, 16))
    x, y = idx[:, :-1], idx[:, 1:]
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    _, first = model(x, y)
    for _ in range(100):
        _, loss = model(x, y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert loss.item() < 0.1 * first.item()


def naive_attention(attn, x: torch.Tensor) -> torch.Tensor:
    """Masked softmax attention written out, with the module's own weights and scale."""
    B, T, C = x.shape
    q, k, v = attn.c_attn(x).split(C, dim=2)
    q, k, v = (t.view(B, T, attn.n_head, C // attn.n_head).transpose(1, 2) for t in (q, k, v))
    scores = (q @ k.transpose(-2, -1)) * attn.scale
    mask = torch.tril(torch.ones(T, T, dtype=torch.bool))
    scores = scores.masked_fill(~mask, float("-inf"))
    y = F.softmax(scores, dim=-1) @ v
    return attn.c_proj(y.transpose(1, 2).reshape(B, T, C))


@pytest.mark.parametrize("inverse_layer_scaling", [False, True])
@pytest.mark.quick
def test_sdpa_equals_naive_masked_softmax(inverse_layer_scaling):
    torch.manual_seed(0)
    model = GPT(tiny_config(n_layer=3, scale_attn_by_inverse_layer_idx=inverse_layer_scaling)).double()
    x = torch.randn(3, 16, 32, dtype=torch.float64)
    for layer_idx, block in enumerate(model.transformer.h):
        expected_scale = 1 / math.sqrt(16) / ((layer_idx + 1) if inverse_layer_scaling else 1)
        assert block.attn.scale == pytest.approx(expected_scale)
        torch.testing.assert_close(block.attn(x), naive_attention(block.attn, x), rtol=1e-10, atol=1e-10)


def test_causality_future_tokens_do_not_change_past_logits():
    torch.manual_seed(0)
    model = GPT(tiny_config())
    idx = torch.randint(0, 96, (1, 16))
    changed = idx.clone()
    changed[0, 10:] = (changed[0, 10:] + 1) % 96
    logits_a, _ = model(idx, idx)
    logits_b, _ = model(changed, changed)
    torch.testing.assert_close(logits_a[:, :10], logits_b[:, :10])


def test_forward_without_targets_returns_last_position_only():
    model = GPT(tiny_config())
    idx = torch.randint(0, 96, (2, 10))
    logits, loss = model(idx)
    full, _ = model(idx, idx)
    assert loss is None and logits.shape == (2, 1, 96)
    torch.testing.assert_close(logits[:, 0], full[:, -1])


def test_weights_are_tied_and_residual_projections_scaled():
    torch.manual_seed(0)
    model = GPT(tiny_config(n_layer=8, n_embd=256, n_head=4))
    assert model.lm_head.weight is model.transformer.wte.weight
    c_proj_std = model.transformer.h[0].mlp.c_proj.weight.std().item()
    c_fc_std = model.transformer.h[0].mlp.c_fc.weight.std().item()
    assert c_fc_std == pytest.approx(0.02, rel=0.05)
    assert c_proj_std == pytest.approx(0.02 / math.sqrt(16), rel=0.05)


@pytest.mark.parametrize("name, millions", [("small", 124), ("medium", 355), ("large", 774), ("xl", 1558)])
def test_presets_have_the_papers_parameter_counts(name, millions):
    with torch.device("meta"):
        model = GPT(GPTConfig(**PRESETS[name]))
    # GPT-2's published sizes count the 50257-token vocabulary; ours is padded to 50304.
    unpadded = model.num_params() - (50304 - 50257) * PRESETS[name]["n_embd"]
    assert round(unpadded / 1e6) == millions


def test_generate_top_k_and_greedy():
    torch.manual_seed(0)
    model = GPT(tiny_config())
    prompt = torch.zeros((2, 3), dtype=torch.long)
    out = model.generate(prompt, 20, temperature=1.0, top_k=5)  # longer than block_size: cropped context
    assert out.shape == (2, 23) and torch.equal(out[:, :3], prompt)
    greedy_a = model.generate(prompt, 5, temperature=0)
    greedy_b = model.generate(prompt, 5, temperature=0)
    assert torch.equal(greedy_a, greedy_b)


def test_mfu_uses_flops_per_token_and_peak():
    model = GPT(tiny_config())
    assert model.estimate_mfu(1000.0, 1e12) == pytest.approx(model.flops_per_token() * 1000 / 1e12)


def fused_and_logits_models(config: GPTConfig) -> tuple[GPT, GPT]:
    """Two copies of one model, the second computing its training loss through model.LinearCrossEntropy."""
    torch.manual_seed(0)
    logits_path = GPT(config)
    fused = GPT(config, fused_cross_entropy=True)
    fused.load_state_dict(logits_path.state_dict())
    return logits_path, fused


def loss_and_gradients(model: GPT, x: torch.Tensor, y: torch.Tensor, dtype: torch.dtype | None = None,
                       compiled: bool = False):
    """The logits, loss and gradients of one forward-backward on x's device (autocast to dtype, if given)."""
    model.zero_grad()
    with torch.autocast(x.device.type, dtype=dtype, enabled=dtype is not None):
        logits, loss = (torch.compile(model) if compiled else model)(x, y)
    loss.backward()
    return logits, loss.item(), [p.grad.clone() for p in model.parameters()]


def bf16_errors(logits_path: GPT, fused: GPT, x: torch.Tensor, y: torch.Tensor, compiled: bool = False) -> dict:
    """Each loss path's distance in bf16 autocast from the logits path's fp32 run: (|loss - fp32 loss|, the
    largest relative difference of a gradient)."""
    _, reference_loss, reference = loss_and_gradients(logits_path, x, y)
    errors = {}
    for name, candidate in (("logits", logits_path), ("fused", fused)):
        _, loss, gradients = loss_and_gradients(candidate, x, y, torch.bfloat16, compiled)
        errors[name] = (abs(loss - reference_loss),
                        max(((g - r).norm() / r.norm()).item() for g, r in zip(gradients, reference)))
    return errors


def test_fused_cross_entropy_is_the_same_loss_and_gradients(monkeypatch):
    """fused_cross_entropy over several chunks (the last one short) with ignored targets: in fp32 the loss
    and gradients of the logits path; in bf16 autocast within twice the logits path's distance from them;
    no logits in training, and the logits path itself without gradients (evaluation)."""
    monkeypatch.setattr("model.CROSS_ENTROPY_CHUNK_ROWS", 40)  # 96 rows: 40 + 40 + 16
    logits_path, fused = fused_and_logits_models(tiny_config(block_size=32))
    x, y = torch.randint(0, 96, (2, 3, 32))
    y[0, :5] = -1
    _, reference_loss, reference = loss_and_gradients(logits_path, x, y)
    logits, loss, gradients = loss_and_gradients(fused, x, y)
    assert logits is None and loss == pytest.approx(reference_loss, rel=1e-6)
    assert all(torch.allclose(g, r, rtol=1e-5, atol=1e-7) for g, r in zip(gradients, reference))
    errors = bf16_errors(logits_path, fused, x, y)
    assert errors["fused"][0] <= 2 * errors["logits"][0] + 1e-3 and errors["fused"][1] <= 2 * errors["logits"][1]
    assert 0 < errors["fused"][1] < 2e-2, errors  # (bf16 rounding: 0.6-1.1% here, either way)
    with torch.no_grad():
        assert fused(x, y)[0].shape == (3, 32, 96)


def test_fused_cross_entropy_compiles_into_the_models_graph():
    """torch.compile traces LinearCrossEntropy into the model's graph, with no break: a Function it cannot trace
    runs eagerly instead, silently (reading its chunk size off the class did: 32% fewer tokens/s on an H100)."""
    _, fused = fused_and_logits_models(tiny_config(block_size=32))
    x, y = torch.randint(0, 96, (2, 3, 32))
    torch._dynamo.reset()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        explained = torch._dynamo.explain(fused)(x, y)
    assert explained.graph_count == 1 and not explained.break_reasons, [r.reason for r in explained.break_reasons]
