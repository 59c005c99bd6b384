"""
AdaMuon (optim/adamuon.py) against a float64 restatement of its authors' code: Chongjie-Si/AdaMuon at 369f0b3,
gpt2/models/optimizers/adamuon.py (the step), and gpt2/models/model.py's configure_optimizers (the routing: the
blocks' matrices on AdaMuon, the embeddings on torch's AdamW with weight decay and the 1-D parameters without, one
learning rate), on a tiny GPT built through the registry, on the same gradients for STEPS steps at a changing
learning rate. In float32 (Newton-Schulz in float32 on the CPU, where the authors' runs in bf16) ours lands on the
reference to float32 rounding; in float64 (Newton-Schulz too) AdaMuon's matrices to float64 rounding.
"""

import pytest
import torch

import optim.newton_schulz
from model import GPT, GPTConfig
from optim import build_optimizer
from optim.adamuon import AdaMuon
from parity import on_hidden_matrix
from test_optim import TINY, tiny_config
from test_optim_mars_m import official_ns5
from test_optim_normuon import run_beside_reference

SETTINGS = dict(compile=False, learning_rate=1e-2, weight_decay=0.1, muon_momentum=0.9, beta1_1d=0.8, beta2_1d=0.95,
                eps=1e-8)


def adamuon_reference(p, g, state, lr, hp):
    """AdaMuon.step of the authors' adamuon.py for one matrix (without its bf16 casts)."""
    momentum, eps = hp["muon_momentum"], hp["eps"]
    buf = state.setdefault("momentum_buffer", torch.zeros_like(g))
    buf.lerp_(g, 1 - momentum)
    g = g.lerp(buf, momentum) if hp["muon_nesterov"] else buf
    g = official_ns5(torch.sign(g)).flatten()
    v = state.setdefault("v_buffer", torch.zeros_like(g))
    v.mul_(momentum).addcmul_(g, g, value=1 - momentum)
    g = g.div(v.view_as(g).sqrt().add(eps))
    scale = 0.2 * (min(p.shape) * max(p.shape)) ** 0.5 / (g.norm() + eps)
    g.mul_(scale)
    p.mul_(1 - lr * hp["weight_decay"])
    p.add_(g.view_as(p), alpha=-lr)


def adamw_reference(p, g, state, lr, wd, hp):
    """torch.optim.AdamW's arithmetic (the authors' AdamW for the other parameters)."""
    beta1, beta2 = hp["beta1_1d"], hp["beta2_1d"]
    state["step"] = step = state.get("step", 0) + 1
    m = state.setdefault("exp_avg", torch.zeros_like(p))
    v = state.setdefault("exp_avg_sq", torch.zeros_like(p))
    p.mul_(1 - lr * wd)
    m.lerp_(g, 1 - beta1)
    v.mul_(beta2).addcmul_(g, g, value=1 - beta2)
    denominator = (v.sqrt() / (1 - beta2**step) ** 0.5).add_(hp["eps"])
    p.addcdiv_(m, denominator, value=-lr / (1 - beta1**step))


def route(name: str, p: torch.Tensor) -> str:
    """configure_optimizers' routing, by our parameter names (the authors name the embedding wte, as we do)."""
    return "adamuon" if on_hidden_matrix(name, p) else "decay" if p.ndim == 2 else "no_decay"


def reference_step(name, on_matrix_rule, p, g, state, multiplier, hp):
    """AdaMuon on the blocks' matrices, AdamW on the rest (the embeddings decayed), all at the one rate."""
    lr = hp["learning_rate"] * multiplier
    if on_matrix_rule:
        adamuon_reference(p, g, state, lr, hp)
    else:
        adamw_reference(p, g, state, lr, hp["weight_decay"] if route(name, p) == "decay" else 0.0, hp)


def run_both(dtype: torch.dtype, reference_settings: dict | None = None, **settings) -> list[tuple[str, bool, float]]:
    errors = run_beside_reference("adamuon", {**SETTINGS, **settings}, dtype,
                                  lambda n, p: route(n, p) == "adamuon", reference_step, reference_settings)
    assert isinstance(build_optimizer(GPT(GPTConfig(**TINY)), tiny_config(optimizer="adamuon"), "cpu"), AdaMuon)
    return errors


@pytest.mark.parametrize("nesterov", [pytest.param(True, marks=pytest.mark.quick), False])
def test_adamuon_matches_its_authors_reference(nesterov):
    errors = run_both(torch.float32, muon_nesterov=nesterov)
    assert max(e for _, _, e in errors) < 2e-6, errors


def test_adamuon_in_float64_is_its_authors_arithmetic(monkeypatch):
    """AdaMuon's matrices to float64 rounding; the AdamW side (rules.adamw_update, shared with Muon) keeps its
    step count and learning rate as float32 scalars, so it is within float32 rounding of the reference."""
    monkeypatch.setattr(optim.newton_schulz, "ns5_dtype", lambda device: torch.float64)
    errors = run_both(torch.float64)
    assert max(e for _, matrix, e in errors if matrix) < 1e-12, errors
    assert max(e for _, _, e in errors) < 1e-6, errors


def test_the_reference_tells_the_settings_apart():
    """Another eps, momentum or no Nesterov misses the reference by far more than the tolerance."""
    for wrong in (dict(eps=1e-3), dict(muon_momentum=0.95), dict(muon_nesterov=False)):
        errors = run_both(torch.float32, reference_settings=wrong)
        assert max(e for _, _, e in errors) > 1e-3, (wrong, errors)
