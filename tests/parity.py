"""
The parity convention every optimizer's test follows (tests/test_optim_<name>.py): its authors' reference, restated
in float64 in the test (or their package, called directly), beside ours on a tiny GPT built through the registry (so
the routing table's groups are part of what is checked), on the same gradients for STEPS steps at a changing
learning rate; ours in float32 lands on the reference to float32 rounding. The shared pieces are here: the
gradients, the learning-rate multiplier, one step of ours, and the whole check for an element-wise rule.
"""

import math

import torch

from model import GPT, GPTConfig
from optim import build_optimizer
from test_optim import TINY, tiny_config

STEPS = 8


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


def newton_schulz_reference(m: torch.Tensor) -> torch.Tensor:
    """Keller Jordan's quintic Newton-Schulz as Muon's and Moonlight's authors write it (5 steps of (3.4445, -4.7750,
    2.0315), X = G / (||G||_F + 1e-7), on the wide orientation), restated in the reference's precision."""
    x = m / (m.norm() + 1e-7)
    tall = x.size(0) > x.size(1)
    x = x.T if tall else x
    for _ in range(5):
        gram = x @ x.T
        x = 3.4445 * x + (-4.7750 * gram + 2.0315 * gram @ gram) @ x
    return x.T if tall else x


def on_hidden_matrix(name: str, p: torch.Tensor) -> bool:
    """The matrix rule's parameters as the matrix optimizers' authors route a GPT: the blocks' matrices (not the
    embeddings, the tied head or the 1-D parameters)."""
    return p.ndim == 2 and ".h." in name


def muon_eq_reference(x: torch.Tensor) -> torch.Tensor:
    """nanochat's MuonEq (muon_step_fused at 92d63d4), before the orthogonalisation: each row to the mean row norm."""
    target = x.norm() / math.sqrt(x.size(0))
    return x * (target / x.norm(dim=-1, keepdim=True).clamp_min(1e-6))


def muon_plus_reference(o: torch.Tensor) -> torch.Tensor:
    """nanochat's Muon+, after the orthogonalisation: the Frobenius norm of a semi-orthogonal matrix."""
    return o * (math.sqrt(min(o.shape)) / o.norm().clamp_min(1e-6))


def cautious_decay(update: torch.Tensor, w: torch.Tensor, cautious: bool) -> torch.Tensor | float:
    """nanochat's cautious weight decay: the decay's mask, where the update and the weight agree in sign."""
    return (update * w >= 0).double() if cautious else 1.0


def check_element_wise_parity(name: str, overrides: dict, settings: dict, dtype: torch.dtype, tolerance: float,
                              reference_step, scheduled: bool = True, advance_group=None, evaluated=None) -> None:
    """Our `name` (with config overrides and settings) against reference_step(p, g, state, lr, wd, hp), one tensor
    at a time, for STEPS steps at lr_multiplier's learning rates (scheduled; else the base rate). The decay goes to
    the blocks' matrices only (decay_embeddings=False), as the official runs. advance_group(group_state, lr, hp):
    run state a reference keeps per decay group, advanced before its tensors (reference_step then takes the group's
    state last); evaluated(p, state, hp): the weights the optimizer evaluates, from the reference's (compared with
    ours inside eval_weights)."""
    cfg = tiny_config(optimizer=name, decay_embeddings=False, **overrides, **settings)
    hp = cfg.hyperparameters.to_dict() | {"warmup": overrides.get("alpha_warmup", 0)}
    torch.manual_seed(0)
    model = GPT(GPTConfig(**TINY)).to(dtype)
    reference = [p.detach().double().clone() for p in model.parameters()]
    optimizer = build_optimizer(model, cfg, "cpu")
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
        if advance_group is not None:
            for decay in (True, False):
                advance_group(group_states[decay], lr, hp)
        for p, g, state, decay in zip(reference, grads, states, decays):
            wd = hp["weight_decay"] if decay else 0.0
            group = (group_states[decay],) if advance_group is not None else ()
            reference_step(p, g, state, lr, wd, hp, *group)
    if evaluated is not None:
        optimizer.eval_weights()
        for p, state in zip(reference, states):
            evaluated(p, state, hp)
    for (n, p), expected in zip(model.named_parameters(), reference):
        error = ((p.detach().double() - expected).norm() / expected.norm()).item()
        assert error < tolerance, f"{name}: {n} relative error {error:.1e}"
