"""
Dion2 and NorDion2 (optim/dion2.py) against a float64 restatement of their authors' code: microsoft/dion at
0a059a4, dion/dion2.py (the single-device path of dion2_update_megabatch_async: dion2_pre_orthogonalize, then
dion2_post_orthogonalize), dion/nordion2.py (nordion2_normalize_selected_stacked, with dion/normuon.py's
_normuon_normalization_core), the Newton-Schulz of their runs (dion/muon.py's zeropower_via_newtonschulz5, the
triples newton_schulz_triton runs, epsilon the optimizer's), and dion/scalar_opts.py's AdamW with the routing of
their train.py, as tests/test_optim_dion.py restates them. On a tiny GPT through the registry, the same gradients
for STEPS steps at a changing learning rate; its four matrix shapes select rows (square, wide) and columns (tall).
"""

import math

import pytest
import torch

import optim.dion2
import optim.newton_schulz
from optim.dion2 import Dion2
from parity import on_hidden_matrix
from test_optim_dion import AUTHORS_SCALAR_BETAS, reference_adamw
from test_optim_normuon import run_beside_reference

DION_NS = ((4.0848, -6.8946, 2.9270), (3.9505, -6.3029, 2.6377), (3.7418, -5.5913, 2.3037),
           (2.8769, -3.1427, 1.2046), (2.8366, -3.0525, 1.2012))
SETTINGS = dict(compile=False, learning_rate=2e-2, weight_decay=0.1, dion_momentum=0.9)


def reference_newton_schulz(G, epsilon):
    """zeropower_via_newtonschulz5 of dion/muon.py (in the reference's precision, not bf16)."""
    tall = G.size(-2) > G.size(-1)
    X = G.mT if tall else G
    X = X / (X.norm(dim=(-2, -1), keepdim=True) + epsilon)
    for a, b, c in DION_NS:
        A = X @ X.mT
        X = a * X + (b * A + c * (A @ A)) @ X
    return X.mT if tall else X


def reference_normalization(U, V, beta2):
    """_normuon_normalization_core: U's rows divided by their running RMS, rescaled to U's Frobenius norm."""
    norm = U.norm(p=2, dim=(-2, -1), keepdim=True)
    V = torch.lerp(V, (U * U).mean(dim=-1, keepdim=True), 1 - beta2)
    normalized = U / (V.sqrt() + 1e-8)
    return normalized * (norm / normalized.norm(p=2, dim=(-2, -1), keepdim=True).clamp(min=1e-8)), V


def reference_dion2(X, G, state, lr, hp, nor):
    """One matrix's step: M += G; the top-k slices by L1 norm along the shorter side (NorDion2: rows), decayed by
    mu in M; their Newton-Schulz (NorDion2: normalized, v updated on those rows); X decayed, the slices updated at
    lr * sqrt(rows / cols)."""
    M = state.setdefault("M", torch.zeros_like(X))
    M.add_(G)
    select_dim = -2 if nor or X.size(0) <= X.size(1) else -1
    k = max(1, math.ceil(hp["ortho_fraction"] * M.size(select_dim)))
    norms = M.norm(p=1, dim=-1 if select_dim == -2 else -2)
    indices = torch.topk(norms, k, sorted=False).indices
    selected = M.index_select(select_dim, indices)
    M.index_copy_(select_dim, indices, selected * hp["dion_momentum"])
    U = reference_newton_schulz(selected, hp["dion_eps"])
    if nor:
        V = state.setdefault("V", torch.zeros(X.size(0), 1, dtype=X.dtype))
        U, V_selected = reference_normalization(U, V[indices], hp["normuon_beta2"])
        V[indices] = V_selected
    X.mul_(1 - lr * hp["weight_decay"])
    X.index_add_(select_dim, indices, U, alpha=-lr * math.sqrt(X.size(0) / X.size(1)))


