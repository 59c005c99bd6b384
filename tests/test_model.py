import math

import pytest
import torch
import torch.nn.functional as F

from model import GPT, PRESETS, GPTConfig


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
