"""
Signum (Bernstein et al., 2018, "signSGD: Compressed Optimisation for Non-Convex Problems"): the sign of a
momentum, as Semenov et al.'s benchmark runs it (epfml/llm-optimizer-benchmark at fdecd5d, src/optim/sign.py
with sign_update=True, dampening 0). For each parameter p with gradient g:

    p = p * (1 - lr * weight_decay)
    m = beta1 m + g                                  (torch SGD's momentum, not an average)
    p = p - lr * sign(g + beta1 m if signum_nesterov else m)

One difference from the benchmark, a defect fixed (docs/reproducing.md): its momentum starts as a copy of the
parameter (torch.clone(p) where torch's SGD takes the first gradient), so its first steps follow sign(p), which
pulls every weight toward zero by lr a step until beta1^t p is outweighed. Here m starts at the first gradient,
as torch's SGD does; signum_momentum_init="parameter" restores the benchmark's. Element-wise: under FSDP each
rank updates its blocks.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import torch
import torch.nn as nn

from optim.adamw import decay_routing
from optim.contract import Hyperparameters, Loop, beta, setting
from optim.routing import weight_decay_groups
from optim.rules import GroupwiseOptimizer
from optim.sharding import local


@dataclass
class SignumHyperparameters(Hyperparameters):
    weight_decay: float = setting(0.0, 0.0)
    beta1: float = beta(0.9)  # the momentum (the benchmark's 124M runs: 0.9, no Nesterov)
    signum_nesterov: bool = False
    signum_momentum_init: str = setting("gradient", choices=("gradient", "parameter"))
    decay_embeddings: bool = True  # as AdamW's: False leaves the embeddings and the tied head undecayed

    state_keys = ("decay_embeddings",)

    def display_name(self) -> str:
        return "Signum"


class Signum(GroupwiseOptimizer):
    def __init__(self, params: Iterable, lr: float = 1e-3, momentum: float = 0.9, weight_decay: float = 0.0,
                 nesterov: bool = False, momentum_init: str = "gradient"):
        super().__init__(params, dict(lr=lr, momentum=momentum, weight_decay=weight_decay, nesterov=nesterov,
                                      momentum_init=momentum_init))

    def update_group(self, group: dict, params: list[torch.Tensor]) -> None:
        lr, momentum = group["lr"], group["momentum"]
        if group["weight_decay"]:
            torch._foreach_mul_(local(params), 1.0 - lr * group["weight_decay"])
        fresh = {i for i, p in enumerate(params) if "momentum_buffer" not in self.state[p]}
        for i in fresh:  # (a parameter's first step: its buffer, once)
            start = params[i].grad if group["momentum_init"] == "gradient" else params[i].detach()
            self.state[params[i]]["momentum_buffer"] = start.clone(memory_format=torch.preserve_format)
        buffers = local([self.state[p]["momentum_buffer"] for p in params])
        grads = local([p.grad for p in params])
        # m = beta1 m + g, but on a first step that started m at the gradient (it is g already)
        moving = [i for i in range(len(params)) if not (i in fresh and group["momentum_init"] == "gradient")]
        if moving:
            torch._foreach_mul_([buffers[i] for i in moving], momentum)
            torch._foreach_add_([buffers[i] for i in moving], [grads[i] for i in moving])
        directions = torch._foreach_add(grads, buffers, alpha=momentum) if group["nesterov"] else buffers
        torch._foreach_add_(local(params), torch._foreach_sign(directions), alpha=-lr)


def build_signum(model: nn.Module, hp: SignumHyperparameters, loop: Loop) -> Signum:
    groups = weight_decay_groups(model, decay_routing("signum", hp.decay_embeddings), hp.weight_decay)
    return Signum(groups, lr=loop.learning_rate, momentum=hp.beta1, weight_decay=hp.weight_decay,
                  nesterov=hp.signum_nesterov, momentum_init=hp.signum_momentum_init)
