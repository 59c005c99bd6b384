"""
The baselines (Lion, NAdamW, AdEMAMix, Schedule-Free AdamW, SOAP, ADOPT, Signum, Cautious AdamW) against float64
restatements of their authors' reference implementations, on a tiny GPT built through the registry (so the
routing table's decay groups are part of what is checked): iShohei220/adopt at 6468572 (src/adopt/adopt.py),
epfml/llm-optimizer-benchmark at fdecd5d (src/optim/sign.py, the Signum the benchmark runs),
kyleliang919/C-Optim at 2c0517c (c_adamw.py), google/automl lion/lion_pytorch.py, AlgoPerf's
NAdamW (mlcommons/algorithmic-efficiency, algorithms/baselines/external_tuning/
pytorch_nadamw_full_budget.py), apple/ml-ademamix pytorch/ademamix.py,
facebookresearch/schedule_free's AdamWScheduleFree (the `schedulefree` package we depend on, checked
against its algorithm restated here), nikhilvyas/SOAP soap.py and konstmish/prodigy (the `prodigyopt` package,
called directly). Each float32
trajectory must land on the float64 one to float32 rounding; and the registry's contract (the
capabilities each optimizer declares) is checked for every entry.
"""

import io
import itertools
import math
import os

import numpy as np
import pytest
import torch
from torch.utils._pytree import tree_leaves

from checkpoint import restore_training_state
from config import ConfigError
from data.loader import LABEL_DRAW_RANGE
from model import GPT, GPTConfig
from optim import HYPERPARAMETERS, OPTIMIZERS, build_optimizer, load_config
from optim.sophia import sampled_labels
from optim.adamw import decay_routing
from optim.contract import (
    EvaluationWeights, HessianEstimate, Product, SecondGradient, VarianceReduction, evaluation_weights,
    needs_hessian_estimate, needs_second_gradient,
)
from optim.routing import weight_decay_groups
from errors import InputError
from conftest import run_train, tiny_run_args
from data.loader import TokenWindows, TrainBatches
from test_optim import TINY, tiny_config
from test_train import load_weights, read_metrics

STEPS = 8


def lion_reference(p, g, state, lr, wd, hp):
    b1, b2 = hp["beta1"], hp["beta2"]
    m = state.setdefault("m", torch.zeros_like(p))
    p.mul_(1 - lr * wd)
    p.sub_(lr * torch.sign(m * b1 + g * (1 - b1)))
    state["m"] = m * b2 + g * (1 - b2)


def nadamw_reference(p, g, state, lr, wd, hp):
    """AlgoPerf's nadamw(), op for op: m updated twice in place for the numerator, then the second undone."""
    b1, b2, eps = hp["beta1"], hp["beta2"], hp["eps"]
    t = state["t"] = state.get("t", 0) + 1
    m, v = state.setdefault("m", torch.zeros_like(p)), state.setdefault("v", torch.zeros_like(p))
    p.mul_(1 - lr * wd)
    m.mul_(b1).add_(g, alpha=1 - b1)
    v.mul_(b2).addcmul_(g, g, value=1 - b2)
    m.mul_(b1).add_(g, alpha=1 - b1)
    denom = (v.sqrt() / math.sqrt(1 - b2**t)).add_(eps)
    p.addcdiv_(m, denom, value=-lr / (1 - b1**t))
    m.sub_(g, alpha=1 - b1).div_(b1)


def ademamix_reference(p, g, state, lr, wd, hp):
    b1, b2, b3_final, eps = hp["beta1"], hp["beta2"], hp["beta3"], hp["eps"]
    t = state["t"] = state.get("t", 0) + 1
    warm = hp["warmup"]
    alpha = hp["alpha"] * t / warm if t < warm else hp["alpha"]

    def half_life(b):
        return math.log(0.5) / math.log(b + 1e-8) - 1

    b3 = 0.5 ** (1 / ((1 - t / warm) * half_life(b1) + t / warm * half_life(b3_final) + 1)) if t < warm else b3_final
    m1, m2, v = (state.setdefault(k, torch.zeros_like(p)) for k in ("m1", "m2", "v"))
    m1.mul_(b1).add_(g * (1 - b1))
    m2.mul_(b3).add_(g * (1 - b3))
    v.mul_(b2).add_(g * g * (1 - b2))
    update = (m1 / (1 - b1**t) + alpha * m2) / (v.sqrt() / math.sqrt(1 - b2**t) + eps)
    p.sub_(lr * (update + wd * p))


def schedule_free_reference(p, g, state, lr, wd, hp, group_state):
    """One parameter's step; group_state holds the group's k, lr_max and weight_sum (advanced once per
    group and step by the caller, before its parameters)."""
    b1, b2, eps = hp["beta1"], hp["beta2"], hp["eps"]
    k, ckp1, scheduled_lr = group_state["k"] - 1, group_state["ckp1"], group_state["lr"]
    z, v = state.setdefault("z", p.clone()), state.setdefault("v", torch.zeros_like(p))
    v.mul_(b2).add_(g * g * (1 - b2))
    normalized = g / ((v / (1 - b2 ** (k + 1))).sqrt() + eps) + wd * p
    p.lerp_(z, ckp1)
    p.add_(scheduled_lr * (b1 * (1 - ckp1) - 1) * normalized)
    z.sub_(scheduled_lr * normalized)


def adopt_reference(p, g, state, lr, wd, hp):
    """iShohei220/adopt's _single_tensor_adopt: v from the first gradient alone, then the clipped normalised
    gradient averaged, v updated last."""
    b1, b2, eps = hp["beta1"], hp["beta2"], hp["eps"]
    k = state.get("k", 0)
    m, v = state.setdefault("m", torch.zeros_like(p)), state.setdefault("v", torch.zeros_like(p))
    if not hp["adopt_decoupled"]:
        g = g.add(p, alpha=wd)
    state["k"] = k + 1
    if k == 0:
        v.addcmul_(g, g)
        return
    if hp["adopt_decoupled"]:
        p.add_(p, alpha=-lr * wd)
    normalised = g.div(torch.clamp(v.sqrt(), min=eps)).clamp_(-(k ** 0.25), k ** 0.25)
    m.lerp_(normalised, 1 - b1)
    p.add_(m, alpha=-lr)
    v.mul_(b2).addcmul_(g, g, value=1 - b2)


def signum_reference(p, g, state, lr, wd, hp):
    """The benchmark's Signum (llm-optimizer-benchmark src/optim/sign.py, sign_update=True, dampening 0), its
    buffer started as a copy of the decayed weights ("parameter") or, as torch's SGD starts it, at the first
    gradient ("gradient")."""
    b = hp["beta1"]
    p.mul_(1 - lr * wd)
    if "buf" not in state:
        state["buf"] = p.clone() if hp["signum_momentum_init"] == "parameter" else None
    if state["buf"] is None:
        state["buf"] = g.clone()
    else:
        state["buf"].mul_(b).add_(g)
    direction = g + b * state["buf"] if hp["signum_nesterov"] else state["buf"]
    p.add_(torch.sign(direction), alpha=-lr)


