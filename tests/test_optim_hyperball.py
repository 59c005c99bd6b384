"""
The hyperball optimizers, AdamH (optim/adamh.py) and MuonH (optim/muonh.py), against float64 restatements of their
authors' code in marin-community/marin: lib/levanter/src/levanter/optim/adamh.py at
7cb2d65fdad8e407a964a9d267e8172a955d8520 (scale_by_adamh, AdamHConfig.create_mask and its optax.scale_by_adam
branch) and lib/levanter/src/levanter/optim/muonh.py at ab6e485c6250984825d2ecbb983b3c02e247e062 (scale_with_muonh,
MuonHConfig.create_mask; Newton-Schulz from levanter/optim/muon.py at 5c0dda23451c7b33662a11ace7ff244827ba4011),
built through the registry on a tiny GPT (so the routing is part of what is checked) and run on the same gradients
(tests/parity.py's), with marin's max_grad_norm off (our loop clips, once, over the whole model). And
against the authors' PyTorch versions in KellerJordan/modded-nanogpt at f411b3d346aa52d3504324ca93c230fd84c6c07f,
records/track_3_optimization/results/20260430_muonh/train_gpt_simple_muonh.py and the AdamH script logged in
20260430_adamh/7533dd87-107f-4a4f-8229-acbec0fb00ac.txt, in the settings that express them.
"""

import pytest
import torch

import optim.newton_schulz
from model import GPT, GPTConfig
from optim import build_optimizer
from optim.adamh import hyperball_routes
from parity import STEPS, lr_multiplier, scheduled_step
from test_optim import TINY, tiny_config

# ----------------------------------------------------------------------------- float64 restatements of marin's code


def marin_scale_invariant_update(p, u, lr):
    """scale_invariant_update of a 2-D parameter: the new p (marin returns new p - p as the update)."""
    new_p = p - lr * u * p.norm() / torch.clamp(u.norm(), min=1e-10)
    return new_p / new_p.norm() * p.norm()


def marin_adam_direction(g, state, b1, b2, eps):
    """optax.scale_by_adam's (and scale_by_adamh's) m_hat / (sqrt(v_hat) + eps), its moments in state."""
    state["count"] = count = state.get("count", 0) + 1
    state["mu"] = mu = (1 - b1) * g + b1 * state.get("mu", torch.zeros_like(g))
    state["nu"] = nu = (1 - b2) * g * g + b2 * state.get("nu", torch.zeros_like(g))
    return (mu / (1 - b1**count)) / (torch.sqrt(nu / (1 - b2**count)) + eps)


def marin_newton_schulz(x, steps, eps):
    """levanter's zeropower_via_newtonschulz5 (the norm taken before the transpose, as there)."""
    a, b, c = (3.4445, -4.7750, 2.0315)
    x = x / (x.norm() + eps)
    transpose = x.shape[0] > x.shape[1]
    if transpose:
        x = x.T
    for _ in range(steps):
        gram = x @ x.T
        x = a * x + (b * gram + c * gram @ gram) @ x
    return x.T if transpose else x


def marin_muonh_direction(g, state, hp):
    """scale_with_muonh before its scale_invariant_update: Nesterov momentum (sum form), then Newton-Schulz."""
    momentum = hp["muon_momentum"]
    state["buf"] = buf = momentum * state.get("buf", torch.zeros_like(g)) + g
    u = momentum * buf + g if hp["muon_nesterov"] else buf
    return marin_newton_schulz(u, hp["ns_steps"], hp["muon_eps"])


def marin_rule(name, p, kind, hp):
    """create_mask on our GPT: the token and position tables are Embeddings (the tied head is the token table's,
    an Embedding first), the blocks' Linear weights muonh/adamh, biases and LayerNorm weights adam."""
    if p.ndim == 2 and ".wte." not in name and ".wpe." not in name:
        return kind
    return "adam"


def marin_tangent_projection(p, g):
    """scale_by_adamh's and scale_with_muonh's tangent_projection: g minus its projection on p."""
    return g - (torch.vdot(p.flatten(), g.flatten()) / torch.clamp(p.norm() ** 2, min=1e-10)) * p


def marin_step(p, g, state, rule, lr, adam_lr, hp):
    if rule == "adam":
        return p - adam_lr * marin_adam_direction(g, state, hp["adam_beta1"], hp["adam_beta2"], hp["adam_eps"])
    if hp["tangent_projection"]:
        g = marin_tangent_projection(p, g)
    if rule == "adamh":
        u = marin_adam_direction(g, state, hp["beta1"], hp["beta2"], hp["eps"])
    else:
        u = marin_muonh_direction(g, state, hp)
    return marin_scale_invariant_update(p, u, lr)


# ----------------------------------------------------------------------------- float64 restatements of modded-nanogpt's


