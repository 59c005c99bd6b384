"""
Tests of MARS-M (optim/mars_m.py, exact, approx and memory-efficient) and Moonlight
(optim/moonlight.py): float64 references that restate the official code
(AGI-Arena/MARS, MARS_M/optimizers/) tensor by tensor, both zero_grad modes,
state_dict resume, short training runs, and NS5 shared out under
`torchrun --nproc_per_node=2` (gloo), a scenario of the session's two-rank launch (conftest.two_ranks).
"""

import copy
import math

import pytest
import torch

from conftest import counted_orthogonalizations, scenario_result
import optim.rules
from optim.contract import needs_second_gradient
from optim.mars_m import MARSM
from optim.moonlight import Moonlight
from test_optim import (
    STEPS, TINY, assert_relative_close, gradient_stream, lr_multiplier, make_params, run_optimizer, save_and_load,
)
from model import GPT, GPTConfig

# ----------------------------------------------------------------------------- float64 references


def official_ns5(G: torch.Tensor, steps: int = 5) -> torch.Tensor:
    """zeropower_via_newtonschulz5 of the official code, without its bf16 cast."""
    a, b, c = (3.4445, -4.7750, 2.0315)
    X = G.T if G.size(0) > G.size(1) else G
    X = X / (X.norm() + 1e-7)
    for _ in range(steps):
        A = X @ X.T
        B = b * A + c * A @ A
        X = a * X + B @ X
    return X.T if G.size(0) > G.size(1) else X


def official_adamw(p, g, state, lr, wd, betas, eps):
    """The official "AdamW backup" of mars_m.py, mars_m_efficient.py and moonlight.py."""
    beta1, beta2 = betas
    state["step"] = step = state.get("step", 0) + 1
    buf1 = state.setdefault("moment1", torch.zeros_like(g))
    buf2 = state.setdefault("moment2", torch.zeros_like(g))
    buf1.lerp_(g, 1 - beta1)
    buf2.lerp_(g.square(), 1 - beta2)
    scale = (1 - beta1**step) / (1 - beta2**step) ** 0.5
    return p * (1 - lr * wd) - lr / scale * (buf1 / (eps + buf2.sqrt()))


def official_update(kind, p, g, g_prev, state, lr, group, hp):
    """One update of p in float64; kind: mars-m (exact or approx), mars-m-efficient or moonlight."""
    if p.ndim != 2:
        return official_adamw(p, g, state, lr, group.get("wd", hp["wd"]), hp["adamw_betas"], hp["adamw_eps"])
    momentum, gamma = hp["momentum"], hp.get("gamma", 0.0)
    buf = state.setdefault("momentum_buffer", torch.zeros_like(g))
    if kind == "moonlight":
        buf.mul_(momentum).add_(g)
        u = g.add(buf, alpha=momentum) if hp["nesterov"] else buf
    elif kind == "mars-m-efficient":
        buf.mul_(momentum).add_(g, alpha=(1 - gamma) * (1 - momentum) / momentum)
        u = g.mul(gamma).add(buf, alpha=momentum)
    else:
        c_t = (g - g_prev).mul(gamma * momentum / (1 - momentum)).add(g)
        if hp["clip_c"] and c_t.norm() > 1:
            c_t.div_(c_t.norm())
        buf.mul_(momentum).add_(c_t, alpha=1 - momentum)
        u = buf
    A, B = p.shape
    adjusted_lr = lr * 0.2 * math.sqrt(max(A, B))
    return p * (1 - lr * group.get("wd", hp["wd"])) - adjusted_lr * official_ns5(u)


def run_official(kind, hp, stream):
    params = [p.detach().double() for p in make_params()]
    states = [{} for _ in params]
    g_prev = [torch.zeros_like(p) for p in params]
    for step, grads in enumerate(stream):
        for i, (g, next_g) in enumerate(grads):
            group = GROUP_SETTINGS if params[i].ndim != 2 else {}
            params[i] = official_update(kind, params[i], g, g_prev[i], states[i], hp["lr"] * lr_multiplier(step),
                                        group, hp)
            # approx: the previous gradient; exact: the gradient at x_t on the next batch
            g_prev[i] = next_g if hp.get("is_approx") is False else g
    return params


# ----------------------------------------------------------------------------- the optimizers under test

