"""
AdaMuon (Si et al., 2025, arXiv 2507.11005): Muon on the sign of its momentum, its orthogonalised update divided
element-wise by a running second moment of itself, then scaled to AdamW's update RMS (0.2). For a matrix p of
shape (rows, cols), with momentum mu and eps:

    b = lerp(b, g, 1 - mu);  u = lerp(g, b, mu) (Nesterov) or b
    O = NS5(sign(u))
    v = mu * v + (1 - mu) * O * O                                  (element-wise, p's shape)
    A = O / (sqrt(v) + eps)
    p = p * (1 - lr * weight_decay) - lr * 0.2 * sqrt(rows * cols) / (||A||_F + eps) * A

Source: the authors' repository Chongjie-Si/AdaMuon at 369f0b3 (gpt2/models/optimizers/adamuon.py; the routing
and recipe in gpt2/models/model.py's configure_optimizers, gpt2/models/train.py and gpt2/config/*.py). Their NS5
is Keller Jordan's (the quintic, eps 1e-7); ns_coefficients picks Polar Express's instead (optim/newton_schulz.py).

Routing (configure_optimizers): the blocks' matrices on AdaMuon; the embeddings and the tied head on torch's
AdamW with weight_decay, the 1-D parameters on it without; every group at the one learning rate (and schedule),
AdamW with betas (beta1_1d, beta2_1d) and eps.

Sharding: NS5 runs on one owner rank per matrix (newton_schulz5_across_ranks); v and the division are
element-wise, on each rank's rows; ||A||_F of every matrix is summed over the shard group in one all-reduce for
all of them (sharding.squared_norms). Under DDP every rank holds everything whole and computes the same.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

import torch
import torch.nn as nn

from optim.contract import Hyperparameters, Loop, beta, setting
from optim.moonlight import ADAMW_UPDATE_RMS
from optim.muon import NS5_EPS, Muon, ema_momentum
from optim.newton_schulz import newton_schulz5_across_ranks, ns_coefficients_setting
from optim.routing import Route, routed_params, routing
from optim.rules import decoupled_step_
from optim.sharding import local, shard_group, squared_norms


@dataclass
class AdaMuonHyperparameters(Hyperparameters):
    weight_decay: float = setting(0.1, 0.0)  # AdaMuon's and the embeddings' (the 1-D parameters take none)
    muon_momentum: float = beta(0.95)  # also the second moment's decay, as the authors'
    muon_nesterov: bool = True
    eps: float = setting(1e-8, 0.0)  # AdaMuon's, and the AdamW side's (torch's default, which the authors keep)
    beta1_1d: float = beta(0.9)  # the AdamW side's betas
    beta2_1d: float = beta(0.95)
    ns_coefficients: str = ns_coefficients_setting()  # NS5's quintic or Polar Express's (optim/newton_schulz.py)

    def display_name(self) -> str:
        return "AdaMuon"


class AdaMuon(Muon):
    def __init__(self, params: Iterable, lr: float = 0.02, weight_decay: float = 0.01, momentum: float = 0.95,
                 nesterov: bool = True, ns_steps: int = 5, eps: float = 1e-8,
                 adamw_betas: tuple[float, float] = (0.9, 0.95), *, compiled: bool = True,
                 ns_coefficients: str = "quintic"):
        """The authors' arguments and defaults (less rank and world_size); params as for optim.muon.Muon (use_muon
        param groups); the AdamW groups take lr, eps and adamw_betas, and their own weight_decay (default 0)."""
        super().__init__(params, lr=lr, momentum=momentum, nesterov=nesterov, weight_decay=weight_decay,
                         ns_steps=ns_steps, adamw_lr=lr, adamw_betas=adamw_betas, adamw_eps=eps,
                         adamw_weight_decay=0.0, compiled=compiled, ns_coefficients=ns_coefficients,
                         matrix_defaults=dict(eps=eps))

    def _muon_update(self, group: dict, params: list[torch.Tensor]) -> None:
        directions = ema_momentum(params, [self._momentum_buffer(p) for p in params], group["momentum"],
                                  group["nesterov"])
        update = local(newton_schulz5_across_ranks(torch._foreach_sign(directions), group["ns_steps"], NS5_EPS,
                                                   coefficients=group["ns_coefficients"]))
        second_moments = local([self._second_moment(p) for p in params])
        torch._foreach_mul_(second_moments, group["momentum"])
        torch._foreach_addcmul_(second_moments, update, update, value=1.0 - group["momentum"])
        denominators = torch._foreach_sqrt(second_moments)
        torch._foreach_add_(denominators, group["eps"])
        torch._foreach_div_(update, denominators)
        # 0.2 sqrt(rows * cols) / (||A||_F + eps), ||A||_F whole under FSDP2: one all-reduce for all matrices
        scales = list(squared_norms(update, shard_group(params)).sqrt_().add_(group["eps"]).reciprocal_()
                      .to(update[0].dtype).unbind())
        torch._foreach_mul_(scales, [ADAMW_UPDATE_RMS * math.sqrt(p.numel()) for p in params])
        torch._foreach_mul_(update, scales)
        decoupled_step_(local(params), update, group["lr"], group["weight_decay"])

    def _second_moment(self, p: torch.Tensor) -> torch.Tensor:
        state = self.state[p]
        if "v_buffer" not in state:
            state["v_buffer"] = torch.zeros_like(p, memory_format=torch.preserve_format)
        return state["v_buffer"]


def build_adamuon(model: nn.Module, hp: AdaMuonHyperparameters, loop: Loop) -> AdaMuon:
    """The authors' configure_optimizers: the blocks' matrices on AdaMuon; the embeddings (decayed) and the 1-D
    parameters (not) on AdamW; one learning rate."""
    table = routing(Route("adamuon", True), Route("adamw", True), Route("adamw", False))
    return AdaMuon(
        [dict(params=params, use_muon=route.rule == "adamuon",
              **({} if route.rule == "adamuon" else dict(weight_decay=hp.weight_decay if route.decay else 0.0)))
         for route, params in routed_params(model, table)],
        lr=loop.learning_rate, weight_decay=hp.weight_decay, momentum=hp.muon_momentum, nesterov=hp.muon_nesterov,
        eps=hp.eps, adamw_betas=(hp.beta1_1d, hp.beta2_1d), compiled=loop.compiled,
        ns_coefficients=hp.ns_coefficients,
    )