def run_both(name: str, dtype: torch.dtype, reference_settings: dict | None = None, **settings):
    nor = name == "nordion2"

    def reference_step(n, on_matrix_rule, p, g, state, multiplier, hp):
        lr = hp["learning_rate"] * multiplier
        if on_matrix_rule:
            reference_dion2(p, g, state, lr, hp, nor)
        else:
            state["step"] = state.get("step", 0) + 1
            reference_adamw(p, g, state, lr, *AUTHORS_SCALAR_BETAS, hp["dion_eps"], state["step"])

    return run_beside_reference(name, {**SETTINGS, **settings}, dtype, on_hidden_matrix, reference_step,
                                reference_settings)


@pytest.fixture
def float64_newton_schulz(monkeypatch):
    for module in (optim.newton_schulz, optim.dion2):
        monkeypatch.setattr(module, "ns5_dtype", lambda device: torch.float64)


@pytest.mark.parametrize("name, settings", [
    pytest.param("dion2", {}, id="dion2", marks=pytest.mark.quick),
    pytest.param("dion2", dict(ortho_fraction=0.3), id="dion2-fraction-0.3"),
    pytest.param("nordion2", dict(normuon_beta2=0.8), id="nordion2"),
])
def test_dion2_in_float64_is_its_authors_arithmetic(float64_newton_schulz, name, settings):
    """The matrices to float64 rounding (the AdamW side's float32 scalars: float32 rounding, as Dion's)."""
    errors = run_both(name, torch.float64, **settings)
    assert max(e for _, matrix, e in errors if matrix) < 1e-12, errors
    assert max(e for _, _, e in errors) < 2e-6, errors


@pytest.mark.parametrize("name", ["dion2", "nordion2"])
def test_dion2_in_float32_lands_on_the_reference(name):
    errors = run_both(name, torch.float32)
    assert max(e for _, _, e in errors) < 2e-6, errors


def test_the_reference_tells_the_settings_apart(float64_newton_schulz):
    """Another fraction, decay or second-moment beta misses the reference by far more than rounding; so does
    Dion2 against NorDion2's reference with the same settings (rows only, and the normalisation)."""
    for name, wrong in (("dion2", dict(ortho_fraction=0.25)), ("dion2", dict(dion_momentum=0.95)),
                        ("nordion2", dict(normuon_beta2=0.9))):
        errors = run_both(name, torch.float64, reference_settings=wrong)
        assert max(e for _, matrix, e in errors if matrix) > 1e-3, (name, wrong, errors)


def test_only_the_selected_slices_move_and_their_momentum_decays():
    """One step on one matrix of each orientation: outside the k selected slices the weight only decays and the
    momentum is the gradient; inside, the momentum is mu times it. The step's declared Newton-Schulz is of the
    submatrices (k x cols for a wide matrix, rows x k for a tall one)."""
    gen = torch.Generator().manual_seed(0)
    wide, tall = torch.randn(8, 20, generator=gen), torch.randn(20, 8, generator=gen)
    params = [torch.nn.Parameter(wide.clone()), torch.nn.Parameter(tall.clone())]
    optimizer = Dion2([dict(params=params, use_muon=True)], lr=0.1, ortho_fraction=0.25, mu=0.5, weight_decay=0.0)
    for p in params:
        p.grad = torch.randn(p.shape, generator=gen)
    grads = [p.grad.clone() for p in params]
    optimizer.step()
    for p, before, g, dim in zip(params, (wide, tall), grads, (0, 1)):
        moved = (p.detach() != before).any(dim=1 - dim)
        assert moved.sum() == 2, moved  # ceil(0.25 * 8) slices
        top = g.abs().sum(dim=1 - dim).topk(2).indices
        assert set(moved.nonzero().flatten().tolist()) == set(top.tolist())
        momentum = optimizer.state[p]["momentum_buffer"]
        factor = torch.where(moved, 0.5, 1.0)
        torch.testing.assert_close(momentum, g * (factor[:, None] if dim == 0 else factor[None, :]))
    first = optimizer.products()[0]  # X X^T of the two 2 x 20 submatrices (one transposed), batched
    assert (first.batch, first.rows, first.inner, first.cols) == (2, 2, 20, 2)
