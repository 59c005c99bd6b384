"""
NorMuon (optim/normuon.py) against a float64 restatement of its authors' code: zichongli5/NorMuon at d45c9a4,
normuon.py (normuon_update, and SingleDeviceNorMuonWithAuxAdam's Adam for the other parameters), on a tiny GPT
built through the registry (so the routing is part of what is checked), on the same gradients for STEPS steps at a
changing learning rate. In float32 (Newton-Schulz in float32 on the CPU, where the authors' runs in bf16) ours lands
on the reference to float32 rounding; in float64 (Newton-Schulz too) NorMuon's matrices to float64 rounding, with
nanochat's three Muon settings too (MuonEq, Muon+, cautious weight decay, at the places its muon_step_fused puts
them).
"""

import pytest
import torch

import optim.newton_schulz
from model import GPT, GPTConfig
from optim import build_optimizer
from optim.normuon import NorMuon, row_mean_squares
from parity import (
    STEPS, cautious_decay, lr_multiplier, muon_eq_reference, muon_plus_reference, on_hidden_matrix, scheduled_step,
)
from test_optim import TINY, tiny_config
from test_optim_mars_m import official_ns5
from test_optim_muon import SETTINGS as NANOCHAT

SETTINGS = dict(compile=False, learning_rate=2e-2, weight_decay=0.1, muon_momentum=0.9, normuon_beta2=0.8,
                lr_1d=3e-3, weight_decay_1d=0.05, beta1_1d=0.8, beta2_1d=0.95, eps=1e-8)


def normuon_reference(p, g, state, lr, hp):
    """normuon_update of the authors' normuon.py, then the step (weight decay, then p - lr * update); with
    nanochat's settings where hp turns them on, at the places its muon_step_fused puts them (karpathy/nanochat
    nanochat/optim.py at 92d63d4): MuonEq before the orthogonalisation, Muon+ after it (before the variance
    reduction), the cautious mask on the decay."""
    momentum = state.setdefault("momentum_buffer", torch.zeros_like(p))
    second_momentum = state.setdefault("second_momentum_buffer", torch.zeros_like(p[..., 0:1]))
    momentum.lerp_(g, 1 - hp["muon_momentum"])
    update = g.lerp(momentum, hp["muon_momentum"]) if hp["muon_nesterov"] else momentum
    if hp.get("muon_eq"):
        update = muon_eq_reference(update)
    update = official_ns5(update)
    if hp.get("muon_plus"):
        update = muon_plus_reference(update)
    vnorm = update.norm(dim=(-2, -1), keepdim=True)
    v_mean = torch.mean(update * update, dim=-1, keepdim=True)
    second_momentum.lerp_(v_mean, 1 - hp["normuon_beta2"])
    update = update * (1 / second_momentum.sqrt().add_(1e-10))
    vnorm_new = update.norm(dim=(-2, -1), keepdim=True)
    update = update * (vnorm / vnorm_new.add_(1e-10))
    update *= max(1, g.size(-2) / g.size(-1)) ** 0.5
    mask = cautious_decay(update, p, hp.get("cautious_weight_decay", False))
    p.sub_(lr * hp["weight_decay"] * p * mask).add_(update, alpha=-lr)


def adam_reference(p, g, state, lr, hp):
    """The authors' adam_update and step (SingleDeviceNorMuonWithAuxAdam's other groups)."""
    betas, eps = (hp["beta1_1d"], hp["beta2_1d"]), hp["eps"]
    state["step"] = step = state.get("step", 0) + 1
    buf1 = state.setdefault("exp_avg", torch.zeros_like(p))
    buf2 = state.setdefault("exp_avg_sq", torch.zeros_like(p))
    buf1.lerp_(g, 1 - betas[0])
    buf2.lerp_(g.square(), 1 - betas[1])
    update = (buf1 / (1 - betas[0] ** step)) / ((buf2 / (1 - betas[1] ** step)).sqrt() + eps)
    p.mul_(1 - lr * hp["weight_decay_1d"]).add_(update, alpha=-lr)


def run_beside_reference(name: str, settings: dict, dtype: torch.dtype, on_matrix_rule, reference_step,
                         reference_settings: dict | None = None) -> list[tuple[str, bool, float]]:
    """STEPS steps of optimizer `name` (through the registry, on the tiny GPT in dtype) and of the reference
    (reference_step(parameter name, on the matrix rule, float64 copy, gradient, state, lr multiplier, settings),
    its settings ours, or reference_settings over them): each parameter's name, whether it is on the matrix rule
    (on_matrix_rule(name, parameter), which the builder's use_muon groups must agree with), and relative
    difference."""
    cfg = tiny_config(optimizer=name, **settings)
    hp = cfg.hyperparameters.to_dict() | dict(learning_rate=cfg.learning_rate) | (reference_settings or {})
    torch.manual_seed(0)
    model = GPT(GPTConfig(**TINY)).to(dtype)
    reference = [p.detach().double().clone() for p in model.parameters()]
    optimizer = build_optimizer(model, cfg, "cpu")
    matrix_rule = [on_matrix_rule(n, p) for n, p in model.named_parameters()]
    routed = {id(p) for g in optimizer.param_groups if g["use_muon"] for p in g["params"]}
    assert routed == {id(p) for p, on in zip(model.parameters(), matrix_rule) if on}
    states = [{} for _ in reference]
    for step in range(STEPS):
        grads = scheduled_step(model, optimizer, step)
        for (n, _), on, q, g, state in zip(model.named_parameters(), matrix_rule, reference, grads, states):
            reference_step(n, on, q, g, state, lr_multiplier(step), hp)
    return [(n, on, ((p.detach().double() - q).norm() / q.norm()).item())
            for (n, p), on, q in zip(model.named_parameters(), matrix_rule, reference)]