def modded_newton_schulz(g, steps=12):
    """train_gpt_simple_muonh.py's zeropower_via_newtonschulz5 (in float64, not bf16)."""
    x = g.T if g.size(0) > g.size(1) else g
    x = x / (x.norm() + 1e-7)
    for _ in range(steps):
        gram = x @ x.T
        x = 2 * x + (-1.5 * gram + 0.5 * gram @ gram) @ x
    return x.T if g.size(0) > g.size(1) else x


def modded_step(p, g, state, rule, lr, adam_lr, hp):
    """Their MuonH (muon_update, an EMA momentum with Nesterov as a lerp) or AdamH on the blocks' matrices, then
    scale_invariant_update_ (||u|| and ||W'|| clamped at 1e-10); their AdamW (no decay) on the rest."""
    if rule == "adam":
        return p - adam_lr * marin_adam_direction(g, state, hp["adam_beta1"], hp["adam_beta2"], hp["adam_eps"])
    if rule == "adamh":
        u = marin_adam_direction(g, state, hp["beta1"], hp["beta2"], hp["eps"])
    else:
        mu = hp["muon_momentum"]
        state["momentum"] = momentum = torch.lerp(state.get("momentum", torch.zeros_like(g)), g, 1 - mu)
        u = modded_newton_schulz(torch.lerp(g, momentum, mu)) * max(1, g.size(0) / g.size(1)) ** 0.5
    new_p = p - lr * u * p.norm() / torch.clamp(u.norm(), min=1e-10)
    return new_p / torch.clamp(new_p.norm(), min=1e-10) * p.norm()


# ----------------------------------------------------------------------------- ours against them

SETTINGS = dict(learning_rate=0.05, adam_lr=3e-3, beta2=0.9, adam_beta1=0.8, adam_eps=1e-10)
MUONH_SETTINGS = dict(muon_momentum=0.9)


def run_against_marin(name, dtype, reference_step=marin_step, **settings):
    """STEPS steps of ours (the registry's, on a tiny GPT in dtype) and of marin's restatement (or another
    reference_step) on the same gradients: the largest relative difference of a parameter."""
    cfg = tiny_config(optimizer=name, **SETTINGS, **(MUONH_SETTINGS if name == "muonh" else {}), **settings)
    hp = cfg.hyperparameters.to_dict()
    torch.manual_seed(0)
    model = GPT(GPTConfig(**TINY)).to(dtype)
    reference = [p.detach().double().clone() for p in model.parameters()]
    rules = [marin_rule(n, p, name, hp) for n, p in model.named_parameters()]
    optimizer = build_optimizer(model, cfg, "cpu")
    states = [{} for _ in reference]
    for step in range(STEPS):
        grads = scheduled_step(model, optimizer, step)
        multiplier = lr_multiplier(step)
        for i, (g, state, rule) in enumerate(zip(grads, states, rules)):
            reference[i] = reference_step(reference[i], g, state, rule, cfg.learning_rate * multiplier,
                                      hp["adam_lr"] * multiplier, hp)
    return max(((p.detach().double() - q).norm() / q.norm()).item() for p, q in zip(model.parameters(), reference))


# AdamH to float32 rounding in float32 and to float64 rounding in float64; MuonH's Newton-Schulz runs in float32 on
# the CPU (optim/newton_schulz.ns5_dtype) whatever the weights' dtype, so float32 rounding bounds it here (float64
# weights land at 1.6e-7); test_muonh_in_float64_is_its_authors_arithmetic runs it in float64, as marin's does.
PARITY = [pytest.param("adamh", torch.float32, {}, 2e-6, marks=pytest.mark.quick),
          ("adamh", torch.float64, {}, 1e-12),
          ("adamh", torch.float64, dict(hyperball_radius="current"), 1e-12),
          ("adamh", torch.float64, dict(tangent_projection=True), 1e-12),
          ("muonh", torch.float32, {}, 1e-6),
          ("muonh", torch.float32, dict(muon_nesterov=False, hyperball_radius="current"), 1e-6),
          ("muonh", torch.float32, dict(tangent_projection=True), 1e-6)]


@pytest.mark.parametrize("name, dtype, settings, tolerance", PARITY)
def test_hyperball_matches_marins_code(name, dtype, settings, tolerance):
    assert run_against_marin(name, dtype, **settings) < tolerance


# modded-nanogpt's track as settings: the head with the embeddings on Adam (here tied, which the tied matrix's
# default already does), the radius recomputed each step; MuonH's 12 iterations of their "simple" coefficients.
MODDED = dict(hyperball_head=False, hyperball_radius="current")
MODDED_MUONH = dict(MODDED, ns_coefficients="simple", ns_steps=12, muon_eps=1e-7)


@pytest.mark.parametrize("name, settings", [("adamh", MODDED), ("muonh", MODDED_MUONH)])
def test_hyperball_matches_modded_nanogpts_code(name, settings):
    assert run_against_marin(name, torch.float32, reference_step=modded_step, **settings) < 1e-6


