"""
Scion against a float64 restatement of its authors' reference (its LMOs and its initialisation), on a tiny GPT
built through the registry (tests/parity.py).
"""

import pytest
import torch

from model import GPT, GPTConfig
from optim import build_optimizer
from parity import STEPS, lr_multiplier, scheduled_step
from test_optim import TINY, tiny_config


def scion_lmo_reference(m, lmo, pieces=1):
    """LIONS-EPFL/scion scion.py's lmo of each norm, in float64 (their NS5 runs in bf16); a fused matrix of
    `pieces` matrices (q, k, v) as each of them, as the authors' GPT holds them."""
    if pieces > 1:
        return torch.cat([scion_lmo_reference(part, lmo) for part in m.chunk(pieces)])
    if lmo == "spectral":
        a, b, c = (3.4445, -4.7750, 2.0315)
        x = m.T if m.size(0) > m.size(1) else m
        x = x / (x.norm() + 1e-7)
        for _ in range(5):
            gram = x @ x.T
            x = a * x + (b * gram + c * gram @ gram) @ x
        return (x.T if m.size(0) > m.size(1) else x) * (m.size(0) / m.size(1)) ** 0.5
    if lmo == "sign":
        return torch.sign(m)
    if lmo == "sign_normalized":
        return torch.sign(m) / m.size(1)
    return m / (torch.sqrt(torch.mean(m**2)) + 1e-8)  # BiasRMS


def scion_init_reference(w: torch.Tensor, lmo: str, radius: float) -> torch.Tensor:
    """LIONS-EPFL/scion scion.py's Norm.init of one matrix, then Scion.init()'s `p.data *= scale`: Spectral
    (normalized) orthogonal in float64 times sqrt(d_out / d_in); Sign +-1 (normalized: over d_in)."""
    if lmo == "spectral":
        w_fp = w.double()
        torch.nn.init.orthogonal_(w_fp)
        w_fp.mul_((w_fp.shape[0] / w_fp.shape[1]) ** 0.5)
        w = w_fp.to(dtype=w.dtype)
    else:
        w = torch.randint(0, 2, w.shape, dtype=w.dtype, device=w.device) * 2 - 1
        if lmo == "sign_normalized":
            w *= 1 / w.shape[1]
    return w * radius


@pytest.mark.quick
@pytest.mark.parametrize("radii", [(1.0, 3.0, 10.0), (1.0, 50.0, 3000.0)], ids=["shallow_gpt", "tied_gpt"])
def test_scion_matches_its_authors_reference(radii):
    """Scion's step (its momentum, the lmo of each group's norm at its radius, the constrained update) against
    the authors' scion.py restated in float64, on the groups the builder makes of the tiny GPT (with biases):
    the blocks' matrices Spectral (the fused c_attn as the authors' separate q, k and v), the 1-D parameters
    BiasRMS at the blocks' radius, the position table Sign, the tied embedding Sign normalised; at the radii of
    their shallow GPT (1, 3, 10) and of their tied modded-nanogpt GPT (blocks 50, the tied matrix 3000). Ours
    runs NS5 in float32 on the CPU: within 1e-5."""
    first, hidden, output = radii
    cfg = tiny_config(optimizer="scion", learning_rate=1e-2, scion_momentum=0.3, scion_input_scale=first,
                      scion_hidden_scale=hidden, scion_output_scale=output)
    torch.manual_seed(0)
    model = GPT(GPTConfig(**TINY))
    optimizer = build_optimizer(model, cfg, "cpu")
    lmos = {id(p): (g["lmo"], g["scale"], pieces) for g in optimizer.param_groups
            for p, pieces in zip(g["params"], g["pieces"])}
    assert lmos[id(model.transformer.h[0].attn.c_attn.weight)] == ("spectral", hidden, 3)
    assert sorted({lmo for lmo, _, _ in lmos.values()}) == ["bias_rms", "sign", "sign_normalized", "spectral"]
    assert lmos[id(model.transformer.wte.weight)] == ("sign_normalized", output, 1)
    assert lmos[id(model.transformer.wpe.weight)] == ("sign", first, 1)
    reference = [p.detach().double().clone() for p in model.parameters()]
    buffers = [torch.zeros_like(p) for p in reference]
    for step in range(STEPS):
        grads = scheduled_step(model, optimizer, step)
        lr = cfg.learning_rate * lr_multiplier(step)
        for p, g, buffer, param in zip(reference, grads, buffers, model.parameters()):
            lmo, scale, pieces = lmos[id(param)]
            buffer.mul_(1 - 0.3).add_(g, alpha=0.3)
            p.mul_(1 - lr).add_(scion_lmo_reference(buffer, lmo, pieces), alpha=-lr * scale)
    for (n, p), expected in zip(model.named_parameters(), reference):
        error = ((p.detach().double() - expected).norm() / expected.norm()).item()
        assert error < 1e-5, f"scion: {n} relative error {error:.1e}"


@pytest.mark.quick
def test_scion_init_draws_the_weights_as_its_authors_init():
    """scion_init=True: each matrix the builder routes drawn as the authors' Scion.init() draws it from the same
    generator state (c_attn as their separate q, k, v, in that order), bit for bit; 1-D parameters keep the
    model's initialisation; the blocks' matrices then have every singular value at their radius."""
    torch.manual_seed(0)
    model = GPT(GPTConfig(**TINY))
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    optimizer = build_optimizer(model, tiny_config(optimizer="scion", learning_rate=1e-2, scion_init=True), "cpu")
    torch.manual_seed(0)
    GPT(GPTConfig(**TINY))  # (the generator where the builder found it)
    names = {id(p): n for n, p in model.named_parameters()}
    for group in optimizer.param_groups:
        for p, pieces in zip(group["params"], group["pieces"]):
            name = names[id(p)]
            if group["lmo"] == "bias_rms":
                assert torch.equal(p, before[name]), name
                continue
            expected = torch.cat([scion_init_reference(part, group["lmo"], group["scale"])
                                  for part in before[name].chunk(pieces)])
            assert torch.equal(p.detach(), expected), name
    q = model.transformer.h[0].attn.c_attn.weight.detach().chunk(3)[0]
    assert torch.allclose(torch.linalg.svdvals(q), torch.full((q.shape[1],), 50.0), rtol=1e-5)  # the blocks' radius
    fc = model.transformer.h[0].mlp.c_fc.weight.detach()  # (4C, C): sqrt(4) x the radius
    assert torch.allclose(torch.linalg.svdvals(fc), torch.full((fc.shape[1],), 100.0), rtol=1e-5)
