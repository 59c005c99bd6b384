"""
Moonlight (Liu et al., 2025, arXiv 2502.16982): Muon with decoupled weight decay
and its update scaled to the RMS of an AdamW update, the MARS-M paper's baseline
(arXiv 2510.21800). A drop-in replacement for the official implementation
(AGI-Arena/MARS, MARS_M/optimizers/moonlight.py): the same arguments, defaults and
update arithmetic. For a matrix p of shape (A, B) at its t-th update:

    b = momentum * b + g;  u = g + momentum * b (Nesterov) or b
    p = p * (1 - lr * wd) - lr * 0.2 * sqrt(max(A, B)) * NS5(u)

The other parameters take AdamW with the same lr and wd, adamw_betas and adamw_eps,
eps added to sqrt(v) before the bias corrections (rules.adamw_update, "official-moonlight"):

    p = p * (1 - lr * wd) - lr * sqrt(1-beta2^t)/(1-beta1^t) * m / (sqrt(v) + eps)

params are tensors (2-D ones to the Muon rule, the rest to AdamW) or param groups
that each say use_muon=True/False, as for optim.muon.Muon, whose parameter handling
this class shares; a group's missing settings come from the arguments. The official
training script (MARS_M/train_moonlight.py) puts every 2-D parameter on the Muon
rule except the embeddings and the lm_head (wte, wpe, lm_head, embed_tokens), which
go to AdamW with the 1-D parameters.

Where we deliberately follow the official code:
  - the AdamW side shares the group's lr (so the schedule), and decays with wd too;
  - the scale 0.2 * sqrt(max(A, B)) multiplies the update only: weight decay uses lr;
  - NS5's coefficients, 5 steps and eps 1e-7, on the wide orientation.
Where we differ (the same algorithm):
  - parameters are given as Muon's use_muon param groups, not muon_params/adamw_params;
  - NS5 runs in bf16 on CUDA as the official code does, in fp32 on CPU, and its
    normalising norm is taken in the input's precision, not in bf16 (optim.newton_schulz);
  - under torch.distributed each rank orthogonalises only its share of the matrices
    (optim.newton_schulz.newton_schulz5_across_ranks); the official code repeats all on every rank;
  - no host sync and no per-parameter Python math: foreach ops, and AdamW as a rule
    of rules.py (compiled or eager); the AdamW step count is a 0-d tensor, not an int.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

import torch
import torch.nn as nn

from optim.contract import Hyperparameters, Loop, beta, setting
from optim.muon import NS5_EPS, Muon
from optim.newton_schulz import newton_schulz5_across_ranks, ns_coefficients_setting
from optim.routing import Route, routed_params, routing
from optim.rules import decoupled_step_


@dataclass
class MoonlightHyperparameters(Hyperparameters):
    weight_decay: float = setting(0.1, 0.0)  # both rules'
    beta1: float = beta(0.9)  # the matrix rule's momentum, as the official scripts pass it
    muon_nesterov: bool = True
    beta1_1d: float = beta(0.9)  # the AdamW side's betas
    beta2_1d: float = beta(0.95)
    eps: float = setting(1e-8, 0.0)
    ns_coefficients: str = ns_coefficients_setting()  # NS5's quintic or Polar Express's (optim/newton_schulz.py)

    def display_name(self) -> str:
        return "Moonlight"


class Moonlight(Muon):
    def __init__(
        self, params: Iterable, lr: float = 1e-3, wd: float = 0.1, momentum: float = 0.95, nesterov: bool = True,
        ns_steps: int = 5, adamw_betas: tuple[float, float] = (0.9, 0.95), adamw_eps: float = 1e-8,
        *, compiled: bool = True, ns_coefficients: str = "quintic",
    ):
        """The official arguments (params for muon_params + adamw_params), plus
        compiled: run the AdamW rule as a torch.compile'd kernel (the same numbers), and
        ns_coefficients: Newton-Schulz's coefficients, a key of newton_schulz.NS_COEFFICIENTS."""
        if not lr > 0.0:
            raise ValueError(f"Invalid learning rate: {lr}")
        super().__init__(
            params, lr=lr, momentum=momentum, nesterov=nesterov, weight_decay=wd, ns_steps=ns_steps, adamw_lr=lr,
            adamw_betas=adamw_betas, adamw_eps=adamw_eps, adamw_weight_decay=wd, compiled=compiled,
            adamw_variant="official-moonlight", ns_coefficients=ns_coefficients,
        )

    def _orthogonalized_step(self, params: list[torch.Tensor], directions: list[torch.Tensor], group: dict) -> None:
        rms_matched_step_(params, directions, group)


def rms_matched_step_(params: list[torch.Tensor], directions: list[torch.Tensor], group: dict) -> None:
    """p <- p * (1 - lr * wd) - lr * 0.2 * sqrt(max(A, B)) * NS5(direction), the step of Moonlight and MARS-M,
    with NS5 shared out across ranks."""
    updates = newton_schulz5_across_ranks(directions, group["ns_steps"], NS5_EPS, coefficients=group["ns_coefficients"])
    torch._foreach_mul_(updates, [rms_matching_scale(*p.shape) for p in params])
    decoupled_step_(params, updates, group["lr"], group["weight_decay"])


ADAMW_UPDATE_RMS = 0.2  # the RMS of a typical AdamW update, which Moonlight and AdaMuon scale theirs to


def rms_matching_scale(rows: int, cols: int) -> float:
    """0.2 * sqrt(max(A, B)): an orthogonal A x B update then has about AdamW's RMS, 0.2."""
    return ADAMW_UPDATE_RMS * math.sqrt(max(rows, cols))


# The official MARS-M/Moonlight scripts' split: the blocks' matrices on the matrix rule; the embeddings,
# the tied head and the 1-D parameters on AdamW; every group decays with wd.
OFFICIAL_ROUTING = routing(Route("muon", True), Route("adamw", True), Route("adamw", True))


def official_groups(model: nn.Module) -> list[dict]:
    """OFFICIAL_ROUTING as Muon's use_muon param groups."""
    return [dict(params=params, use_muon=route.rule == "muon")
            for route, params in routed_params(model, OFFICIAL_ROUTING)]


def build_moonlight(model: nn.Module, hp: MoonlightHyperparameters, loop: Loop) -> Moonlight:
    """Moonlight as the official train_moonlight.py builds it (momentum=beta1)."""
    return Moonlight(official_groups(model), lr=loop.learning_rate, wd=hp.weight_decay, momentum=hp.beta1,
                     nesterov=hp.muon_nesterov, adamw_betas=(hp.beta1_1d, hp.beta2_1d), adamw_eps=hp.eps,
                     compiled=loop.compiled, ns_coefficients=hp.ns_coefficients)
