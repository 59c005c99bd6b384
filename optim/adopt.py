"""
ADOPT (Taniguchi et al., 2024, "ADOPT: Modified Adam Can Converge with Any beta2 with the Optimal Rate"), as its
authors implement it (iShohei220/adopt at 6468572, src/adopt/adopt.py) and as Semenov et al.'s benchmark runs it
(epfml/llm-optimizer-benchmark at fdecd5d, src/optim/adopt.py). The gradient is normalised by the second moment
of the steps before it, then clipped, then averaged. At the k-th step of a group (k = 0, 1, ...), for each
parameter p with gradient g (g + weight_decay p where the decay is coupled):

    k = 0:  v = g^2, and nothing else (no parameter update)
    k > 0:  p = p * (1 - lr * weight_decay)                          (decoupled decay, the benchmark's default)
            n = clamp(g / max(sqrt(v), eps), -k^(1/4), k^(1/4))
            m = beta1 m + (1 - beta1) n;  p = p - lr m
            v = beta2 v + (1 - beta2) g^2

No bias correction. The clip k^(1/4) is the authors' default clip_lambda (the code since ed31335; the first
version had none). adopt_decoupled=False adds the decay to the gradient as the authors' default does, before
the first step's v (the benchmark adds it after: only the coupled mode differs between the two). The step count
is the group's, a Python int (the reference's is a tensor per parameter; the same for a GPT, whose parameters
always have gradients). Element-wise: under FSDP each rank updates its blocks.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import torch
import torch.nn as nn

from optim.adamw import decay_routing
from optim.contract import GroupState, Hyperparameters, Loop, beta, setting
from optim.routing import weight_decay_groups
from optim.rules import GroupwiseOptimizer, moment_buffers
from optim.sharding import local


@dataclass
class ADOPTHyperparameters(Hyperparameters):
    weight_decay: float = setting(0.1, 0.0)
    beta1: float = beta(0.9)
    beta2: float = beta(0.9999)  # the authors' default; the benchmark's 124M runs take 0.999
    eps: float = setting(1e-6, 0.0, low_open=True)
    adopt_decoupled: bool = True  # the benchmark's default (the authors': False, L2 added to the gradient)
    decay_embeddings: bool = True  # as AdamW's: False leaves the embeddings and the tied head undecayed

    state_keys = ("decay_embeddings",)

    def display_name(self) -> str:
        return "ADOPT"


class ADOPT(GroupState, GroupwiseOptimizer):
    group_state_keys = ("step",)

    def __init__(self, params: Iterable, lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.9999),
                 eps: float = 1e-6, weight_decay: float = 0.0, decoupled: bool = True):
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, decoupled=decoupled))

    def update_group(self, group: dict, params: list[torch.Tensor]) -> None:
        k = group.get("step", 0)  # (the clip reads the count before this step adds to it)
        group["step"] = k + 1
        beta1, beta2 = group["betas"]
        lr, weight_decay = group["lr"], group["weight_decay"]
        states = [moment_buffers(self.state[p], p) for p in params]
        params, grads = local(params), local([p.grad for p in params])
        exp_avgs, exp_avg_sqs = local([s["exp_avg"] for s in states]), local([s["exp_avg_sq"] for s in states])
        if weight_decay and not group["decoupled"]:
            grads = torch._foreach_add(grads, params, alpha=weight_decay)
        if k == 0:
            torch._foreach_addcmul_(exp_avg_sqs, grads, grads)
            return
        if weight_decay and group["decoupled"]:
            torch._foreach_mul_(params, 1.0 - lr * weight_decay)
        denominators = torch._foreach_sqrt(exp_avg_sqs)
        torch._foreach_clamp_min_(denominators, group["eps"])
        normalised = torch._foreach_div(grads, denominators)
        del denominators
        clip = k ** 0.25
        torch._foreach_clamp_min_(normalised, -clip)
        torch._foreach_clamp_max_(normalised, clip)
        torch._foreach_lerp_(exp_avgs, normalised, 1.0 - beta1)
        torch._foreach_add_(params, exp_avgs, alpha=-lr)
        torch._foreach_mul_(exp_avg_sqs, beta2)
        torch._foreach_addcmul_(exp_avg_sqs, grads, grads, value=1.0 - beta2)


def build_adopt(model: nn.Module, hp: ADOPTHyperparameters, loop: Loop) -> ADOPT:
    groups = weight_decay_groups(model, decay_routing("adopt", hp.decay_embeddings), hp.weight_decay)
    return ADOPT(groups, lr=loop.learning_rate, betas=(hp.beta1, hp.beta2), eps=hp.eps, decoupled=hp.adopt_decoupled)
