"""
NorMuon (Li et al., 2025, arXiv 2510.05491): Muon whose orthogonalised update is normalised row by row
(neuron-wise) by a running second moment, then rescaled to its Frobenius norm before the normalisation. For a
matrix p of shape (rows, cols), with momentum mu and beta2:

    b = lerp(b, g, 1 - mu);  u = lerp(g, b, mu) (Nesterov) or b
    O = NS5(u)
    v = lerp(v, mean over each row of O * O, 1 - beta2)           (one entry per row: rows x 1)
    N = O / (sqrt(v) + 1e-10)
    N = N * ||O||_F / (||N||_F + 1e-10) * max(1, rows/cols)^0.5
    p = p * (1 - lr * weight_decay) - lr * N

Source: the authors' repository zichongli5/NorMuon at d45c9a4 (normuon.py: normuon_update and
SingleDeviceNorMuonWithAuxAdam, whose Adam for the other parameters is torch's AdamW arithmetic). The authors'
NS5 is Keller Jordan's (the quintic, eps 1e-7, 5 iterations); ns_coefficients picks Polar Express's or
modded-nanogpt's "simple" instead, and ns_steps the iterations (modded-nanogpt's NorMuon: simple, 12;
optim/newton_schulz.py).

Routing (the authors' repository ships no training script; its usage "mirrors" Keller Jordan's Muon, and
modded-nanogpt's NorMuon run routes so): the blocks' matrices on NorMuon; the embeddings, the tied head and the
1-D parameters on the AdamW side (lr_1d, beta1_1d, beta2_1d, weight_decay_1d, eps), as Muon's
muon_embeddings_on_adamw.

Sharding: NS5 runs on one owner rank per matrix (newton_schulz5_across_ranks); everything after it is on each
rank's rows. v is a statistic per row, so under FSDP2 (rows sharded on dim 0) it is each rank's own (a
DTensor sharded like the parameter: sharding.row_zeros_like); the two Frobenius norms of every matrix are
summed over the shard group in one all-reduce for all of them (sharding.squared_norms). Under DDP every rank
holds everything whole and computes the same.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import ClassVar

import torch
import torch.nn as nn

from optim.adamw import SideAdamW
from optim.contract import Loop, beta, setting
from optim.muon import Muon, OrthogonalizedUpdate, ema_momentum, orthogonalized, row_mean_squares
from optim.newton_schulz import NewtonSchulzSettings, muon_scale
from optim.routing import Route, routing, use_muon_groups
from optim.rules import decoupled_step_
from optim.sharding import local, row_zeros_like, shard_group, squared_norms

NORMUON_EPS = 1e-10  # the authors' (not a setting): in the row normalisation and the norm ratio


@dataclass
class NorMuonHyperparameters(OrthogonalizedUpdate, SideAdamW, NewtonSchulzSettings):  # (ns_steps, ns_coefficients)
    mup_hidden_rule: ClassVar[str] = "spectral"  # (contract.Hyperparameters)
    weight_decay: float = setting(0.1, 0.0)  # NorMuon's (the AdamW side's is weight_decay_1d)
    muon_momentum: float = beta(0.95)
    muon_nesterov: bool = True
    normuon_beta2: float = beta(0.95)  # the per-row second moment's decay
    eps: float = setting(1e-8, 0.0)  # the AdamW side's

    def display_name(self) -> str:
        return "NorMuon"


class NorMuon(Muon):
    side_state_sharded = True  # v, a (rows, 1) column, is sharded under FSDP as the parameter's rows (bench.memory)

    def __init__(self, params: Iterable, lr: float = 0.02, weight_decay: float = 0.0, momentum: float = 0.95,
                 beta2: float = 0.95, nesterov: bool = True, ns_steps: int = 5, adamw_lr: float = 3e-4,
                 adamw_betas: tuple[float, float] = (0.9, 0.95), adamw_eps: float = 1e-10,
                 adamw_weight_decay: float = 0.0, *, compiled: bool = True, ns_coefficients: str = "quintic",
                 update_settings: dict | None = None):
        """The authors' defaults (SingleDeviceNorMuonWithAuxAdam's, its Adam's as adamw_*); params as for
        optim.muon.Muon (use_muon param groups)."""
        super().__init__(params, lr=lr, momentum=momentum, nesterov=nesterov, weight_decay=weight_decay,
                         ns_steps=ns_steps, adamw_lr=adamw_lr, adamw_betas=adamw_betas, adamw_eps=adamw_eps,
                         adamw_weight_decay=adamw_weight_decay, compiled=compiled, ns_coefficients=ns_coefficients,
                         matrix_defaults=dict(beta2=beta2, **(update_settings or {})))

    def _muon_update(self, group: dict, params: list[torch.Tensor]) -> None:
        directions = ema_momentum(params, [self._momentum_buffer(p) for p in params], group["momentum"],
                                  group["nesterov"])
        orthogonal = local(orthogonalized(params, directions, group))
        second_moments = local([self._second_moment(p) for p in params])
        torch._foreach_lerp_(second_moments, row_mean_squares(orthogonal), 1.0 - group["beta2"])
        step_sizes = torch._foreach_sqrt(second_moments)
        torch._foreach_add_(step_sizes, NORMUON_EPS)
        torch._foreach_reciprocal_(step_sizes)
        normalised = torch._foreach_mul(orthogonal, step_sizes)  # (each row by its own)
        # ||O||_F / (||N||_F + eps) of every matrix, whole under FSDP2: one all-reduce for both norms of all
        norms = squared_norms([*orthogonal, *normalised], shard_group(params)).sqrt_()
        before, after = norms.tensor_split(2)
        scales = list(before.div_(after.add_(NORMUON_EPS)).to(normalised[0].dtype).unbind())
        torch._foreach_mul_(scales, [muon_scale(*p.shape) for p in params])
        torch._foreach_mul_(normalised, scales)
        decoupled_step_(local(params), normalised, group["lr"], group["weight_decay"],
                        group.get("cautious_weight_decay", False))

    def _second_moment(self, p: torch.Tensor) -> torch.Tensor:
        state = self.state[p]
        if "second_momentum_buffer" not in state:
            state["second_momentum_buffer"] = row_zeros_like(p)
        return state["second_momentum_buffer"]


def build_normuon(model: nn.Module, hp: NorMuonHyperparameters, loop: Loop) -> NorMuon:
    """The blocks' matrices on NorMuon; the embeddings, the tied head and the 1-D parameters on AdamW at lr_1d."""
    table = routing(Route("normuon", True), Route("adamw", True, lr="lr_1d"), Route("adamw", True, lr="lr_1d"))
    return NorMuon(
        use_muon_groups(model, table, "normuon", loop.learning_rate, hp),
        lr=loop.learning_rate, weight_decay=hp.weight_decay, momentum=hp.muon_momentum, beta2=hp.normuon_beta2,
        nesterov=hp.muon_nesterov, ns_steps=hp.ns_steps, adamw_betas=(hp.beta1_1d, hp.beta2_1d), adamw_eps=hp.eps,
        adamw_weight_decay=hp.weight_decay_1d, compiled=loop.compiled, ns_coefficients=hp.ns_coefficients,
        update_settings=hp.update_settings(),
    )