# With Newton-Schulz in float64 too (marin's runs in the parameter's dtype; ours in ns5_dtype, float32 on the CPU):
# against marin's code every parameter, MuonH's matrices and the Adam side, to float64 rounding (2e-15 measured);
# against modded-nanogpt's to 1e-9 (4.5e-10 measured): its EMA momentum is (1 - mu) times marin's sum, the same
# direction but for Newton-Schulz's X / (||X|| + 1e-7), whose eps then weighs 1 / (1 - mu) times more.
MUONH_FLOAT64 = [(marin_step, {}, 1e-12),
                 (marin_step, dict(muon_nesterov=False, hyperball_radius="current"), 1e-12),
                 (marin_step, dict(tangent_projection=True), 1e-12),
                 (marin_step, dict(tangent_projection=True, muon_nesterov=False), 1e-12),
                 (modded_step, MODDED_MUONH, 1e-9)]


@pytest.mark.parametrize("reference_step, settings, tolerance", MUONH_FLOAT64,
                         ids=["marin", "marin-no-nesterov-current-radius", "marin-tangent-projection",
                              "marin-tangent-projection-no-nesterov", "modded-nanogpt"])
def test_muonh_in_float64_is_its_authors_arithmetic(monkeypatch, reference_step, settings, tolerance):
    monkeypatch.setattr(optim.newton_schulz, "ns5_dtype", lambda device: torch.float64)
    assert run_against_marin("muonh", torch.float64, reference_step=reference_step, **settings) < tolerance


@pytest.mark.parametrize("name, wrong", [("adamh", dict(hyperball_tied_embedding=True)),
                                         ("muonh", dict(ns_coefficients="polar_express"))])
def test_the_reference_tells_settings_apart(name, wrong):
    assert run_against_marin(name, torch.float32, **wrong) > 1e-3
    if name == "muonh":  # and modded-nanogpt's Newton-Schulz from marin's
        assert run_against_marin(name, torch.float32, reference_step=modded_step, **MODDED) > 1e-3


@pytest.mark.parametrize("name", ["adamh", "muonh"])
def test_tangent_projection_moves_the_weights_otherwise(name):
    """tangent_projection=True against marin's step without it: the setting changes the numbers (7e-3, 1e-2)."""
    def without_projection(p, g, state, rule, lr, adam_lr, hp):
        return marin_step(p, g, state, rule, lr, adam_lr, hp | dict(tangent_projection=False))
    assert run_against_marin(name, torch.float32, reference_step=without_projection, tangent_projection=True) > 1e-3


@pytest.mark.parametrize("name", ["adamh", "muonh"])
def test_the_hidden_matrices_keep_their_initial_norms(name):
    """Every matrix on the hyperball ends at its initial norm (to float32 rounding), the others move freely."""
    torch.manual_seed(0)
    model = GPT(GPTConfig(**TINY))
    optimizer = build_optimizer(model, tiny_config(optimizer=name, learning_rate=0.1), "cpu")
    initial = [p.detach().norm().item() for p in model.parameters()]
    for step in range(STEPS):
        scheduled_step(model, optimizer, step)
    on_ball = {id(p) for g in optimizer.param_groups if g["rule"] != "adam" for p in g["params"]}
    assert len(on_ball) == 4 * TINY["n_layer"]
    for p, norm in zip(model.parameters(), initial):
        if id(p) in on_ball:
            assert p.norm().item() == pytest.approx(norm, rel=1e-6)
            assert optimizer.state[p]["radius"].item() == pytest.approx(norm, rel=1e-6)


@pytest.mark.parametrize("tied", [True, False], ids=["tied", "untied"])
def test_the_head_takes_adamh_where_its_setting_says(tied):
    """marin's mask: an untied head (lm_head, a Linear) on AdamH, unless hyperball_head=False; the tied matrix
    an Embedding's (Adam), unless hyperball_tied_embedding=True; the embeddings and 1-D parameters Adam."""
    model = GPT(GPTConfig(**TINY, tie_embeddings=tied))
    head, embedding = model.lm_head.weight, model.transformer.wte.weight
    for name, matrices in (("adamh", "adamh"), ("muonh", "muonh")):
        for settings, expected in (({}, "adam" if tied else "adamh"), (dict(hyperball_head=False), "adam"),
                                   (dict(hyperball_tied_embedding=True), "adamh")):
            hp = tiny_config(optimizer=name, **settings).hyperparameters
            rule_of = {id(p): rule for rule, params in hyperball_routes(model, hp, matrices) for p in params}
            assert rule_of[id(head)] == expected, (name, settings)
            assert rule_of[id(model.transformer.h[0].mlp.c_fc.weight)] == matrices
            assert rule_of[id(model.transformer.wpe.weight)] == rule_of[id(model.transformer.ln_f.weight)] == "adam"
            if not tied:
                assert rule_of[id(embedding)] == "adam"
