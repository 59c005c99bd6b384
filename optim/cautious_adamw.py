"""
Cautious AdamW (Liang et al., 2024, "Cautious Optimizers: Improving Training with One Line of Code"), as its
authors implement it (kyleliang919/C-Optim at 2c0517c, c_adamw.py, its default foreach path) and Wen et al.
compare it: AdamW's update, kept only where it agrees in sign with the current gradient, rescaled by the
fraction kept. At step t, for each parameter p with gradient g:

    m = beta1 m + (1 - beta1) g;  v = beta2 v + (1 - beta2) g^2
    mask = 1 where m g > 0, else 0;  kept = max(mean(mask), 1e-3)   (the mean over the whole tensor)
    p = p * (1 - lr * weight_decay)
    p = p - lr / (1 - beta1^t) * m * mask / (sqrt(v) / sqrt(1 - beta2^t) + eps) / kept

The moments themselves are not masked, nor is the weight decay. Under FSDP the mean is of the whole tensor:
each rank counts its blocks' kept entries and one all-reduce sums them (optim/sharding.py). C-Optim's other
path (foreach=False) adds eps to the uncorrected sqrt(v); its default, followed here, to the corrected one.
Levanter's (Wen et al.'s runs) divides by mean(mask) + 1e-8 instead of clamping it: the same but for a
tensor with almost nothing kept.
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
from optim.sharding import local, shard_group

KEPT_FLOOR = 1e-3  # C-Optim's clamp of the kept fraction: at most a 1000x rescale


@dataclass
class CautiousAdamWHyperparameters(Hyperparameters):
    weight_decay: float = setting(0.1, 0.0)
    beta1: float = beta(0.9)
    beta2: float = beta(0.999)
    eps: float = setting(1e-6, 0.0)  # C-Optim's default
    decay_embeddings: bool = True  # as AdamW's: False leaves the embeddings and the tied head undecayed

    state_keys = ("decay_embeddings",)

    def display_name(self) -> str:
        return "Cautious AdamW"


class CautiousAdamW(GroupState, GroupwiseOptimizer):
    group_state_keys = ("step",)

    def __init__(self, params: Iterable, lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-6, weight_decay: float = 0.0):
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay))

    def update_group(self, group: dict, params: list[torch.Tensor]) -> None:
        group["step"] = t = group.get("step", 0) + 1
        beta1, beta2 = group["betas"]
        states = [moment_buffers(self.state[p], p) for p in params]
        sizes = [p.numel() for p in params]  # (whole tensors', also when sharded)
        shards = shard_group(params)
        params, grads = local(params), local([p.grad for p in params])
        exp_avgs, exp_avg_sqs = local([s["exp_avg"] for s in states]), local([s["exp_avg_sq"] for s in states])
        torch._foreach_lerp_(exp_avgs, grads, 1.0 - beta1)
        torch._foreach_mul_(exp_avg_sqs, beta2)
        torch._foreach_addcmul_(exp_avg_sqs, grads, grads, value=1.0 - beta2)
        masks = torch._foreach_mul(exp_avgs, grads)
        torch._foreach_sign_(masks)
        torch._foreach_clamp_min_(masks, 0.0)  # 1 where m g > 0, else 0
        kept = torch.stack(torch._foreach_norm(masks, 1, dtype=torch.float64))  # each tensor's count (a sum of ones)
        if shards is not None:
            torch.distributed.all_reduce(kept, group=shards)
        kept = list(kept.unbind())
        torch._foreach_div_(kept, sizes)
        torch._foreach_clamp_min_(kept, KEPT_FLOOR)
        torch._foreach_mul_(masks, exp_avgs)
        torch._foreach_div_(masks, list(torch.stack(kept).to(masks[0].dtype).unbind()))
        denominators = torch._foreach_sqrt(exp_avg_sqs)
        torch._foreach_div_(denominators, math.sqrt(1.0 - beta2**t))
        torch._foreach_add_(denominators, group["eps"])
        torch._foreach_mul_(params, 1.0 - group["lr"] * group["weight_decay"])
        torch._foreach_addcdiv_(params, masks, denominators, value=-group["lr"] / (1.0 - beta1**t))


def build_cautious_adamw(model: nn.Module, hp: CautiousAdamWHyperparameters, loop: Loop) -> CautiousAdamW:
    groups = weight_decay_groups(model, decay_routing("cautious-adamw", hp.decay_embeddings), hp.weight_decay)
    return CautiousAdamW(groups, lr=loop.learning_rate, betas=(hp.beta1, hp.beta2), eps=hp.eps)
