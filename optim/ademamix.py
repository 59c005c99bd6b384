"""
AdEMAMix (Pagliardini et al., 2024, "The AdEMAMix Optimizer: Better, Faster, Older", arXiv
2409.03137): Adam whose numerator mixes the usual fast EMA of the gradient with a slow one. A drop-in
replacement for the authors' PyTorch implementation (apple/ml-ademamix, pytorch/ademamix.py): the
same arguments and arithmetic. At step t, with alpha_t and beta3_t warmed up as there (alpha
linearly from 0; beta3 from beta1 linearly in half-life, t_half = ln(0.5) / ln(beta) - 1):

    m1 = beta1 m1 + (1 - beta1) g        (m1 = g when beta1 = 0)
    m2 = beta3_t m2 + (1 - beta3_t) g
    v  = beta2 v + (1 - beta2) g^2
    p  = p - lr * ((m1 / (1 - beta1^t) + alpha_t m2) / (sqrt(v) / sqrt(1 - beta2^t) + eps) + wd * p)

Where we differ (the same numbers): foreach ops over each group's tensors where the reference loops
over parameters, and the step count t is the group's (a Python int, so alpha_t and beta3_t need no
host sync), where the reference counts per parameter: they differ only for a parameter that
sometimes has no gradient, which a GPT's never do.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

import torch
import torch.nn as nn

from optim.adamw import decay_routing
from optim.contract import GroupState, Hyperparameters, Loop, beta, setting
from optim.routing import weight_decay_groups
from optim.rules import GroupwiseOptimizer


@dataclass
class AdEMAMixHyperparameters(Hyperparameters):
    # The authors' recommendation for language models (their README): alpha 8, beta3 0.9999, both
    # warmed up over the whole run, weight decay 0.1.
    weight_decay: float = setting(0.1, 0.0)
    beta1: float = beta(0.9)
    beta2: float = beta(0.999)
    beta3: float = beta(0.9999)
    alpha: float = setting(8.0, 0.0)
    # steps over which alpha and beta3 warm up: -1, the run's length (the authors' recommendation); 0, none
    alpha_warmup: int = setting(-1, -1)
    beta3_warmup: int = setting(-1, -1)
    eps: float = setting(1e-8, 0.0)
    decay_embeddings: bool = True  # as AdamW's: False leaves the embeddings and the tied head undecayed

    state_keys = ("decay_embeddings",)

    def display_name(self) -> str:
        return "AdEMAMix"


def linear_warmup(step: int, end: float, start: float, warmup: int) -> float:
    """alpha_t: linear from start to end over `warmup` steps."""
    if step < warmup:
        fraction = step / warmup
        return (1.0 - fraction) * start + fraction * end
    return end


def half_life_warmup(step: int, end: float, start: float, warmup: int) -> float:
    """beta3_t: its half-life linear from start's to end's over `warmup` steps."""
    def half_life(b: float) -> float:
        return math.log(0.5) / math.log(b + 1e-8) - 1

    if step < warmup:
        fraction = step / warmup
        return math.pow(0.5, 1 / ((1.0 - fraction) * half_life(start) + fraction * half_life(end) + 1))
    return end


class AdEMAMix(GroupState, GroupwiseOptimizer):
    group_state_keys = ("step",)

    def __init__(self, params: Iterable, lr: float = 1e-3, betas: tuple[float, float, float] = (0.9, 0.999, 0.9999),
                 alpha: float = 2.0, beta3_warmup: int | None = None, alpha_warmup: int | None = None,
                 eps: float = 1e-8, weight_decay: float = 0.0):
        if not 0.0 <= lr:
            raise ValueError(f"Invalid learning rate: {lr}")
        if not (0.0 <= eps and 0.0 <= weight_decay and 0.0 <= alpha):
            raise ValueError(f"Invalid eps, weight_decay or alpha: {eps}, {weight_decay}, {alpha}")
        for b in betas:
            if not 0.0 <= b < 1.0:
                raise ValueError(f"Invalid beta parameter: {b}")
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, alpha=alpha, beta3_warmup=beta3_warmup,
                                      alpha_warmup=alpha_warmup, weight_decay=weight_decay))

    def update_group(self, group: dict, params: list[torch.Tensor]) -> None:
        group["step"] = t = group.get("step", 0) + 1
        beta1, beta2, beta3 = group["betas"]
        alpha = group["alpha"]
        if group["alpha_warmup"] is not None:
            alpha = linear_warmup(t, alpha, 0.0, group["alpha_warmup"])
        if group["beta3_warmup"] is not None:
            beta3 = half_life_warmup(t, beta3, beta1, group["beta3_warmup"])
        grads = [p.grad for p in params]
        states = [self._state(p, beta1) for p in params]
        slow, squares = [s["exp_avg_slow"] for s in states], [s["exp_avg_sq"] for s in states]
        if beta1 != 0.0:
            fast = [s["exp_avg_fast"] for s in states]
            torch._foreach_mul_(fast, beta1)
            torch._foreach_add_(fast, grads, alpha=1.0 - beta1)
        else:
            fast = grads
        torch._foreach_mul_(slow, beta3)
        torch._foreach_add_(slow, grads, alpha=1.0 - beta3)
        torch._foreach_mul_(squares, beta2)
        torch._foreach_addcmul_(squares, grads, grads, value=1.0 - beta2)
        denominators = torch._foreach_sqrt(squares)
        torch._foreach_div_(denominators, math.sqrt(1.0 - beta2**t))
        torch._foreach_add_(denominators, group["eps"])
        updates = torch._foreach_div(fast, 1.0 - beta1**t)
        torch._foreach_add_(updates, slow, alpha=alpha)
        torch._foreach_div_(updates, denominators)
        del denominators
        torch._foreach_add_(updates, params, alpha=group["weight_decay"])
        torch._foreach_add_(params, updates, alpha=-group["lr"])

    def _state(self, p: torch.Tensor, beta1: float) -> dict:
        state = self.state[p]
        if not state:
            if beta1 != 0.0:
                state["exp_avg_fast"] = torch.zeros_like(p, memory_format=torch.preserve_format)
            state["exp_avg_slow"] = torch.zeros_like(p, memory_format=torch.preserve_format)
            state["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
        return state


def build_ademamix(model: nn.Module, hp: AdEMAMixHyperparameters, loop: Loop) -> AdEMAMix:
    def warmup(steps: int) -> int | None:
        return loop.total_iters if steps == -1 else steps or None

    groups = weight_decay_groups(model, decay_routing("ademamix", hp.decay_embeddings), hp.weight_decay)
    return AdEMAMix(groups, lr=loop.learning_rate, betas=(hp.beta1, hp.beta2, hp.beta3), alpha=hp.alpha,
                    beta3_warmup=warmup(hp.beta3_warmup), alpha_warmup=warmup(hp.alpha_warmup), eps=hp.eps)