def reference_step(name, on_matrix_rule, p, g, state, multiplier, hp):
    """NorMuon on the blocks' matrices, the authors' Adam at lr_1d on the rest."""
    if on_matrix_rule:
        normuon_reference(p, g, state, hp["learning_rate"] * multiplier, hp)
    else:
        adam_reference(p, g, state, hp["lr_1d"] * multiplier, hp)


def run_both(dtype: torch.dtype, reference_settings: dict | None = None, **settings) -> list[tuple[str, bool, float]]:
    errors = run_beside_reference("normuon", {**SETTINGS, **settings}, dtype, on_hidden_matrix, reference_step,
                                  reference_settings)
    assert isinstance(build_optimizer(GPT(GPTConfig(**TINY)), tiny_config(optimizer="normuon"), "cpu"), NorMuon)
    return errors


@pytest.mark.parametrize("nesterov", [pytest.param(True, marks=pytest.mark.quick), False])
def test_normuon_matches_its_authors_reference(nesterov):
    errors = run_both(torch.float32, muon_nesterov=nesterov)
    assert max(e for _, _, e in errors) < 2e-6, errors


def test_normuon_in_float64_is_its_authors_arithmetic(monkeypatch):
    """NorMuon's matrices to float64 rounding; the AdamW side (rules.adamw_update, shared with Muon) keeps its
    step count and learning rate as float32 scalars, so it is within float32 rounding of the reference."""
    monkeypatch.setattr(optim.newton_schulz, "ns5_dtype", lambda device: torch.float64)
    errors = run_both(torch.float64)
    assert max(e for _, matrix, e in errors if matrix) < 1e-12, errors
    assert max(e for _, _, e in errors) < 1e-6, errors


def test_normuon_takes_nanochats_settings_where_nanochat_puts_them(monkeypatch):
    """nanochat's Muon is NorMuon with the three settings: in float64 (Newton-Schulz too) ours with all three lands on
    the authors' NorMuon with them at nanochat's places (normuon_reference) to float64 rounding, and the reference
    without any one of them misses ours by far more (each alone on Muon: tests/test_optim_muon.py)."""
    monkeypatch.setattr(optim.newton_schulz, "ns5_dtype", lambda device: torch.float64)
    errors = run_both(torch.float64, **NANOCHAT["all"])
    assert max(e for _, matrix, e in errors if matrix) < 1e-12, errors
    for setting in NANOCHAT["all"]:
        errors = run_both(torch.float64, reference_settings={setting: False}, **NANOCHAT["all"])
        assert max(e for _, matrix, e in errors if matrix) > 1e-3, (setting, errors)


def test_the_reference_tells_the_settings_apart():
    """Another beta2 or no Nesterov misses the reference by far more than the tolerance."""
    for wrong in (dict(normuon_beta2=0.95), dict(muon_nesterov=False)):
        errors = run_both(torch.float32, reference_settings=wrong)
        assert max(e for _, _, e in errors) > 1e-3, (wrong, errors)


def test_row_statistics_are_each_rows_own():
    """A block of rows has the rows' statistics of the whole matrix, whatever else is batched beside it."""
    gen = torch.Generator().manual_seed(0)
    whole, other = torch.randn(10, 6, generator=gen), torch.randn(3, 6, generator=gen)
    together = row_mean_squares([whole, other, whole.T.contiguous()])
    assert torch.equal(torch.cat(row_mean_squares([whole[:4], whole[4:]])), together[0])
    torch.testing.assert_close(together[0], (whole * whole).mean(dim=1, keepdim=True))
    assert together[2].shape == (6, 1)


def test_normuon_takes_modded_nanogpts_newton_schulz(monkeypatch):
    """ns_coefficients=simple, ns_steps=12 (modded-nanogpt's NorMuon's Newton-Schulz): the reference with their 12
    iterations of (2, -1.5, 0.5) in place of the authors' quintic, to float32 rounding; the quintic misses it."""
    import sys

    from test_optim_hyperball import modded_newton_schulz

    monkeypatch.setattr(sys.modules[__name__], "official_ns5", modded_newton_schulz)
    errors = run_both(torch.float32, ns_coefficients="simple", ns_steps=12)
    assert max(e for _, _, e in errors) < 2e-6, errors
    errors = run_both(torch.float32)
    assert max(e for _, matrix, e in errors if matrix) > 1e-3, errors
