"""
SOAP-Muon (optim/soap_muon.py) against a float64 restatement of the track record's code: KellerJordan/modded-nanogpt
at f411b3d, records/track_3_optimization/results/20260504_contra_muon_mlp_soapish/
train_gpt_contra_normuon_soapish_mlp.py (soap_eigenbasis, soap_basis_qr, soap_precondition_momentum,
soap_update_preconditioner, the momentum and order of Muon.step, zeropower_via_newtonschulz5: 12 iterations of
(2, -1.5, 0.5)), without what the record stacks on it (Contra-Muon, NorMuon-lite, the u/w floor), with a decoupled
weight decay, on every hidden matrix; the AdamW side is torch's arithmetic (tests/test_optim_normuon.py's). As the
record, the eigenbases and QR run in float32. On a tiny GPT through the registry, the same gradients for STEPS
steps at a changing learning rate, with a refresh of the bases inside them.
"""

import pytest
import torch

import optim.newton_schulz
from optim.soap_muon import SOAPMuon
from parity import STEPS, on_hidden_matrix
from test_optim_hyperball import modded_newton_schulz
from test_optim_normuon import adam_reference, run_beside_reference

SETTINGS = dict(compile=False, learning_rate=2e-2, weight_decay=0.05, muon_momentum=0.9, lr_1d=3e-3,
                weight_decay_1d=0.05, beta1_1d=0.8, beta2_1d=0.95, precondition_frequency=3)


def reference_eigenbasis(matrix):
    """soap_eigenbasis: eigh of the statistic (+ 1e-30 I) in float32, by decreasing eigenvalue."""
    _, q = torch.linalg.eigh(matrix.float() + 1e-30 * torch.eye(matrix.size(0)))
    return torch.flip(q, [1]).double()


def reference_basis_qr(row_gg, col_gg, q_row, q_col, exp_avg_sq):
    """soap_basis_qr, in float32: each basis ordered by diag(Q^T S Q), v reordered alike, then QR(S Q)."""
    row_gg, col_gg, q_row, q_col = row_gg.float(), col_gg.float(), q_row.float(), q_col.float()
    row_sort = torch.argsort(torch.diag(q_row.T @ row_gg @ q_row), descending=True)
    exp_avg_sq = exp_avg_sq.index_select(0, row_sort)
    q_row, _ = torch.linalg.qr(row_gg @ q_row[:, row_sort])
    col_sort = torch.argsort(torch.diag(q_col.T @ col_gg @ q_col), descending=True)
    exp_avg_sq = exp_avg_sq.index_select(1, col_sort)
    q_col, _ = torch.linalg.qr(col_gg @ q_col[:, col_sort])
    return q_row.double(), q_col.double(), exp_avg_sq


def reference_soap_muon(p, g, state, lr, hp):
    """Muon.step for one matrix with use_soap: the momentum, the preconditioning (from the second step), NS and
    the step, then the preconditioner's update with this gradient."""
    if not state:
        state.update(momentum=torch.zeros_like(p), exp_avg_sq=torch.zeros_like(p), q_row=None, q_col=None,
                     soap_step=0, row_gg=torch.zeros(p.size(0), p.size(0), dtype=p.dtype),
                     col_gg=torch.zeros(p.size(1), p.size(1), dtype=p.dtype))
    mu, beta2, eps = hp["muon_momentum"], hp["soap_beta2"], hp["soap_eps"]
    state["momentum"].lerp_(g, 1 - mu)
    update = g.lerp(state["momentum"], mu)
    if state["q_row"] is not None:  # soap_precondition_momentum
        q_row, q_col = state["q_row"], state["q_col"]
        projected = q_row.T @ update @ q_col
        state["exp_avg_sq"].mul_(beta2).add_(projected.square(), alpha=1 - beta2)
        precond = q_row @ (projected / state["exp_avg_sq"].sqrt().add(eps)) @ q_col.T
        update = precond * (update.norm() / precond.norm().clamp_min(eps))
    update = modded_newton_schulz(update) * max(1, p.size(0) / p.size(1)) ** 0.5
    p.mul_(1 - lr * hp["weight_decay"]).add_(update, alpha=-lr)
    shampoo_beta = hp["shampoo_beta"]  # soap_update_preconditioner
    state["row_gg"].lerp_(g @ g.T, 1 - shampoo_beta)
    state["col_gg"].lerp_(g.T @ g, 1 - shampoo_beta)
    if state["q_row"] is None:
        state["q_row"], state["q_col"] = reference_eigenbasis(state["row_gg"]), reference_eigenbasis(state["col_gg"])
    elif state["soap_step"] > 0 and state["soap_step"] % hp["precondition_frequency"] == 0:
        state["q_row"], state["q_col"], state["exp_avg_sq"] = reference_basis_qr(
            state["row_gg"], state["col_gg"], state["q_row"], state["q_col"], state["exp_avg_sq"])
    state["soap_step"] += 1