def cautious_adamw_reference(p, g, state, lr, wd, hp):
    """kyleliang919/C-Optim c_adamw.py's default (foreach) update, for one tensor."""
    b1, b2, eps = hp["beta1"], hp["beta2"], hp["eps"]
    t = state["t"] = state.get("t", 0) + 1
    m, v = state.setdefault("m", torch.zeros_like(p)), state.setdefault("v", torch.zeros_like(p))
    m.lerp_(g, 1 - b1)
    v.lerp_(g * g, 1 - b2)
    denom = v.sqrt() / math.sqrt(1 - b2**t) + eps
    mask = (m * g > 0).to(g.dtype)
    kept = mask.mean().clamp(min=1e-3)
    p.mul_(1 - lr * wd)
    p.sub_((lr / (1 - b1**t)) * (m * mask) / denom / kept)


def sophia_reference(p, g, state, lr, wd, hp):
    """Liuhong99/Sophia sophia.py's _single_tensor_sophiag, for one tensor; bs is the run's tokens per step, as
    the authors' loop passes its own."""
    b1 = hp["beta1"]
    m, h = state.setdefault("m", torch.zeros_like(p)), state.setdefault("h", torch.zeros_like(p))
    p.mul_(1 - lr * wd)
    m.mul_(b1).add_(g, alpha=1 - b1)
    ratio = (m.abs() / (hp["sophia_rho"] * hp["bs"] * h + 1e-15)).clamp(None, 1)
    p.addcmul_(m.sign(), ratio, value=-lr)


def sophia_hessian_reference(g_hat, state, hp):
    """SophiaG.update_hessian, for one tensor."""
    b2 = hp["beta2"]
    state["h"].mul_(b2).addcmul_(g_hat, g_hat, value=1 - b2)


def advance_schedule_free_group(group_state, lr, hp):
    k = group_state.setdefault("k", 0)
    warmup = hp["sf_warmup_steps"]
    scheduled = lr * ((k + 1) / warmup if k < warmup else 1.0)
    group_state["lr_max"] = max(scheduled, group_state.get("lr_max", -1.0))
    weight = (k + 1) ** hp["sf_r"] * group_state["lr_max"] ** hp["sf_weight_lr_power"]
    group_state["weight_sum"] = group_state.get("weight_sum", 0.0) + weight
    group_state.update(ckp1=weight / group_state["weight_sum"], lr=scheduled, k=k + 1)


BASELINES = {  # name: (config overrides, reference step, whether the schedule multiplies lr)
    "lion": (dict(learning_rate=3e-3, weight_decay=0.5, beta1=0.9, beta2=0.99), lion_reference, True),
    "nadamw": (dict(learning_rate=1e-2, weight_decay=0.1, beta1=0.9, beta2=0.95), nadamw_reference, True),
    "ademamix": (dict(learning_rate=1e-2, weight_decay=0.1, alpha_warmup=5, beta3_warmup=5, beta3=0.999),
                 ademamix_reference, True),
    "schedule-free-adamw": (dict(learning_rate=1e-2, weight_decay=0.1, beta2=0.95, sf_warmup_steps=3,
                                 lr_schedule="constant", warmup_iters=0), None, False),
    "adopt": (dict(learning_rate=1e-2, weight_decay=0.1, beta1=0.9, beta2=0.95), adopt_reference, True),
    "signum": (dict(learning_rate=3e-3, weight_decay=0.5, beta1=0.9), signum_reference, True),
    "cautious-adamw": (dict(learning_rate=1e-2, weight_decay=0.1, beta1=0.9, beta2=0.95), cautious_adamw_reference,
                       True),
}


def lr_multiplier(step: int) -> float:
    return 0.5 + 0.5 * math.cos(step / 5)


def gradients(model, seed):
    gen = torch.Generator().manual_seed(seed)
    return [torch.randn(p.shape, generator=gen, dtype=torch.float64) * 0.3 / p.numel() ** 0.5
            for p in model.parameters()]


def scheduled_step(model, optimizer, step: int) -> list[torch.Tensor]:
    """One step of ours at step's learning-rate multiplier on the gradients of seed `step` (in the model's
    dtype), which it returns, in float64, for the reference."""
    for group in optimizer.param_groups:
        group["lr"] = group["base_lr"] * lr_multiplier(step)
    grads = gradients(model, seed=step)
    for p, g in zip(model.parameters(), grads):
        p.grad = g.to(p.dtype, copy=True)
    optimizer.step()
    optimizer.zero_grad()
    return grads


# Each baseline in float32 lands on its float64 reference to float32 rounding; NAdamW also runs in float64,
# where it must be the reference's arithmetic to float64 rounding (AlgoPerf's exact formulation).
# Settings run besides each baseline's defaults: ADOPT's coupled decay, the benchmark's Signum (its momentum from
# the weights) and Signum with Nesterov.
# ADOPT, Signum and Cautious AdamW are in the quick tier too (8 tiny steps each).
QUICK = pytest.mark.quick
PARITY = ([pytest.param(name, {}, torch.float32, 2e-6, marks=QUICK if name in ("adopt", "signum", "cautious-adamw")
                        else ()) for name in BASELINES]
          + [("nadamw", {}, torch.float64, 1e-10), ("adopt", dict(adopt_decoupled=False), torch.float32, 2e-6),
             ("signum", dict(signum_momentum_init="parameter"), torch.float32, 2e-6),
             ("signum", dict(signum_nesterov=True), torch.float32, 2e-6)])


@pytest.mark.parametrize("name, settings, dtype, tolerance", PARITY)
def test_baseline_matches_its_authors_reference(name, settings, dtype, tolerance):
    overrides, reference_step, scheduled = BASELINES[name]
    cfg = tiny_config(optimizer=name, decay_embeddings=False, **overrides, **settings)
    hp = cfg.hyperparameters.to_dict() | {"warmup": overrides.get("alpha_warmup", 0)}
    torch.manual_seed(0)
    model = GPT(GPTConfig(**TINY)).to(dtype)
    reference = [p.detach().double().clone() for p in model.parameters()]
    optimizer = build_optimizer(model, cfg, "cpu")
    # the routing: decay for the blocks' matrices only (decay_embeddings=False), as the official runs
    decays = [p.ndim == 2 and ".wte." not in n and ".wpe." not in n for n, p in model.named_parameters()]
    states = [{} for _ in reference]
    group_states = {True: {}, False: {}}
    for step in range(STEPS):
        multiplier = lr_multiplier(step) if scheduled else 1.0
        for group in optimizer.param_groups:
            group["lr"] = group["base_lr"] * multiplier
        grads = gradients(model, seed=step)
        for p, g in zip(model.parameters(), grads):
            p.grad = g.to(dtype)
        optimizer.step()
        optimizer.zero_grad()
        lr = cfg.learning_rate * multiplier
        if name == "schedule-free-adamw":
            for decay in (True, False):
                advance_schedule_free_group(group_states[decay], lr, hp)
        for p, g, state, decay in zip(reference, grads, states, decays):
            wd = hp["weight_decay"] if decay else 0.0
            if name == "schedule-free-adamw":
                schedule_free_reference(p, g, state, lr, wd, hp, group_states[decay])
            else:
                reference_step(p, g, state, lr, wd, hp)
    if name == "schedule-free-adamw":  # what is evaluated and saved: x, from y and z
        optimizer.eval_weights()
        for p, state in zip(reference, states):
            p.lerp_(state["z"], 1 - 1 / hp["beta1"])
    for (n, p), expected in zip(model.named_parameters(), reference):
        error = ((p.detach().double() - expected).norm() / expected.norm()).item()
        assert error < tolerance, f"{name}: {n} relative error {error:.1e}"


