"""
Prodigy (Mishchenko & Defazio, 2024, "Prodigy: An Expeditiously Adaptive Parameter-Free Learner"): Adam whose
step size d is estimated from the run itself, as its authors implement it (konstmish/prodigy, the `prodigyopt`
package 1.1.2, prodigyopt/prodigy.py) and as Semenov et al.'s benchmark runs it (epfml/llm-optimizer-benchmark
at fdecd5d, src/optim/prodigy.py, the same code before slice_p). learning_rate multiplies d (1.0, the schedule
warming it up and decaying it). At the k-th step, with d, dlr = d lr b (b = sqrt(1-beta2^(k+1)) / (1-beta1^(k+1))
with prodigy_bias_correction, else 1), w = (d / d0) dlr, and for every parameter p with gradient g (+ weight_decay
p where the decay is coupled) and p0 its value at the first step:

    m = beta1 m + d (1-beta1) g;   v = beta2 v + d^2 (1-beta2) g^2;   s = beta3 s + w g   ((d / d0) d with
    numerator = beta3 numerator + w sum_p <g, p0 - p>;                                      safeguard_warmup)
    d = max(d, d_coef numerator / sum_p |s|_1)      (the reference's d_max, which its d equals when, as here,
                                                      its growth_rate is unbounded)
    p = p - dlr weight_decay p  (decoupled decay);   p = p - dlr m / (sqrt(v) + d eps)

where dlr is the old d's and the eps term the new d's. The sums run over every parameter of every group: one d
for the whole model. Here d and the numerator are 0-d float64 tensors on the parameters' device (the
reference's are Python floats, read with .item() per parameter: a host sync each), kept in every param group as
the reference keeps them; under FSDP the two sums are each rank's blocks', all-reduced over the shard group, so
d is the same at any world size. A step at learning rate 0 (a warmup's first) makes the state (p0 = p) and changes
nothing else, its count included, as the reference's returns early. Differences, none of which moves a GPT run: the reference skips a step whose
sum of |s| is zero (no gradient yet, ever), where this one applies the step's decoupled decay; its growth_rate
is left at its default, unbounded; beta1 must be positive (the reference's beta1=0 variant steps on the raw
gradient); p0 is always a copy of p (the reference keeps a 0-d zero for an all-zero parameter: the same values).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

import torch
import torch.distributed as dist
import torch.nn as nn

from optim.adamw import decay_routing
from optim.contract import GroupState, Hyperparameters, Loop, beta, positive, setting
from optim.routing import weight_decay_groups
from optim.rules import ListwiseOptimizer, flat_copy
from optim.sharding import local, shard_group

Tensors = list[torch.Tensor]


@dataclass
class ProdigyHyperparameters(Hyperparameters):
    weight_decay: float = setting(0.1, 0.0)
    beta1: float = setting(0.9, 0.0, 1.0, low_open=True, high_open=True)
    beta2: float = beta(0.999)
    prodigy_beta3: float = setting(0.0, 0.0, 1.0, high_open=True)  # 0: sqrt(beta2), the authors' default
    eps: float = positive(1e-8)
    prodigy_decouple: bool = True  # decoupled (AdamW's) weight decay, the authors' and the benchmark's default
    prodigy_bias_correction: bool = False  # the authors' default; the benchmark's 124M run: True
    prodigy_safeguard_warmup: bool = False
    prodigy_d0: float = positive(1e-6)  # the first estimate of d
    prodigy_d_coef: float = positive(1.0)  # d's multiplier: the authors' preferred knob
    decay_embeddings: bool = True  # as AdamW's: False leaves the embeddings and the tied head undecayed

    state_keys = ("decay_embeddings",)

    def display_name(self) -> str:
        return "Prodigy"


class Prodigy(GroupState, ListwiseOptimizer):
    group_state_keys = ("k", "d", "d_numerator")

    def __init__(self, params: Iterable, lr: float = 1.0, betas: tuple[float, float] = (0.9, 0.999),
                 beta3: float = 0.0, eps: float = 1e-8, weight_decay: float = 0.0, decouple: bool = True,
                 bias_correction: bool = False, safeguard_warmup: bool = False, d0: float = 1e-6,
                 d_coef: float = 1.0):
        super().__init__(params, dict(lr=lr, betas=betas, beta3=beta3 or math.sqrt(betas[1]), eps=eps,
                                      weight_decay=weight_decay, decouple=decouple, bias_correction=bias_correction,
                                      safeguard_warmup=safeguard_warmup, d0=d0, d_coef=d_coef, k=0))
        device = self.param_groups[0]["params"][0].device
        for group in self.param_groups:
            group["d"] = torch.full((), d0, dtype=torch.float64, device=device)
            group["d_numerator"] = torch.zeros((), dtype=torch.float64, device=device)

    def _state(self, p: torch.Tensor) -> dict:
        state = self.state[p]
        if not state:
            state["p0"] = p.detach().clone(memory_format=torch.preserve_format)
            for key in ("s", "exp_avg", "exp_avg_sq"):
                state[key] = torch.zeros_like(p, memory_format=torch.preserve_format)
        return state

    def update_groups(self, groups: list[tuple[dict, list[torch.Tensor]]]) -> None:
        lr = max(g["lr"] for g in self.param_groups)
        if lr == 0.0:  # the reference's step at lr 0 makes the state (p0 = p) and changes nothing else
            for _, params in groups:
                for p in params:
                    self._state(p)
            return
        first = groups[0][0]
        device, dtype = groups[0][1][0].device, groups[0][1][0].dtype  # (the step's scalars in the parameters' dtype)
        beta1, beta2 = first["betas"]
        beta3, k, d0 = first["beta3"], first["k"], first["d0"]
        # (a checkpoint's scalars load onto the CPU: moved once, to where the parameters are)
        d, numerator = first["d"].to(device), first["d_numerator"].to(device)
        bias_correction = math.sqrt(1 - beta2 ** (k + 1)) / (1 - beta1 ** (k + 1)) if first["bias_correction"] else 1.0
        dlr = d * (lr * bias_correction)
        weight = d / d0 * (d if first["safeguard_warmup"] else dlr)
        step_numerator = torch.zeros((), dtype=torch.float64, device=device)
        denominator = torch.zeros((), dtype=torch.float64, device=device)
        for group, params in groups:
            states = [self._state(p) for p in params]
            ps, grads = local(params), local([p.grad for p in params])
            p0s, ss = local([s["p0"] for s in states]), local([s["s"] for s in states])
            exp_avgs, exp_avg_sqs = local([s["exp_avg"] for s in states]), local([s["exp_avg_sq"] for s in states])
            if group["weight_decay"] and not group["decouple"]:
                torch._foreach_add_(grads, ps, alpha=group["weight_decay"])
            step_numerator += (d / d0) * dlr * dot_sum(grads, p0s, ps)
            torch._foreach_mul_(exp_avgs, beta1)
            torch._foreach_add_(exp_avgs, torch._foreach_mul(grads, (d * (1 - beta1)).to(dtype)))
            squares = torch._foreach_mul(grads, grads)
            torch._foreach_mul_(squares, (d * d * (1 - beta2)).to(dtype))
            torch._foreach_mul_(exp_avg_sqs, beta2)
            torch._foreach_add_(exp_avg_sqs, squares)
            del squares
            torch._foreach_mul_(ss, beta3)
            torch._foreach_add_(ss, torch._foreach_mul(grads, weight.to(dtype)))
            denominator += torch.stack(torch._foreach_norm(ss, 1, dtype=torch.float64)).sum()
        sums = torch.stack([step_numerator, denominator])
        if (group_of_shards := shard_group(groups[0][1])) is not None:  # (each rank summed its blocks)
            dist.all_reduce(sums, group=group_of_shards)
        numerator = beta3 * numerator + sums[0]
        estimate = first["d_coef"] * numerator / sums[1]
        new_d = torch.where(sums[1] > 0, torch.maximum(d, estimate), d)
        for group, params in groups:
            states = [self.state[p] for p in params]
            ps = local(params)
            exp_avgs, exp_avg_sqs = local([s["exp_avg"] for s in states]), local([s["exp_avg_sq"] for s in states])
            if group["weight_decay"] and group["decouple"]:
                torch._foreach_mul_(ps, (1 - group["weight_decay"] * dlr).to(dtype))
            # dlr m / (sqrt(v) + d eps), as (dlr / d) m / (sqrt(v) / d + eps): adding a tensor to a list of
            # tensors reads it on the host (torch 2.13), multiplying does not
            updates = torch._foreach_sqrt(exp_avg_sqs)
            torch._foreach_mul_(updates, (1 / new_d).to(dtype))
            torch._foreach_add_(updates, group["eps"])
            torch._foreach_reciprocal_(updates)
            torch._foreach_mul_(updates, exp_avgs)
            torch._foreach_mul_(updates, (-dlr / new_d).to(dtype))
            torch._foreach_add_(ps, updates)
        for group in self.param_groups:  # one d for every group, as the reference keeps it
            group.update(d=new_d, d_numerator=numerator, k=group["k"] + 1)


SUM_CHUNK = 1 << 24  # elements a float64 reduction converts at a time (64 MB), not the whole buffer at once


def dot_sum(grads: Tensors, p0s: Tensors, params: Tensors) -> torch.Tensor:
    """sum over the tensors of <g, p0 - p>, accumulated in float64 (0-d): the products written into one flat buffer
    of views, reduced a chunk at a time. Accumulated in float64, the sum over FSDP blocks rounds as one process's."""
    flat, products = flat_copy(p0s)
    torch._foreach_sub_(products, params)
    torch._foreach_mul_(products, grads)
    return torch.stack([part.sum(dtype=torch.float64) for part in flat.split(SUM_CHUNK)]).sum()


def build_prodigy(model: nn.Module, hp: ProdigyHyperparameters, loop: Loop) -> Prodigy:
    groups = weight_decay_groups(model, decay_routing("prodigy", hp.decay_embeddings), hp.weight_decay)
    return Prodigy(groups, lr=loop.learning_rate, betas=(hp.beta1, hp.beta2), beta3=hp.prodigy_beta3, eps=hp.eps,
                   decouple=hp.prodigy_decouple, bias_correction=hp.prodigy_bias_correction,
                   safeguard_warmup=hp.prodigy_safeguard_warmup, d0=hp.prodigy_d0, d_coef=hp.prodigy_d_coef)
