"""
Sophia (Liu et al., 2023, "Sophia: A Scalable Stochastic Second-order Optimizer for Language Model
Pre-training"), SophiaG as its authors implement and train it (Liuhong99/Sophia at a7e1572: sophia.py, and
train_sophiag.py's loop) and as Semenov et al.'s benchmark runs it (epfml/llm-optimizer-benchmark at fdecd5d,
src/optim/sophia.py, the same class). For each parameter p with gradient g, at every step:

    p = p * (1 - lr * weight_decay)
    m = beta1 m + (1 - beta1) g
    p = p - lr * clamp(m / (rho * bs * h + 1e-15), -1, 1)      (the reference's sign(m) min(|m| / ..., 1))

and after every step t with t + 1 a multiple of sophia_hessian_interval (the loop: optim/contract.py's
HessianEstimate), with g_hat the gradient of the mean loss on labels drawn from the model's own next-token
distribution over the step's global batch (the Gauss-Newton-Bartlett estimate), clipped at grad_clip as the
authors' loop clips it:

    h = beta2 h + (1 - beta2) g_hat^2

bs is the number of tokens the estimate stands for: the authors' loop passes its tokens per step (480 x 1024),
which sophia_bs=0 takes from the run; the benchmark passes 480 x its sequence length whatever its batch
(sophia_bs=245760 for its 124M runs). Until the first estimate h is 0 and a step is lr sign(m), as theirs.
Where the labels are drawn differs, and is written down in docs/optimizers.md: the authors' loop takes the
batch after the step's from its loader, the benchmark the step's last micro-batch, and this loop the step's
whole global batch, its labels at numbers that depend on (seed, step, row) alone (data/loader.py), so that any
world size or resume draws the same ones. Element-wise: under FSDP each rank updates its blocks.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn as nn

from data.loader import LABEL_DRAW_RANGE
from errors import ConfigError
from optim.adamw import decay_routing
from optim.contract import HessianEstimate, Hyperparameters, Loop, beta, positive, setting
from optim.routing import weight_decay_groups
from optim.rules import GroupwiseOptimizer
from optim.sharding import local


@dataclass
class SophiaHyperparameters(Hyperparameters):
    weight_decay: float = setting(0.1, 0.0)
    beta1: float = beta(0.965)  # the authors' defaults; the benchmark's 124M runs take 0.9 and 0.999
    beta2: float = beta(0.99)  # the Hessian estimate's average
    sophia_rho: float = positive(0.04)  # the clip's scale (the authors' GPT-2 small: 0.05)
    sophia_hessian_interval: int = setting(10, 1)  # steps between Hessian estimates
    sophia_bs: int = setting(0, 0)  # tokens the estimate stands for; 0: the run's tokens per step
    sophia_clip_hessian_gradient: bool = True  # the authors' loop clips it at grad_clip; the benchmark's does not
    decay_embeddings: bool = True  # as AdamW's: False leaves the embeddings and the tied head undecayed

    state_keys = ("decay_embeddings",)

    def display_name(self) -> str:
        return "Sophia"

    def gradients_per_step(self) -> float:
        return 1 + 1 / self.sophia_hessian_interval  # the estimate is a forward-backward pass over a batch

    def check_loop(self, cfg: Any) -> None:
        if cfg.dtype == "float16":
            # fp16's GradScaler skips a step whose gradients overflow; an overflowed estimate would put inf in h,
            # which freezes those weights for good
            raise ConfigError("dtype='float16' cannot be combined with Sophia, whose Hessian estimate the gradient "
                              "scaler does not guard; use bfloat16")


class Sophia(HessianEstimate, GroupwiseOptimizer):
    def __init__(self, params: Iterable, lr: float = 1e-4, betas: tuple[float, float] = (0.965, 0.99),
                 rho: float = 0.04, weight_decay: float = 0.1, bs: int = 5120, hessian_interval: int = 10,
                 clip_hessian_gradient: bool = True):
        super().__init__(params, dict(lr=lr, betas=betas, rho=rho, weight_decay=weight_decay, bs=bs))
        self.hessian_interval = hessian_interval
        self.clip_hessian_gradient = clip_hessian_gradient

    def _states(self, params: list[torch.Tensor]) -> list[dict]:
        for p in params:
            state = self.state[p]
            if not state:
                state["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                state["hessian"] = torch.zeros_like(p, memory_format=torch.preserve_format)
        return [self.state[p] for p in params]

    @torch.no_grad()
    def update_hessian(self) -> None:
        for group in self.param_groups:
            params = [p for p in group["params"] if p.grad is not None]
            if params:
                hessians = local([s["hessian"] for s in self._states(params)])
                grads = local([p.grad for p in params])
                beta2 = group["betas"][1]
                torch._foreach_mul_(hessians, beta2)
                torch._foreach_addcmul_(hessians, grads, grads, value=1.0 - beta2)

    def update_group(self, group: dict, params: list[torch.Tensor]) -> None:
        states = self._states(params)
        lr, weight_decay, beta1 = group["lr"], group["weight_decay"], group["betas"][0]
        params, grads = local(params), local([p.grad for p in params])
        exp_avgs, hessians = local([s["exp_avg"] for s in states]), local([s["hessian"] for s in states])
        if weight_decay:
            torch._foreach_mul_(params, 1.0 - lr * weight_decay)
        torch._foreach_lerp_(exp_avgs, grads, 1.0 - beta1)
        steps = torch._foreach_mul(hessians, group["rho"] * group["bs"])  # the step's one temporary
        torch._foreach_add_(steps, 1e-15)
        torch._foreach_div_(steps, exp_avgs)  # (rho bs h + 1e-15) / m: its reciprocal, clamped, is the step
        torch._foreach_reciprocal_(steps)
        torch._foreach_clamp_min_(steps, -1.0)
        torch._foreach_clamp_max_(steps, 1.0)
        torch._foreach_add_(params, steps, alpha=-lr)


def sampled_labels(probs: torch.Tensor, draws: torch.Tensor) -> torch.Tensor:
    """A label per row of probs (rows x vocabulary) drawn from that row by inverse CDF at u = draw / 2^24 in
    [0, 1) (draws: integers below LABEL_DRAW_RANGE): the first label whose cumulative probability exceeds u times
    the row's total, which is 1 but for the rounding of a sum of 50k terms (so the last label gets no extra share)."""
    cumulative = probs.cumsum(-1)
    thresholds = draws[:, None].to(cumulative.dtype) / LABEL_DRAW_RANGE * cumulative[:, -1:]
    return torch.searchsorted(cumulative, thresholds, right=True).squeeze(1).clamp_max(probs.size(-1) - 1)


def build_sophia(model: nn.Module, hp: SophiaHyperparameters, loop: Loop) -> Sophia:
    groups = weight_decay_groups(model, decay_routing("sophia", hp.decay_embeddings), hp.weight_decay)
    model.label_sampler = sampled_labels  # (the Hessian estimate's loss: on labels drawn from the model's predictions)
    return Sophia(groups, lr=loop.learning_rate, betas=(hp.beta1, hp.beta2), rho=hp.sophia_rho,
                  bs=hp.sophia_bs or loop.tokens_per_step, hessian_interval=hp.sophia_hessian_interval,
                  clip_hessian_gradient=hp.sophia_clip_hessian_gradient)