GROUP_SETTINGS = dict(wd=0.05)  # the AdamW group's own weight decay (the official shares wd)
COMMON = dict(lr=1e-2, wd=0.1, momentum=0.95, ns_steps=5, adamw_betas=(0.9, 0.95), adamw_eps=1e-8)
VARIANTS = {  # name: (reference kind, constructor arguments)
    "mars-m-approx": ("mars-m", dict(COMMON, gamma=0.025, is_approx=True, clip_c=True)),
    "mars-m-exact": ("mars-m", dict(COMMON, gamma=0.025, is_approx=False, clip_c=True)),
    "mars-m-approx-unclipped": ("mars-m", dict(COMMON, gamma=0.025, is_approx=True, clip_c=False)),
    "mars-m-efficient": ("mars-m-efficient", dict(COMMON, gamma=0.025, efficient=True)),
    "moonlight": ("moonlight", dict(COMMON, nesterov=True)),
    "moonlight-no-nesterov": ("moonlight", dict(COMMON, nesterov=False)),
}


def make_optimizer(name, params, **overrides):
    kind, hp = VARIANTS[name]
    hp = {**hp, **overrides}
    groups = [dict(params=[p for p in params if p.ndim == 2], use_muon=True),
              dict(params=[p for p in params if p.ndim != 2], use_muon=False, weight_decay=GROUP_SETTINGS["wd"])]
    if kind == "moonlight":
        return Moonlight(groups, **hp, compiled=False)
    return MARSM(groups, **hp, compiled=False)


@pytest.mark.parametrize("set_to_none", [True, False], ids=["set_to_none", "zero_in_place"])
@pytest.mark.parametrize("name", list(VARIANTS))
def test_matches_float64_restatement_of_the_official_code(name, set_to_none):
    kind, hp = VARIANTS[name]
    stream = gradient_stream(STEPS)
    params = make_params()
    run_optimizer(make_optimizer(name, params), params, stream, set_to_none)
    assert_relative_close(params, run_official(kind, hp, stream), rtol=1e-6)


@pytest.mark.parametrize("name, wrong", [("mars-m-approx", dict(gamma=0.0)), ("mars-m-exact", dict(is_approx=True)),
                                         ("mars-m-approx", dict(clip_c=False)), ("moonlight", dict(nesterov=False))])
def test_the_reference_tells_the_variants_apart(name, wrong):
    kind, hp = VARIANTS[name]
    stream = gradient_stream(STEPS)
    params = make_params()
    run_optimizer(make_optimizer(name, params, **wrong), params, stream)
    with pytest.raises(AssertionError):
        assert_relative_close(params, run_official(kind, hp, stream), rtol=1e-6)


def test_efficient_is_approx_without_the_clip():
    stream = gradient_stream(STEPS)
    results = []
    for name in ("mars-m-efficient", "mars-m-approx-unclipped"):
        params = make_params()
        run_optimizer(make_optimizer(name, params), params, stream)
        results.append(params)
    for efficient, unclipped in zip(*results):
        torch.testing.assert_close(efficient, unclipped, rtol=1e-5, atol=1e-6)


def test_arguments_and_state():
    params = make_params()
    assert MARSM(params).clip_c and not MARSM(params, efficient=True).clip_c  # the official clips always
    assert MARSM(params, is_approx=False).needs_grad_on_next_batch and not MARSM(params).needs_grad_on_next_batch
    for wrong in (dict(efficient=True, clip_c=True), dict(efficient=True, is_approx=False), dict(momentum=1.0)):
        with pytest.raises(ValueError):
            MARSM(params, **wrong)
    with pytest.raises(ValueError, match="2-D"):
        MARSM([dict(params=params, use_muon=True)])
    for p in params:
        p.grad = torch.ones_like(p)
    with pytest.raises(RuntimeError, match="stash_grad_for_next_step"):
        MARSM(params, is_approx=False, compiled=False).step()

    expected_matrix_state = {"mars-m-approx": {"momentum_buffer", "last_grad"},
                             "mars-m-efficient": {"momentum_buffer"}, "moonlight": {"momentum_buffer"}}
    for name, matrix_state in expected_matrix_state.items():
        opt = make_optimizer(name, params)
        opt.step()
        for p in params:
            assert set(opt.state[p]) == (matrix_state if p.ndim == 2 else {"step", "exp_avg", "exp_avg_sq"})
        if name == "mars-m-approx":
            assert opt.state[params[0]]["last_grad"] is params[0].grad  # kept by reference, as the official


@pytest.mark.parametrize("name", ["mars-m-approx", "mars-m-exact", "mars-m-efficient", "moonlight"])
def test_state_dict_resume_equals_not_stopping(name):
    stream = gradient_stream(12)
    straight = make_params()
    run_optimizer(make_optimizer(name, straight), straight, stream)

    first = make_params()
    opt = make_optimizer(name, first)
    run_optimizer(opt, first, stream[:6])
    saved_state, saved_params = save_and_load(opt), copy.deepcopy([p.detach() for p in first])
    resumed = [torch.nn.Parameter(p) for p in saved_params]
    opt = make_optimizer(name, resumed)
    opt.load_state_dict(saved_state)
    run_optimizer(opt, resumed, stream[6:], start=6)
    for a, b in zip(resumed, straight):
        assert torch.equal(a, b)


