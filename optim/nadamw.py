"""
NAdamW: Adam with Nesterov momentum as Choi et al. (2019, "On Empirical Comparisons of Optimizers for Deep
Learning", Table 1) write it, with decoupled weight decay (Loshchilov & Hutter, 2019). It is the NAdamW of
AlgoPerf's baselines (mlcommons/algorithmic-efficiency, algorithms/baselines/external_tuning/
pytorch_nadamw_full_budget.py) and of the 2025 optimizer benchmarks. At step t, for each parameter p with
gradient g:

    p = p * (1 - lr * weight_decay)
    m = beta1 m + (1 - beta1) g;  v = beta2 v + (1 - beta2) g^2
    p = p - lr / (1 - beta1^t) * (beta1 m + (1 - beta1) g) / (sqrt(v) / sqrt(1 - beta2^t) + eps)

The momentum is constant. torch.optim.NAdam (what `nadamw` ran before) follows Dozat's paper instead: a
momentum warmed up as mu_t = beta1 (1 - 0.5 * 0.96^(0.004 t)), about 0.47 at step 256 for beta1 0.9, with
bias corrections by the running product of the mu's. No comparison we cite runs that, so it is gone.

Where we differ from AlgoPerf (the same numbers, to rounding):
  - foreach ops over each group's tensors, where the reference loops over parameters in Python;
  - the update is two addcdivs, beta1 m / d and (1 - beta1) g / d, where the reference updates m a second
    time in place and undoes it after the step (its m drifts by a rounding each step; ours does not);
  - the step count is the group's, a Python int, so the bias corrections need no host sync (the
    reference reads a per-parameter tensor with .item()); they differ only for a parameter that
    sometimes has no gradient, which a GPT's never do.
Under FSDP every op runs on the rank's local blocks of the (DTensor) parameters and state: the rule is
element-wise, so the blocks need nothing from each other.
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
from optim.rules import GroupwiseOptimizer, moment_buffers
from optim.sharding import local
from errors import InputError


@dataclass
class NAdamWHyperparameters(Hyperparameters):
    weight_decay: float = setting(0.1, 0.0)
    beta1: float = beta(0.9)  # AlgoPerf's defaults: betas 0.9/0.999, eps 1e-8
    beta2: float = beta(0.999)
    eps: float = setting(1e-8, 0.0)
    decay_embeddings: bool = True  # as AdamW's: False leaves the embeddings and the tied head undecayed

    state_keys = ("decay_embeddings",)

    def display_name(self) -> str:
        return "NAdamW"


class NAdamW(GroupState, GroupwiseOptimizer):
    group_state_keys = ("step",)

    def __init__(self, params: Iterable, lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = 1e-2):
        if not (0.0 <= lr and 0.0 <= eps and 0.0 <= weight_decay):
            raise ValueError(f"Invalid learning rate, eps or weight_decay: {lr}, {eps}, {weight_decay}")
        for b in betas:
            if not 0.0 <= b < 1.0:
                raise ValueError(f"Invalid beta parameter: {b}")
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay))

    def update_group(self, group: dict, params: list[torch.Tensor]) -> None:
        group["step"] = t = group.get("step", 0) + 1
        beta1, beta2 = group["betas"]
        states = [moment_buffers(self.state[p], p) for p in params]
        params, grads = local(params), local([p.grad for p in params])
        exp_avgs, exp_avg_sqs = local([s["exp_avg"] for s in states]), local([s["exp_avg_sq"] for s in states])
        torch._foreach_mul_(params, 1.0 - group["lr"] * group["weight_decay"])
        torch._foreach_mul_(exp_avgs, beta1)
        torch._foreach_add_(exp_avgs, grads, alpha=1.0 - beta1)
        torch._foreach_mul_(exp_avg_sqs, beta2)
        torch._foreach_addcmul_(exp_avg_sqs, grads, grads, value=1.0 - beta2)
        denominators = torch._foreach_sqrt(exp_avg_sqs)
        torch._foreach_div_(denominators, math.sqrt(1.0 - beta2**t))
        torch._foreach_add_(denominators, group["eps"])
        step_size = group["lr"] / (1.0 - beta1**t)
        torch._foreach_addcdiv_(params, exp_avgs, denominators, value=-step_size * beta1)
        torch._foreach_addcdiv_(params, grads, denominators, value=-step_size * (1.0 - beta1))

    def load_state_dict(self, state_dict: dict) -> None:
        # A checkpoint of torch's NAdam (Dozat's schedule, before `nadamw` became AlgoPerf's) has the same
        # moments but its step counts per parameter: resumed here, the count would restart at 1 and the
        # first bias correction multiply a full momentum by 1 / (1 - beta1).
        if any("mu_product" in s for s in state_dict["state"].values()):
            raise InputError("this checkpoint holds torch's NAdam (Dozat's momentum schedule), which `nadamw` "
                             "no longer runs; finish that run on the code that started it, or start it again")
        super().load_state_dict(state_dict)


def build_nadamw(model: nn.Module, hp: NAdamWHyperparameters, loop: Loop) -> NAdamW:
    groups = weight_decay_groups(model, decay_routing("nadamw", hp.decay_embeddings), hp.weight_decay)
    return NAdamW(groups, lr=loop.learning_rate, betas=(hp.beta1, hp.beta2), eps=hp.eps)