def reference_step(name, on_matrix_rule, p, g, state, multiplier, hp):
    if on_matrix_rule:
        reference_soap_muon(p, g, state, hp["learning_rate"] * multiplier, hp)
    else:
        adam_reference(p, g, state, hp["lr_1d"] * multiplier, hp)


def run_both(dtype: torch.dtype, reference_settings: dict | None = None, **settings):
    return run_beside_reference("soap-muon", {**SETTINGS, **settings}, dtype, on_hidden_matrix, reference_step,
                                reference_settings)


@pytest.mark.quick
def test_soap_muon_in_float64_is_the_records_arithmetic(monkeypatch):
    """Float64 (Newton-Schulz too) but for the eigenbases and QR, float32 in both: the matrices to 1e-9 (a
    float32 basis, applied in float64, rounds the same in both), the AdamW side to its float32 scalars.

    Not compared in float32: a few steps' statistics are rank-deficient (a 96 x 32 matrix's L has rank 32 after a
    step) and each new gradient has a large part in their null space, where eigh's basis is arbitrary; two float32
    runs whose statistics differ by rounding take different null-space bases and Adam's per-coordinate scaling
    differs there by O(1) (0.2 apart on these matrices at eps 1e-8, still 0.07 at 1e-3). In float64 both take eigh of the same float32
    statistics, so the same bases."""
    assert STEPS > 2 * SETTINGS["precondition_frequency"]  # (two refreshes of the bases)
    monkeypatch.setattr(optim.newton_schulz, "ns5_dtype", lambda device: torch.float64)
    errors = run_both(torch.float64)
    assert max(e for _, matrix, e in errors if matrix) < 1e-9, errors
    assert max(e for _, _, e in errors) < 2e-6, errors


def test_the_reference_tells_the_settings_apart(monkeypatch):
    """Another second-moment or statistics decay, or another refresh period, misses the reference by far more
    than rounding."""
    monkeypatch.setattr(optim.newton_schulz, "ns5_dtype", lambda device: torch.float64)
    for wrong in (dict(soap_beta2=0.95), dict(shampoo_beta=0.95), dict(precondition_frequency=2)):
        errors = run_both(torch.float64, reference_settings=wrong)
        assert max(e for _, matrix, e in errors if matrix) > 1e-4, (wrong, errors)


def test_the_first_step_is_muons():
    """With no bases yet, the first step is the track's Muon on the momentum (the bases are made after it)."""
    gen = torch.Generator().manual_seed(0)
    weights = [torch.randn(6, 10, generator=gen), torch.randn(10, 6, generator=gen)]
    grads = [torch.randn(w.shape, generator=gen) for w in weights]
    params = [torch.nn.Parameter(w.clone()) for w in weights]
    optimizer = SOAPMuon([dict(params=params, use_muon=True)], lr=0.1, momentum=0.9, compiled=False)
    for p, g in zip(params, grads):
        p.grad = g.clone()
    optimizer.step()
    for p, w, g in zip(params, weights, grads):
        direction = g.lerp(0.1 * g, 0.9)  # (the momentum after one step: 0.1 g)
        expected = w - 0.1 * modded_newton_schulz(direction) * max(1, w.shape[0] / w.shape[1]) ** 0.5
        torch.testing.assert_close(p.detach(), expected, atol=1e-5, rtol=1e-5)
        assert optimizer.state[p]["Q"][0].shape == (w.shape[0], w.shape[0])