@pytest.mark.quick
def test_sophia_matches_its_authors_reference():
    """SophiaG's step and update_hessian (Liuhong99/Sophia at a7e1572, sophia.py) against their float64
    restatement, with an estimate (from gradients of its own) after every third step, as the loop's
    HessianEstimate contract calls it; rho is chosen so that the clip at 1 holds on some entries and not on
    others."""
    cfg = tiny_config(optimizer="sophia", decay_embeddings=False, learning_rate=1e-2, weight_decay=0.1,
                      sophia_rho=3e-4, sophia_hessian_interval=3)
    hp = cfg.hyperparameters.to_dict() | {"bs": cfg.total_batch_size}
    torch.manual_seed(0)
    model = GPT(GPTConfig(**TINY))
    reference = [p.detach().double().clone() for p in model.parameters()]
    optimizer = build_optimizer(model, cfg, "cpu")
    assert isinstance(optimizer, HessianEstimate) and optimizer.hessian_interval == 3
    decays = [p.ndim == 2 and ".wte." not in n and ".wpe." not in n for n, p in model.named_parameters()]
    states = [{} for _ in reference]
    clipped = []
    for step in range(12):
        grads = scheduled_step(model, optimizer, step)
        for p, g, state, decay in zip(reference, grads, states, decays):
            sophia_reference(p, g, state, cfg.learning_rate * lr_multiplier(step), hp["weight_decay"] if decay else 0.0,
                             hp)
            clipped.append((state["m"].abs() >= hp["sophia_rho"] * hp["bs"] * state["h"]).double().mean().item())
        if needs_hessian_estimate(optimizer, step):
            sampled = gradients(model, seed=100 + step)
            for p, g in zip(model.parameters(), sampled):
                p.grad = g.float()
            optimizer.update_hessian()
            optimizer.zero_grad()
            for g, state in zip(sampled, states):
                sophia_hessian_reference(g, state, hp)
    assert 0.2 < sum(clipped[-len(states):]) / len(states) < 0.8, clipped[-len(states):]  # both sides of the clip
    for (n, p), expected in zip(model.named_parameters(), reference):
        error = ((p.detach().double() - expected).norm() / expected.norm()).item()
        assert error < 2e-6, f"sophia: {n} relative error {error:.1e}"


def test_sophia_refuses_float16_by_name():
    with pytest.raises(ConfigError, match="cannot be combined with Sophia"):
        tiny_config(optimizer="sophia", dtype="float16")


@pytest.mark.quick
def test_the_labels_sophia_draws_follow_the_models_distribution_whatever_the_split(tiny_dataset):
    """optim.sophia.sampled_labels draws each label with its probability (20,000 draws a row); TrainBatches' draws (integers:
    a float input would be cast to bf16 by FSDP) for a step's rows are the same split over 1 rank and 2 micro-steps as
    over 4 ranks, and differ by step."""
    batches = TrainBatches(TokenWindows(tiny_dataset, "train", 32, 128), seed=3, sequences_per_step=8)
    cpu = torch.device("cpu")
    whole = torch.cat([batches.label_draws(5, micro_step, 4, 0, 1, cpu) for micro_step in range(2)])
    split = torch.cat([batches.label_draws(5, 0, 2, rank, 4, cpu) for rank in range(4)])
    assert whole.shape == (8, 32) and torch.equal(whole, split)
    assert whole.dtype == torch.int32  # (FSDP's mixed precision would cast floats to bf16 on their way in)
    assert not torch.equal(whole, torch.cat([batches.label_draws(6, m, 4, 0, 1, cpu) for m in range(2)]))
    torch.manual_seed(0)
    probs = torch.randn(3, 10).mul(2).softmax(-1)
    draws = 20_000
    labels = sampled_labels(probs.repeat_interleave(draws, 0), torch.randint(0, LABEL_DRAW_RANGE, (3 * draws,)))
    labels = labels.view(3, draws)
    frequencies = torch.stack([torch.bincount(row, minlength=10) for row in labels]).double() / draws
    assert (frequencies - probs).abs().max() < 0.015, (frequencies, probs)


