"""
Lion (Chen et al., 2023, "Symbolic Discovery of Optimization Algorithms", arXiv 2302.06675), the
base rule of MARS-Lion. A drop-in replacement for the authors' PyTorch implementation
(google/automl, lion/lion_pytorch.py): the same arguments, defaults and arithmetic, for each
parameter with gradient g and momentum m:

    p = p * (1 - lr * weight_decay)
    p = p - lr * sign(beta1 * m + (1 - beta1) * g)
    m = beta2 * m + (1 - beta2) * g

Where we differ (the same numbers): foreach ops over each group's tensors, where the reference loops
over parameters in Python (as does the lion-pytorch package, which is why we do not depend on it);
parameters without a gradient are skipped, as there.
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


@dataclass
class LionHyperparameters(Hyperparameters):
    # The authors' defaults (lr 1e-4 comes with the config); their paper pairs Lion's lr 3-10x below
    # AdamW's with a weight decay 3-10x above it.
    weight_decay: float = setting(0.0, 0.0)
    beta1: float = beta(0.9)
    beta2: float = beta(0.99)
    decay_embeddings: bool = True  # as AdamW's: False leaves the embeddings and the tied head undecayed

    state_keys = ("decay_embeddings",)

    def display_name(self) -> str:
        return "Lion"


class Lion(GroupwiseOptimizer):
    def __init__(self, params: Iterable, lr: float = 1e-4, betas: tuple[float, float] = (0.9, 0.99),
                 weight_decay: float = 0.0):
        if not 0.0 <= lr:
            raise ValueError(f"Invalid learning rate: {lr}")
        for b in betas:
            if not 0.0 <= b < 1.0:
                raise ValueError(f"Invalid beta parameter: {b}")
        super().__init__(params, dict(lr=lr, betas=betas, weight_decay=weight_decay))

    def update_group(self, group: dict, params: list[torch.Tensor]) -> None:
        beta1, beta2 = group["betas"]
        grads = [p.grad for p in params]
        exp_avgs = [self._exp_avg(p) for p in params]
        torch._foreach_mul_(params, 1.0 - group["lr"] * group["weight_decay"])
        updates = torch._foreach_mul(exp_avgs, beta1)
        torch._foreach_add_(updates, grads, alpha=1.0 - beta1)
        torch._foreach_sign_(updates)
        torch._foreach_add_(params, updates, alpha=-group["lr"])
        del updates
        torch._foreach_mul_(exp_avgs, beta2)
        torch._foreach_add_(exp_avgs, grads, alpha=1.0 - beta2)

    def _exp_avg(self, p: torch.Tensor) -> torch.Tensor:
        state = self.state[p]
        if "exp_avg" not in state:
            state["exp_avg"] = torch.zeros_like(p)
        return state["exp_avg"]


def build_lion(model: nn.Module, hp: LionHyperparameters, loop: Loop) -> Lion:
    groups = weight_decay_groups(model, decay_routing("lion", hp.decay_embeddings), hp.weight_decay)
    return Lion(groups, lr=loop.learning_rate, betas=(hp.beta1, hp.beta2))