def test_compiled_adamw_rule_gives_the_eager_numbers():
    stream = gradient_stream(5)
    results = []
    for compiled in (False, True):
        params = make_params()
        groups = [dict(params=[p for p in params if p.ndim == 2], use_muon=True),
                  dict(params=[p for p in params if p.ndim != 2], use_muon=False)]
        run_optimizer(Moonlight(groups, **VARIANTS["moonlight"][1], compiled=compiled), params, stream)
        results.append(params)
    assert not optim.rules.UNCORRECTED_EPS_ADAMW.compile_failed  # a fallback to eager mode would prove nothing
    for eager, compiled in zip(*results):
        torch.testing.assert_close(compiled, eager, rtol=1e-6, atol=1e-7)


# ----------------------------------------------------------------------------- training a tiny GPT


@pytest.mark.parametrize("name", ["mars-m-approx", "mars-m-exact", "mars-m-efficient", "moonlight"])
@pytest.mark.quick
def test_short_training_run_lowers_the_loss(name):
    torch.manual_seed(0)
    model = GPT(GPTConfig(**TINY))
    # The official split: the embeddings (and the tied lm_head) and the 1-D parameters on AdamW.
    on_adamw = {id(model.transformer.wte.weight), id(model.transformer.wpe.weight)}
    matrices = [p for p in model.parameters() if p.ndim == 2 and id(p) not in on_adamw]
    others = [p for p in model.parameters() if p.ndim != 2 or id(p) in on_adamw]
    kind, hp = VARIANTS[name]
    hp = {**hp, "lr": 1e-2, "wd": 0.0}
    opt = (Moonlight if kind == "moonlight" else MARSM)(
        [dict(params=matrices, use_muon=True), dict(params=others, use_muon=False)], **hp, compiled=False)
    batches = torch.randint(0, TINY["vocab_size"], (4, 8, TINY["block_size"] + 1))

    def backward(batch):
        loss = model(batch[:, :-1], batch[:, 1:])[1]
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        return loss.item()

    losses = []
    for step in range(40):
        if needs_second_gradient(opt):  # MARS-M exact
            backward(batches[(step + 1) % 4])
            opt.stash_grad_for_next_step()
            opt.zero_grad(set_to_none=True)
        losses.append(backward(batches[step % 4]))
        opt.step()
        opt.zero_grad(set_to_none=True)
    assert sum(losses[-4:]) / 4 < sum(losses[:4]) / 4 - 0.5, losses


# ----------------------------------------------------------------------------- NS5 shared out across ranks

DDP_SHAPES = [(48, 32), (32, 96), (64, 64), (16, 16), (96,), (32,)]
DDP_STEPS = 4


def run_on_fixed_gradients() -> tuple[dict[str, list[torch.Tensor]], int]:
    """A few steps of each optimizer on fixed parameters and gradients (the same on every
    rank): the final parameters per optimizer, and how many matrices this process orthogonalised."""
    results = {}
    with counted_orthogonalizations() as calls:
        for name in ("mars-m-approx", "mars-m-efficient", "moonlight"):
            gen = torch.Generator().manual_seed(0)
            params = [torch.nn.Parameter(torch.randn(s, generator=gen)) for s in DDP_SHAPES]
            opt = make_optimizer(name, params)
            for _ in range(DDP_STEPS):
                for p in params:
                    p.grad = torch.randn(p.shape, generator=gen) * 0.1
                opt.step()
            results[name] = [p.detach() for p in params]
    return results, calls[0]


def two_rank_scenarios(tiny_dataset: str, folder) -> list[tuple]:
    return [("optim_mars_m", "conftest:results_of_ranks", dict(run="test_optim_mars_m:run_on_fixed_gradients"))]


def test_two_ranks_under_torchrun_equal_one_process(two_ranks):
    result = scenario_result(two_ranks, "optim_mars_m")
    expected, single_calls = run_on_fixed_gradients()
    for name, wanted in expected.items():
        for actual, want in zip(result["params"][name], wanted):
            torch.testing.assert_close(actual, want, rtol=1e-6, atol=1e-6)
    assert single_calls == 3 * DDP_STEPS * sum(len(s) == 2 for s in DDP_SHAPES)
    assert sum(result["calls"]) == single_calls  # no rank repeats another's work
    assert all(0 < calls < single_calls for calls in result["calls"])