@pytest.mark.parametrize("fused_cross_entropy", [False, True])
def test_sophias_hessian_estimate_is_the_gradient_on_labels_the_model_draws(tiny_dataset, tmp_path,
                                                                          fused_cross_entropy):
    """Through train.py, a Hessian estimate every 2 steps: after step 2 the checkpoint's h is (1 - beta2) g^2,
    g the gradient, at the step-2 weights, of the mean loss over the second step's batch (two micro-steps) on labels drawn
    from the model's own softmax by inverse CDF at TrainBatches.label_draws' numbers (sampled here by counting
    the cumulative probabilities below each), clipped at grad_clip; both cross-entropy paths."""
    out = str(tmp_path / "run")
    args = tiny_run_args(tiny_dataset, out, optimizer="sophia", sophia_hessian_interval=2, max_iters=2,
                         eval_interval=2, micro_batch_size=4, grad_clip=0.05, grad_multiplier=1.0, dropout=0.0,
                         fused_cross_entropy=fused_cross_entropy)
    run_train(args)
    cfg = load_config(args)
    ckpt = torch.load(os.path.join(out, "ckpt.pt"), weights_only=True)
    model = GPT(GPTConfig(**cfg.model_args()))
    model.load_state_dict(ckpt["model"])
    optimizer = build_optimizer(model, cfg, "cpu")
    optimizer.load_state_dict(ckpt["optimizer"])
    batches = TrainBatches(TokenWindows(tiny_dataset, "train", cfg.block_size, cfg.vocab_size), cfg.seed,
                           cfg.total_batch_size // cfg.block_size)
    for micro_step in range(2):
        x, _ = batches.micro_batch(1, micro_step, 4, 0, 1)
        numbers = batches.label_draws(1, micro_step, 4, 0, 1, torch.device("cpu"))
        logits = model(x, all_logits=True)[0].float()
        cumulative = logits.detach().softmax(-1).cumsum(-1)
        labels = (cumulative <= numbers[..., None] / 2**24 * cumulative[..., -1:]).sum(-1).clamp_max(cfg.vocab_size - 1)
        (torch.nn.functional.cross_entropy(logits.flatten(0, 1), labels.flatten()) / 2).backward()
    norm = torch.stack([p.grad.double().norm() for p in model.parameters()]).norm()
    scale = min(1.0, cfg.grad_clip / (norm.item() + 1e-6))
    assert scale < 0.5  # the clip is part of what is checked
    beta2 = cfg.hyperparameters.beta2
    for name, p in model.named_parameters():
        expected = (1 - beta2) * (p.grad * scale) ** 2
        error = ((optimizer.state[p]["hessian"] - expected).norm() / expected.norm()).item()
        assert error < 1e-4, f"{name}: relative error {error:.1e}"


def test_nadamw_is_not_torchs_nadam():
    """Negative control: torch's NAdam (Dozat's warmed-up momentum, what `nadamw` ran before) with the same
    groups, decoupled weight decay and gradients lands far from ours."""
    cfg = tiny_config(optimizer="nadamw", decay_embeddings=False, **BASELINES["nadamw"][0])
    torch.manual_seed(0)
    model = GPT(GPTConfig(**TINY))
    theirs = GPT(GPTConfig(**TINY))
    theirs.load_state_dict(model.state_dict())
    ours = build_optimizer(model, cfg, "cpu")
    hp = cfg.hyperparameters
    torchs = torch.optim.NAdam(weight_decay_groups(theirs, decay_routing("nadamw", False), hp.weight_decay),
                               lr=cfg.learning_rate, betas=(hp.beta1, hp.beta2), eps=hp.eps,
                               decoupled_weight_decay=True)
    for step in range(STEPS):
        for net, optimizer in ((model, ours), (theirs, torchs)):
            for p, g in zip(net.parameters(), gradients(net, seed=step)):
                p.grad = g.float()
            optimizer.step()
            optimizer.zero_grad()
    errors = [((p - q).norm() / q.norm()).item() for p, q in zip(model.parameters(), theirs.parameters())]
    assert max(errors) > 1e-3


@pytest.mark.parametrize("name", list(OPTIMIZERS))
def test_every_optimizer_declares_what_the_loop_asks_of_it(name):
    """The contract: the capabilities are declared by type, and the registry's passes per step follow
    from the hyperparameters as the built optimizer's capability does."""
    model = GPT(GPTConfig(**TINY))
    overrides = dict(lr_schedule="constant") if name == "schedule-free-adamw" else {}
    for second in ([False, True] if "is_approx" in HYPERPARAMETERS[name].__dataclass_fields__ else [False]):
        extra = dict(is_approx=not second) if second or "is_approx" in HYPERPARAMETERS[name].__dataclass_fields__ else {}
        cfg = tiny_config(optimizer=name, **overrides, **extra)
        optimizer = build_optimizer(model, cfg, "cpu")
        assert needs_second_gradient(optimizer) == cfg.hyperparameters.second_gradient() == second
        hessian = isinstance(optimizer, HessianEstimate)
        assert hessian == (name == "sophia")
        assert cfg.hyperparameters.gradients_per_step() == (2 if second else 1 + 1 / optimizer.hessian_interval
                                                            if hessian else 1)
        assert isinstance(optimizer, SecondGradient) == isinstance(optimizer, VarianceReduction) == (
            name in ("mars", "mars-m"))
        assert isinstance(optimizer, EvaluationWeights) == (name == "schedule-free-adamw")
        assert cfg.hyperparameters.display_name()


def test_schedule_free_evaluates_saves_and_resumes_its_averaged_weights(tiny_dataset, tmp_path):
    """Through train.py: the loop evaluates and saves x (eval_only on the checkpoint scores what the run
    logged), and a run stopped at step 6 and resumed (y restored from x and z) continues the
    uninterrupted one, to float32 rounding."""
    sf = dict(optimizer="schedule-free-adamw", lr_schedule="constant", warmup_iters=0, min_lr=0.0,
              sf_warmup_steps=3, learning_rate=1e-2, weight_decay=0.1)
    whole, halves = str(tmp_path / "whole"), str(tmp_path / "halves")
    run_train(tiny_run_args(tiny_dataset, whole, **sf))
    run_train(tiny_run_args(tiny_dataset, halves, **sf, max_iters=6))
    run_train(tiny_run_args(tiny_dataset, halves, **sf, init_from="resume"))
    logged = read_metrics(whole, "val")[-1]["val_loss"]
    scored = run_train(tiny_run_args(tiny_dataset, whole, **sf, eval_only=True)).stdout
    assert f"val loss {logged:.4f}" in scored
    for name, weight in load_weights(whole).items():
        resumed = load_weights(halves)[name]
        assert torch.allclose(resumed, weight, rtol=1e-5, atol=1e-6), name
    assert [r["loss"] for r in read_metrics(halves, "train")] == pytest.approx(
        [r["loss"] for r in read_metrics(whole, "train")], rel=1e-5)


@pytest.mark.parametrize("name", list(OPTIMIZERS))
@pytest.mark.quick
def test_every_optimizer_resumes_from_its_checkpointed_state(name):
    """Saved as the loop saves (inside evaluation_weights) and restored as resume restores
    (checkpoint.restore_training_state, then train_weights), three more steps land where not stopping
    does: the moments and the run state kept in param groups (step counts, averages) come back."""
    overrides = dict(lr_schedule="constant") if name == "schedule-free-adamw" else {}
    cfg = tiny_config(optimizer=name, learning_rate=1e-2, **overrides)

    def step(model, optimizer, seed):
        for group in optimizer.param_groups:
            group["lr"] = group["base_lr"] * lr_multiplier(seed)
        if needs_second_gradient(optimizer):
            for p, g in zip(model.parameters(), gradients(model, seed + 100)):
                p.grad = g.float()
            optimizer.stash_grad_for_next_step()
            optimizer.zero_grad()
        for p, g in zip(model.parameters(), gradients(model, seed)):
            p.grad = g.float()
        optimizer.step()
        optimizer.zero_grad()

    torch.manual_seed(0)
    model = GPT(GPTConfig(**TINY))
    optimizer = build_optimizer(model, cfg, "cpu")
    for seed in range(3):
        step(model, optimizer, seed)
    buffer = io.BytesIO()
    with evaluation_weights(optimizer):
        torch.save(dict(model=model.state_dict(), optimizer=optimizer.state_dict(), scaler={}, step=3,
                        best_val_loss=0.0), buffer)
    for seed in range(3, 6):
        step(model, optimizer, seed)

    torch.manual_seed(1)  # other initial weights: everything must come from the checkpoint
    resumed = GPT(GPTConfig(**TINY))
    resumed_optimizer = build_optimizer(resumed, cfg, "cpu")
    buffer.seek(0)
    restore_training_state(torch.load(buffer, weights_only=True), resumed, resumed_optimizer,
                           torch.amp.GradScaler("cpu", enabled=False))
    if isinstance(resumed_optimizer, EvaluationWeights):
        resumed_optimizer.train_weights()
    for seed in range(3, 6):
        step(resumed, resumed_optimizer, seed)
    for (n, p), q in zip(model.named_parameters(), resumed.parameters()):
        assert torch.allclose(p, q, rtol=1e-6, atol=1e-7), f"{name}: {n}"


def soap_reference(p, g, state, lr, wd, hp):
    """nikhilvyas/SOAP soap.py for a 1-D or 2-D parameter, restated with explicit matrices: L = EMA(G G^T),
    R = EMA(G^T G), bases by eigh (float32, decreasing) then by power iteration + QR every `frequency`
    steps, Adam in the rotated coordinates; a side over max_precond_dim (and every 1-D side) unrotated."""
    b1, b2, eps, rate = hp["beta1"], hp["beta2"], hp["eps"], hp["beta2"]
    rotated = [p.ndim == 2 and n <= hp["max_precond_dim"] for n in p.shape]
    G = g if p.ndim == 2 else g[:, None]

    def bases_of(q):
        return [q[0] if q[0] is not None else None, q[1] if p.ndim == 2 and q[1] is not None else None]

    def into(x, q):  # Q_L^T X Q_R
        x = x if p.ndim == 2 else x[:, None]
        x = q[0].T @ x if q[0] is not None else x
        x = x @ q[1] if q[1] is not None else x
        return x if p.ndim == 2 else x[:, 0]

    def back(x, q):  # Q_L X Q_R^T
        x = x if p.ndim == 2 else x[:, None]
        x = q[0] @ x if q[0] is not None else x
        x = x @ q[1].T if q[1] is not None else x
        return x if p.ndim == 2 else x[:, 0]

    def accumulate():
        for side, outer in ((0, G @ G.T), (1, G.T @ G)):
            if side < p.ndim and rotated[side]:
                state["S"][side] = state["S"][side] * rate + outer * (1 - rate)

    if "Q" not in state:
        state.update(t=0, m=torch.zeros_like(p), v=torch.zeros_like(p),
                     S=[torch.zeros(n, n, dtype=p.dtype) if r else None for n, r in zip(p.shape, rotated)] + [None])
        accumulate()
        state["Q"] = [None if s is None else torch.linalg.eigh(s.float())[1].flip(1).double() for s in state["S"][:2]]
        return
    q = bases_of(state["Q"])
    state["t"] += 1
    t = state["t"]
    state["m"] = b1 * state["m"] + (1 - b1) * into(g, q)
    state["v"] = b2 * state["v"] + (1 - b2) * into(g, q) ** 2
    p.sub_(lr * math.sqrt(1 - b2**t) / (1 - b1**t) * back(state["m"] / (state["v"].sqrt() + eps), q))
    p.sub_(lr * wd * p)
    m = back(state["m"], q)
    accumulate()
    if t % hp["precondition_frequency"] == 0:
        for side in (0, 1):
            if q[side] is not None:
                s, old = state["S"][side].float(), q[side].float()
                order = torch.argsort(torch.diag(old.T @ s @ old), descending=True)
                state["v"] = state["v"].index_select(side, order)
                state["Q"][side] = torch.linalg.qr(s @ old[:, order])[0].double()
    state["m"] = into(m, bases_of(state["Q"]))


def test_soap_matches_its_authors_reference():
    """In float64 (the reference computes its bases in float32 whatever the parameters' dtype), with sides
    over max_precond_dim unrotated and a basis refresh every 3 steps."""
    cfg = tiny_config(optimizer="soap", decay_embeddings=False, learning_rate=1e-2, weight_decay=0.1,
                      max_precond_dim=40, precondition_frequency=3)
    hp = cfg.hyperparameters.to_dict()
    torch.manual_seed(0)
    model = GPT(GPTConfig(**TINY)).double()
    reference = [p.detach().clone() for p in model.parameters()]
    optimizer = build_optimizer(model, cfg, "cpu")
    decays = [p.ndim == 2 and ".wte." not in n and ".wpe." not in n for n, p in model.named_parameters()]
    states = [{} for _ in reference]
    for step in range(STEPS):
        grads = scheduled_step(model, optimizer, step)
        for p, g, state, decay in zip(reference, grads, states, decays):
            soap_reference(p, g, state, cfg.learning_rate * lr_multiplier(step), hp["weight_decay"] if decay else 0.0, hp)
    for (n, p), expected in zip(model.named_parameters(), reference):
        error = ((p.detach() - expected).norm() / expected.norm()).item()
        assert error < 1e-9, f"soap: {n} relative error {error:.1e}"


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_soap_stacks_matrices_and_declares_their_products(dtype):
    """SOAP runs the parameters of one shape and rotated sides as one stack: on CPU each matrix gets, bit for bit,
    what it gets alone, through two refreshes of its bases (a side over max_precond_dim too), and so does an unrotated
    vector; a rotated vector, to its dtype's rounding (MKL rounds the batched product of a matrix and an n x 1 matrix
    otherwise than one alone: measured 7e-8 in float32). And products() is what a step computes: torch's FLOP counter
    over a period of precondition_frequency steps counts the FLOPs it declares (statistics, projections in and out;
    on refresh steps the power iteration and m's round trip, which float64 parameters make every step)."""
    from torch.utils.flop_counter import FlopCounterMode

    from optim.soap import SOAP

    shapes = [(48, 32), (32, 48), (48, 32), (120, 16), (48, 32), (32, 48), (48,), (150,), (48,)]
    settings = dict(lr=1e-2, weight_decay=0.1, precondition_frequency=3, max_precond_dim=100, precondition_1d=True)
    torch.manual_seed(0)
    weights = [torch.randn(shape, dtype=dtype) * 0.1 for shape in shapes]
    together = [torch.nn.Parameter(w.clone()) for w in weights]
    alone = [torch.nn.Parameter(w.clone()) for w in weights]
    optimizers = [SOAP(together, **settings)] + [SOAP([p], **settings) for p in alone]
    gen = torch.Generator().manual_seed(1)
    for _ in range(7):
        for p, q in zip(together, alone):
            p.grad = torch.randn(p.shape, generator=gen, dtype=dtype) + p.detach()
            q.grad = p.grad.clone()
        for optimizer in optimizers:
            optimizer.step()
    for shape, p, q in zip(shapes, together, alone):
        if len(shape) == 2 or shape[0] > settings["max_precond_dim"]:
            assert torch.equal(p, q), shape
        else:
            assert ((p - q).norm() / q.norm()).item() < 10 * torch.finfo(dtype).eps, shape
    with FlopCounterMode(display=False) as counter:
        for _ in range(settings["precondition_frequency"]):
            optimizers[0].step()
    declared = sum(product.flops() for product in optimizers[0].products())
    assert counter.get_total_flops() == pytest.approx(settings["precondition_frequency"] * declared, rel=1e-12)


def test_soap_keeps_each_stacks_statistics_and_bases_as_views_of_one_tensor():
    """A stack's L, R, Q_L and Q_R are views of one tensor per side, which the step takes as it is: a step that does
    not refresh the bases makes no new stack, one that does makes the new bases the stack, and a restored
    checkpoint's separate tensors are made views again by the next step (then left as they are)."""
    from optim.soap import SOAP

    torch.manual_seed(0)
    params = [torch.nn.Parameter(torch.randn(24, 16)) for _ in range(3)]
    optimizer = SOAP(params, lr=1e-2, precondition_frequency=3)

    def step():
        for p in params:
            p.grad = torch.randn_like(p)
        optimizer.step()

    def stacks():  # each side's L and Q stacks' addresses, after checking every parameter's entries view them
        found = []
        for side in (0, 1):
            for key in ("GG", "Q"):
                bases = [optimizer.state[p][key][side]._base for p in params]
                assert bases[0] is not None and all(b is bases[0] for b in bases), (side, key)
                found.append(bases[0].data_ptr())
        return found

    step()  # the first step: the statistics and the bases from them
    first = stacks()
    step()
    assert stacks() == first  # no refresh (step 1): the same tensors
    step(), step()  # step 3 refreshes: new bases, the statistics' stack kept
    refreshed = stacks()
    assert refreshed[0::2] == first[0::2] and refreshed[1] != first[1] and refreshed[3] != first[3]
    buffer = io.BytesIO()
    torch.save(optimizer.state_dict(), buffer)
    buffer.seek(0)
    optimizer.load_state_dict(torch.load(buffer))
    assert optimizer.state[params[0]]["Q"][0]._base is None  # restored: no longer views of the stack
    step()
    restacked = stacks()
    step()
    assert stacks() == restacked


# Prodigy (konstmish/prodigy) through its authors' package, prodigyopt 1.1.2 (prodigyopt/prodigy.py), on the
# same decay groups: its defaults, the benchmark's bias correction, and coupled decay with the safeguarded warmup.
# d0 1e-4 and gradients that pull the weights toward a target make d grow 39-489x in the 30 steps.
PRODIGY_SETTINGS = [pytest.param({}, marks=QUICK), dict(prodigy_bias_correction=True),
                    dict(prodigy_decouple=False, prodigy_safeguard_warmup=True, prodigy_d_coef=0.5)]


@pytest.mark.parametrize("settings", PRODIGY_SETTINGS)
def test_prodigy_matches_its_authors_package(settings):
    """In float64 both, to float64 rounding; ours in float32 within 1e-4 of it, as the reference's own float32
    is: d's numerator sums <g, p0 - p>, whose difference of nearby weights cancels in float32."""
    prodigyopt = pytest.importorskip("prodigyopt")
    cfg = tiny_config(optimizer="prodigy", learning_rate=1.0, weight_decay=0.1, prodigy_d0=1e-4,
                      decay_embeddings=False, **settings)
    hp = cfg.hyperparameters
    for dtype, tolerance in ((torch.float64, 1e-12), (torch.float32, 1e-4)):
        torch.manual_seed(0)
        model = GPT(GPTConfig(**TINY)).to(dtype)
        theirs = GPT(GPTConfig(**TINY)).double()
        theirs.load_state_dict(model.state_dict())
        targets = [torch.randn_like(p) * 0.05 for p in theirs.parameters()]
        ours = build_optimizer(model, cfg, "cpu")
        reference = prodigyopt.Prodigy(
            weight_decay_groups(theirs, decay_routing("prodigy", False), hp.weight_decay), lr=1.0,
            betas=(hp.beta1, hp.beta2), eps=hp.eps, decouple=hp.prodigy_decouple,
            use_bias_correction=hp.prodigy_bias_correction, safeguard_warmup=hp.prodigy_safeguard_warmup,
            d0=hp.prodigy_d0, d_coef=hp.prodigy_d_coef)
        for step in range(30):
            for optimizer in (ours, reference):
                for group in optimizer.param_groups:  # (a first step at lr 0, as a warmup's, changes nothing)
                    group["lr"] = lr_multiplier(step) if step else 0.0
            noise = gradients(model, seed=step)
            for p, q, target, n in zip(model.parameters(), theirs.parameters(), targets, noise):
                q.grad = 0.5 * (q.detach() - target) + n
                p.grad = q.grad.to(dtype, copy=True)  # (the coupled decay adds to a gradient in place)
            ours.step()
            reference.step()
        assert ours.param_groups[0]["d"].item() > 30 * hp.prodigy_d0
        assert ours.param_groups[0]["d"].item() == pytest.approx(reference.param_groups[0]["d"], rel=tolerance)
        for (n, p), q in zip(model.named_parameters(), theirs.parameters()):
            error = ((p.detach().double() - q).norm() / q.norm()).item()
            assert error < tolerance, f"prodigy {dtype}: {n} relative error {error:.1e}"


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


def package_names(name: str) -> str:
    """A parameter's name as Adam-mini's package reads a GPT-2's (its examples/gpt2: separate wq, wk, wv, wo)."""
    return name.removeprefix("transformer.").replace("attn.c_proj", "attn.wo")


@pytest.mark.quick
def test_adam_mini_matches_its_authors_package():
    """Against the `adam-mini` package 1.1.1 (zyushun/Adam-mini), on a float64 copy of the tiny GPT whose c_attn
    is split into the wq, wk and wv its GPT-2 has (so the package finds the blocks by its own names): heads for
    queries and keys, neurons for values and the other matrices, tokens for the tied embedding, one block for the
    position table and each norm weight, elements for biases; ours in float32 to float32 rounding."""
    adam_mini = pytest.importorskip("adam_mini")
    cfg = tiny_config(optimizer="adam-mini", learning_rate=1e-2, weight_decay=0.1, beta2=0.95)
    hp = cfg.hyperparameters
    torch.manual_seed(0)
    model = GPT(GPTConfig(**TINY))
    named = {}
    for name, p in model.named_parameters():
        if name.endswith("attn.c_attn.weight"):
            for part, piece in zip(("wq", "wk", "wv"), p.detach().double().chunk(3)):
                named[package_names(name).replace("c_attn", part)] = piece.clone().requires_grad_()
        else:
            named[package_names(name)] = p.detach().double().clone().requires_grad_()
    reference = adam_mini.Adam_mini(named.items(), lr=cfg.learning_rate, betas=(hp.beta1, hp.beta2), eps=hp.eps,
                                    weight_decay=hp.weight_decay, dim=TINY["n_embd"], n_heads=TINY["n_head"],
                                    verbose=False)
    optimizer = build_optimizer(model, cfg, "cpu")
    for step in range(STEPS):
        for group in reference.param_groups:
            group["lr"] = cfg.learning_rate * lr_multiplier(step)
        grads = scheduled_step(model, optimizer, step)
        for (name, _), g in zip(model.named_parameters(), grads):
            if name.endswith("attn.c_attn.weight"):
                for part, piece in zip(("wq", "wk", "wv"), g.chunk(3)):
                    named[package_names(name).replace("c_attn", part)].grad = piece.clone()
            else:
                named[package_names(name)].grad = g.clone()
        reference.step()
    for name, p in model.named_parameters():
        if name.endswith("attn.c_attn.weight"):
            expected = torch.cat([named[package_names(name).replace("c_attn", part)] for part in ("wq", "wk", "wv")])
        else:
            expected = named[package_names(name)]
        error = ((p.detach().double() - expected.detach()).norm() / expected.norm()).item()
        assert error < 2e-6, f"adam-mini: {name} relative error {error:.1e}"


@pytest.mark.parametrize("name", ["nadamw", "prodigy", "sophia", "adam-mini", "scion", "kron", "soap", "muonclip",
                                  "adamh", "muonh", "normuon", "adamuon", "dion", "shampoo"])
def test_a_step_reads_no_tensor_on_the_host(name):
    """On the meta device a tensor has no value to read: a step that synced with the host (.item(), a
    tensor in an if) would fail there, as it would stall a GPU. Prodigy's one step size over the whole model
    stays a tensor (its reference reads each parameter's dot product with .item()); Adam-mini's block statistics,
    Scion's whole-tensor rms, NorMuon's and AdaMuon's whole-matrix norms and Dion's all-zero check too (its
    reference's is arithmetic too; cholesky_ex's info is not read)."""
    with torch.device("meta"):
        model = GPT(GPTConfig(**TINY))
    optimizer = build_optimizer(model, tiny_config(optimizer=name), "cpu")
    for step in range(2):
        for p in model.parameters():
            p.grad = torch.empty_like(p)
        optimizer.step()
    states = [t for s in optimizer.state.values() for t in tree_leaves(s) if torch.is_tensor(t)]  # (SOAP's lists)
    assert len(optimizer.state) == len(list(model.parameters())) and all(t.device.type == "meta" for t in states)


def test_nadamw_refuses_a_checkpoint_of_torchs_nadam():
    """A checkpoint of the NAdamW before AlgoPerf's (torch's NAdam) would resume with its step count at 1."""
    model = GPT(GPTConfig(**TINY))
    old = torch.optim.NAdam(model.parameters(), decoupled_weight_decay=True)
    for p, g in zip(model.parameters(), gradients(model, seed=0)):
        p.grad = g.float()
    old.step()
    optimizer = build_optimizer(model, tiny_config(optimizer="nadamw"), "cpu")
    with pytest.raises(InputError, match="Dozat"):
        optimizer.load_state_dict(old.state_dict())


def kron_lower_bound(s):
    """levanter's _lb, for one symmetric matrix."""
    top = s.abs().max()
    if top == 0:
        return top
    s = s / top
    x = s[:, (s * s).sum(0).argmax()] @ s
    return top * ((x / x.norm()) @ s.T).norm()


def kron_reference_step(p, g, state, lr, wd, hp, t, update, balance, index, layout):
    """levanter's Kron for one parameter, restated in float64 block by block (optim/kron.py's docstring), the blocks
    cut, padded and put back with loops, each diagonal preconditioner as its diagonal matrix."""
    from optim.kron import kron_noise

    b1, tiny = hp["beta1"], float(torch.finfo(torch.float32).tiny)
    m = state.setdefault("m", torch.zeros_like(p))
    m.mul_(b1).add_(g, alpha=1 - b1)
    full = (m / (1 - b1**t)).reshape(layout.shape)
    starts = [[sum(sizes[:k]) for k in range(len(sizes))] for sizes in layout.pieces]
    cells = list(itertools.product(*[range(len(sizes)) for sizes in layout.pieces]))
    scale = hp["kron_precond_init_scale"] ** (1 / len(layout.shape))
    qs = state.setdefault("q", [[scale * torch.eye(n, dtype=torch.float64) for n in layout.padded] for _ in cells])
    padded = []
    for cell in cells:
        block = torch.zeros(layout.padded, dtype=torch.float64)
        where = tuple(slice(starts[d][k], starts[d][k] + layout.pieces[d][k]) for d, k in enumerate(cell))
        block[tuple(slice(0, w.stop - w.start) for w in where)] = full[where]
        padded.append((where, block))
    if balance:
        for j in range(len(cells)):
            norms = torch.stack([q.abs().max() for q in qs[j]])
            qs[j] = [q * norms.log().mean().exp() / n for q, n in zip(qs[j], norms)]
    if update:
        noise = kron_noise(t, index, (len(cells), *layout.padded), torch.device("cpu")).double()
        damping = 2**-11.5 * torch.stack([block for _, block in padded]).abs().mean()
        for j, (_, block) in enumerate(padded):
            g_j, v = block + damping * noise[j], noise[j]
            if len(layout.shape) == 2:
                a, b = qs[j][0] @ g_j @ qs[j][1].T, torch.linalg.inv(qs[j][0]).T @ v @ torch.linalg.inv(qs[j][1])
                terms = [(a @ a.T, b @ b.T), (a.T @ a, b.T @ b)]
            else:
                a, b = qs[j][0] @ g_j, torch.linalg.inv(qs[j][0]).T @ v
                terms = [(torch.outer(a, a), torch.outer(b, b))]
            for d, (ta, tb) in enumerate(terms):
                q = qs[j][d]
                if layout.diagonal[d]:  # only the diagonal of the statistics enters
                    ta, tb = torch.diag(torch.diag(ta)), torch.diag(torch.diag(tb))
                    qs[j][d] = q - hp["kron_precond_lr"] * (ta - tb) @ q / ((ta + tb).abs().max() + tiny)
                else:
                    qs[j][d] = q - hp["kron_precond_lr"] / (kron_lower_bound(ta + tb) + tiny) * torch.triu(ta - tb) @ q
    direction = torch.zeros(layout.shape, dtype=torch.float64)
    for j, (where, block) in enumerate(padded):
        left = qs[j][0].T @ qs[j][0]
        pre = left @ block @ (qs[j][1].T @ qs[j][1]) if len(layout.shape) == 2 else left @ block
        direction[where] = pre[tuple(slice(0, w.stop - w.start) for w in where)]
    direction = direction.reshape(p.shape)
    direction /= max(1.0, (direction.square().mean().sqrt() / 1.1).item())
    p.sub_(lr * (direction + wd * p))


@pytest.mark.parametrize("merge", [pytest.param(False, marks=pytest.mark.quick), True])
def test_kron_matches_levanters_algorithm(monkeypatch, merge):
    """Kron's batched, owner-rank step against levanter's algorithm restated block by block in float64, on the tiny
    GPT with 64-wide blocks and a 100-wide triangular limit: unmerged, 2-D blocks with triangular and diagonal sides
    and diagonal vectors; merged (levanter's heuristic turns every tiny matrix into a vector), 1-D triangular blocks.
    An update schedule that skips steps (probability floor 0.4 after 2 steps) and a rebalancing every second update."""
    import optim.kron

    monkeypatch.setattr(optim.kron, "BALANCE_EVERY", 2)
    settings = dict(learning_rate=1e-2, weight_decay=0.1, beta1=0.9, kron_precond_lr=0.2, kron_block_size=64,
                    kron_max_size_triangular=100, kron_merge_small_dims=merge, kron_update_prob_min=0.4,
                    kron_update_prob_flat_start=2)
    cfg = tiny_config(optimizer="kron", **settings)
    hp = cfg.hyperparameters.to_dict()
    torch.manual_seed(0)
    model = GPT(GPTConfig(**TINY))
    optimizer = build_optimizer(model, cfg, "cpu")
    reference = [p.detach().double().clone() for p in model.parameters()]
    decays = [p.ndim == 2 and ".wte." not in n and ".wpe." not in n for n, p in model.named_parameters()]
    layouts = [optimizer.layouts[id(p)] for p in model.parameters()]
    if merge:
        assert all(len(l.shape) == 1 for l in layouts) and any(False in l.diagonal for l in layouts)
    else:
        assert {len(l.shape) for l in layouts} == {1, 2} and any(True in l.diagonal for l in layouts if len(l.shape) == 2)
    states, counter, balances, updates = [{} for _ in reference], 0, 0, []
    for step in range(STEPS):
        t = step + 1
        probability = float(np.clip(np.exp(np.float32(-0.001) * np.float32(t - 2)), np.float32(0.4), np.float32(1.0)))
        counter += 1
        update = counter >= np.float32(1) / np.float32(probability)
        counter = 0 if update else counter
        balances += update
        balance = update and balances >= 2
        balances = 0 if balance else balances
        updates.append((update, balance))
        grads = scheduled_step(model, optimizer, step)
        for i, (p, g, state, decay) in enumerate(zip(reference, grads, states, decays)):
            kron_reference_step(p, g, state, cfg.learning_rate * lr_multiplier(step), hp["weight_decay"] if decay else 0.0,
                                hp, t, update, balance, optimizer.index[id(list(model.parameters())[i])], layouts[i])
    assert (False, False) in updates and (True, True) in updates  # the schedule skipped and rebalanced
    for (n, p), expected in zip(model.named_parameters(), reference):
        error = ((p.detach().double() - expected).norm() / expected.norm()).item()
        assert error < 1e-5, f"kron: {n} relative error {error:.1e}"


@pytest.mark.quick
def test_kron_noise_is_a_hash_of_step_index_and_element():
    """The update's noise V, restated with Python's integers: each element's a lowbias32 hash of (step, parameter
    index, row within the parameter, column) made normal by ndtri (so int32's wrapping products are the unsigned
    arithmetic); a stack of parameters draws each one's noise as it draws alone; it is N(0, 1) to sampling error
    and other at another step or index."""
    from optim.kron import block_noise, kron_noise

    mask = 0xFFFFFFFF

    def mix(x):
        x ^= x >> 16
        x = (x * 0x21F0AAAD) & mask
        x ^= x >> 15
        x = (x * 0x735A2D97) & mask
        return x ^ (x >> 15)

    def element(step, index, row, column):
        key = mix(mix(step) ^ index)
        h = mix(mix((mix(row ^ key) + key) & mask) ^ ((column * 0x2545F491) & mask))
        return torch.special.ndtri(torch.tensor(((h >> 9) + 0.5) * 2.0**-23)).item()

    cpu = torch.device("cpu")
    matrix, vector = kron_noise(123456, 7, (3, 64, 32), cpu), kron_noise(5, 2, (2, 300), cpu)
    cells = itertools.product(range(3), range(0, 64, 9), range(0, 32, 5))
    assert all(matrix[b, r, c].item() == element(123456, 7, 64 * b + r, c) for b, r, c in cells)
    assert all(vector[b, c].item() == element(5, 2, b, c) for b in range(2) for c in range(0, 300, 11))
    stack = block_noise(9, [4, 1, 6], [2, 1, 3], (64, 32), cpu)
    assert all(torch.equal(part, kron_noise(9, index, (count, 64, 32), cpu))
               for part, index, count in zip(stack.split([2, 1, 3]), [4, 1, 6], [2, 1, 3]))
    v = kron_noise(3, 0, (16, 128, 128), cpu)
    assert abs(v.mean().item()) < 5e-3 and abs(v.var().item() - 1) < 5e-3 and abs(v.pow(4).mean().item() - 3) < 0.05
    for other in (kron_noise(4, 0, (16, 128, 128), cpu), kron_noise(3, 1, (16, 128, 128), cpu)):
        assert abs((v * other).mean().item()) < 5e-3


@pytest.mark.quick
def test_kron_batches_give_each_parameter_its_numbers_alone():
    """Kron preconditions the parameters whose blocks share a signature as one stack of blocks: each one's P and
    preconditioners are, bit for bit, what it gets alone, wherever it sits in the batch (owner ranks batch
    different parameters: the resume matrix's one process against 2 ranks), with the update and the rebalancing;
    and products() lists one stack's products per signature, the update's at the probability's floor."""
    from optim.kron import Kron, batches, layout_of, precondition

    torch.manual_seed(0)
    for merge in (False, True):  # 2-D blocks with triangular and diagonal sides; vector blocks, some of one block
        shapes = [(96, 32), (32, 96), (300, 32), (96, 32), (8, 8), (32, 96), (7, 5), (300, 32), (96,)]
        layouts = [layout_of(shape, 64, 100, merge) for shape in shapes]
        for run in batches(layouts):
            momenta = [torch.randn(shapes[i]) for i in run]
            qs = [[torch.rand(layouts[i].blocks, n) + 0.5 if diagonal else
                   torch.eye(n) + 0.1 * torch.randn(layouts[i].blocks, n, n).triu()
                   for n, diagonal in zip(layouts[i].padded, layouts[i].diagonal)] for i in run]
            for update, balance in [(True, True), (False, False)]:
                together = precondition(momenta, qs, [layouts[i] for i in run], 7, run, update, balance, 0.2)
                for k, i in enumerate(run):
                    alone = precondition([momenta[k]], [qs[k]], [layouts[i]], 7, [i], update, balance, 0.2)[0]
                    assert all(torch.equal(a, b) for a, b in zip(alone, together[k])), (shapes[i], merge, update)
    # Two 96 x 32 matrices, 2 blocks of 64 x 64 each: one stack of 4, both sides triangular; 300 x 32, one block
    # of 320 x 64 with a diagonal left side; a vector, diagonal: no products.
    params = [torch.zeros(shape) for shape in [(96, 32), (96, 32), (300, 32), (32,)]]
    products = Kron(params, block_size=64, max_size_triangular=100, merge_small_dims=False).products()
    every, floor = 1.0, 0.05  # the application every step; the update's at kron_update_prob_min

    def side(batch, applied, statistics):  # Q M and Q^T (Q M); A, B, T_A, T_B, the lower bound's, triu(..) Q
        n = statistics[0]
        return [Product(batch, *applied, torch.float32, every)] * 2 + [
            Product(batch, *shape, torch.float32, floor) for shape in
            [applied] * 2 + [statistics] * 2 + [(1, n, n)] * 2 + [(n, n, n)]]

    assert products == (side(4, (64, 64, 64), (64, 64, 64)) * 2 + side(1, (320, 64, 64), (64, 320, 64)))
