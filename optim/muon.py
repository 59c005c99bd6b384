"""
Muon (Jordan et al., 2024), the MARS paper's baseline: SGD momentum with Nesterov,
the update orthogonalised by NS5 and scaled by max(1, rows/cols)^0.5, decoupled
weight decay, following the official MARS repository's Muon:

    b = momentum * b + g;  u = g + momentum * b (Nesterov) or b
    p = p * (1 - lr * weight_decay) - lr * NS5(u) * max(1, rows/cols)^0.5

Muon handles 2-D parameters only; the others take AdamW in the same optimizer
(param groups with use_muon=False), so one state_dict and one learning-rate
schedule cover both.

Under torch.distributed, each rank orthogonalises only its share of the matrices
(balanced by size) and receives the others' results, in bf16 on CUDA
(optim.newton_schulz.newton_schulz5_across_ranks), so no rank repeats another's
Newton-Schulz work. The momentum buffers are updated on every rank
(element-wise, cheap), so every rank holds the full state and rank 0's
state_dict is a complete checkpoint.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import ClassVar

import torch
import torch.nn as nn

from optim.adamw import SideAdamW
from optim.contract import Hyperparameters, Loop, MatrixProducts, Product, beta, setting
from optim.newton_schulz import (
    muon_scale, newton_schulz5_across_ranks, ns5_dtype, ns5_products, ns_coefficients_setting, ns_iterations,
)
from optim.routing import Route, routing, use_muon_groups
from optim.rules import ADAMW_VARIANTS, GroupwiseOptimizer, adamw_update, decoupled_step_
from optim.sharding import local, shard_group, squared_norms, with_local_blocks

NS5_EPS = 1e-7  # the official Muon's; MARS-Shampoo uses the optimizer's eps
# muon_adamw's choices, as rules.adamw_update's variants
MUON_ADAMW_VARIANTS = {"torch": "torch", "official": "official-mars", "keller": "official-moonlight"}


@dataclass
class OrthogonalizedUpdate(Hyperparameters):
    """Settings of the orthogonalised update that karpathy/nanochat's Muon (nanochat/optim.py, muon_step_fused)
    adds, for the optimizers whose Hyperparameters take them (a base class: Muon's, NorMuon's); each off by default."""

    muon_eq: bool = False  # MuonEq (arXiv 2603.28254): each row scaled to the mean row norm before Newton-Schulz
    muon_plus: bool = False  # Muon+ (arXiv 2602.21545): the orthogonalised matrix's norm snapped to sqrt(min side)
    cautious_weight_decay: bool = False  # the decay only where update * weight >= 0

    def update_settings(self) -> dict:
        """The matrix groups' keys for these settings."""
        return dict(muon_eq=self.muon_eq, muon_plus=self.muon_plus, cautious_weight_decay=self.cautious_weight_decay)


@dataclass
class MuonHyperparameters(OrthogonalizedUpdate, SideAdamW):
    mup_hidden_rule: ClassVar[str] = "spectral"  # (contract.Hyperparameters)
    weight_decay: float = setting(0.1, 0.0)
    eps: float = setting(1e-8, 0.0)  # the AdamW side's
    muon_momentum: float = beta(0.95)
    muon_nesterov: bool = True
    muon_embeddings_on_adamw: bool = False  # the now-recommended split; the paper puts them on Muon
    # The AdamW on Muon's other parameters: "torch" (torch's arithmetic); "official", that of the
    # official MARS repository's optimizers/adamw.py (eps added to the uncorrected sqrt(v), weight
    # decay scaled by the bias-corrected step size), which its train_muon.py uses; or "keller", the AdamW
    # inside Keller Jordan's Muon as llm-baselines ships it (eps added to the uncorrected sqrt(v), weight
    # decay scaled by lr), which Semenov et al.'s runs use.
    muon_adamw: str = setting("torch", choices=tuple(MUON_ADAMW_VARIANTS))
    ns_coefficients: str = ns_coefficients_setting()  # NS5's quintic or Polar Express's (optim/newton_schulz.py)

    state_keys = ("muon_embeddings_on_adamw",)

    def display_name(self) -> str:
        return "Muon"


class Muon(MatrixProducts, GroupwiseOptimizer):
    def __init__(
        self, params: Iterable, lr: float = 0.02, momentum: float = 0.95, nesterov: bool = True,
        weight_decay: float = 0.0, ns_steps: int = 5, adamw_lr: float = 3e-3,
        adamw_betas: tuple[float, float] = (0.9, 0.95), adamw_eps: float = 1e-8, adamw_weight_decay: float = 0.1,
        *, compiled: bool = True, adamw_variant: str = "torch", ns_coefficients: str = "quintic",
        matrix_defaults: dict | None = None,
    ):
        """params: tensors (2-D ones go to Muon, the rest to AdamW) or param groups
        that each say use_muon=True/False; a group's missing settings come from the
        arguments of its kind (lr, momentum, ... for Muon; adamw_* for AdamW).
        adamw_variant: the AdamW arithmetic, one of rules.ADAMW_VARIANTS ("official-mars":
        the official repository's optimizers/adamw.py, which its train_muon.py uses).
        ns_coefficients: Newton-Schulz's coefficients, a key of newton_schulz.NS_COEFFICIENTS.
        matrix_defaults: the matrix groups' further settings (a variant's own: NorMuon's beta2, AdaMuon's eps)."""
        if adamw_variant not in ADAMW_VARIANTS:
            raise ValueError(f"adamw_variant {adamw_variant!r}: choose one of {', '.join(ADAMW_VARIANTS)}")
        self.adamw_variant = adamw_variant
        self.muon_defaults = dict(lr=lr, momentum=momentum, nesterov=nesterov, weight_decay=weight_decay,
                                  ns_steps=ns_steps, ns_coefficients=ns_coefficients, **(matrix_defaults or {}))
        self.adamw_defaults = dict(lr=adamw_lr, betas=adamw_betas, eps=adamw_eps, weight_decay=adamw_weight_decay)
        self.compiled = compiled
        params = list(params)
        if params and not isinstance(params[0], dict):
            params = [
                dict(params=[p for p in params if p.ndim == 2], use_muon=True),
                dict(params=[p for p in params if p.ndim != 2], use_muon=False),
            ]
        super().__init__(params, defaults={})

    def add_param_group(self, param_group: dict) -> None:
        if "use_muon" not in param_group:
            raise ValueError("each Muon param group must say use_muon=True (2-D matrices) or False (AdamW)")
        for key, value in (self.muon_defaults if param_group["use_muon"] else self.adamw_defaults).items():
            param_group.setdefault(key, value)
        if param_group["use_muon"] and any(p.ndim != 2 for p in param_group["params"]):
            raise ValueError("Muon orthogonalises 2-D matrices only; put other parameters in a use_muon=False group")
        if param_group["use_muon"]:
            ns_iterations(param_group["ns_coefficients"], param_group["ns_steps"])  # (refuses a bad choice now)
        super().add_param_group(param_group)

    def products(self) -> list[Product]:
        """NS5 of the matrices on the Muon rule, batched by shape within each group (as update_group runs it)."""
        return [product for group in self.param_groups if group["use_muon"] and group["params"]
                for product in ns5_products([tuple(p.shape) for p in group["params"]], group["ns_steps"],
                                            ns5_dtype(group["params"][0].device))]

    def update_group(self, group: dict, params: list[torch.Tensor]) -> None:
        if group["use_muon"]:
            self._muon_update(group, params)
        else:
            adamw_update(self.state, params, group["lr"], group["betas"], group["eps"], group["weight_decay"],
                         amsgrad=False, compiled=self.compiled, variant=self.adamw_variant)

    def _muon_update(self, group: dict, params: list[torch.Tensor]) -> None:
        grads = [p.grad for p in params]
        buffers = [self._momentum_buffer(p) for p in params]
        torch._foreach_mul_(buffers, group["momentum"])
        torch._foreach_add_(buffers, grads)
        directions = torch._foreach_add(grads, buffers, alpha=group["momentum"]) if group["nesterov"] else buffers
        self._orthogonalized_step(params, directions, group)

    def _orthogonalized_step(self, params: list[torch.Tensor], directions: list[torch.Tensor], group: dict) -> None:
        """p <- p * (1 - lr * weight_decay) - lr * NS5(direction) * max(1, rows/cols)^0.5 (with OrthogonalizedUpdate's
        settings where the group takes them)."""
        updates = orthogonalized(params, directions, group)
        torch._foreach_mul_(updates, [muon_scale(*p.shape) for p in params])
        decoupled_step_(local(params), local(updates), group["lr"], group["weight_decay"],
                        group.get("cautious_weight_decay", False))

    def _momentum_buffer(self, p: torch.Tensor) -> torch.Tensor:
        state = self.state[p]
        if "momentum_buffer" not in state:
            state["momentum_buffer"] = torch.zeros_like(p, memory_format=torch.preserve_format)
        return state["momentum_buffer"]


def orthogonalized(params: list[torch.Tensor], directions: list[torch.Tensor], group: dict) -> list[torch.Tensor]:
    """NS5 of each direction (shared out across ranks), with OrthogonalizedUpdate's MuonEq before it and Muon+
    after it where the group asks: nanochat's X * (||X||_F / sqrt(rows)) / max(||row||, 1e-6), row by row, and
    O * sqrt(min(rows, cols)) / max(||O||_F, 1e-6). Under FSDP2 the norms of whole matrices are summed over the
    shard group (one all-reduce each), the rows' are each rank's own."""
    if group.get("muon_eq", False):
        whole = squared_norms(directions, shard_group(params)).sqrt_()
        targets = whole / torch.tensor([p.shape[0] for p in params], dtype=whole.dtype, device=whole.device).sqrt()
        row_norms = [mean.mul_(d.shape[1]).sqrt_().clamp_min_(1e-6)
                     for mean, d in zip(row_mean_squares(local(directions)), local(directions))]
        scales = torch._foreach_div(list(targets.to(row_norms[0].dtype).unbind()), row_norms)
        directions = with_local_blocks(directions, torch._foreach_mul(local(directions), scales))
    updates = newton_schulz5_across_ranks(directions, group["ns_steps"], NS5_EPS, coefficients=group["ns_coefficients"])
    if group.get("muon_plus", False):
        norms = squared_norms(updates, shard_group(params)).sqrt_().clamp_min_(1e-6)
        sides = torch.tensor([min(p.shape) for p in params], dtype=norms.dtype, device=norms.device).sqrt()
        torch._foreach_mul_(local(updates), list((sides / norms).to(updates[0].dtype).unbind()))
    return updates


def row_mean_squares(matrices: list[torch.Tensor]) -> list[torch.Tensor]:
    """The mean of x^2 over each row of each matrix, as a (rows, 1) column in its dtype (accumulated in float64:
    the same numbers for a block of rows as for the whole matrix), one reduction per width for all matrices."""
    results: list[torch.Tensor] = [None] * len(matrices)
    widths: dict[int, list[int]] = {}
    for i, matrix in enumerate(matrices):
        widths.setdefault(matrix.shape[1], []).append(i)
    for cols, members in widths.items():
        rows = torch.cat([matrices[i] for i in members])
        means = torch.linalg.vector_norm(rows, dim=1, keepdim=True, dtype=torch.float64).square_().div_(cols)
        for i, mean in zip(members, means.to(rows.dtype).split([matrices[i].shape[0] for i in members])):
            results[i] = mean
    return results


def ema_momentum(params: list[torch.Tensor], buffers: list[torch.Tensor], momentum: float,
                 nesterov: bool) -> list[torch.Tensor]:
    """The direction of Keller Jordan's current Muon (and of NorMuon and AdaMuon, which keep it), its momentum an
    average: b <- lerp(b, g, 1 - momentum); u = lerp(g, b, momentum) with Nesterov, else b. (Muon above sums,
    b <- momentum b + g, as the MARS repository's: the same direction up to a factor Newton-Schulz divides out.)"""
    grads = [p.grad for p in params]
    torch._foreach_lerp_(buffers, grads, 1.0 - momentum)
    return torch._foreach_lerp(grads, buffers, momentum) if nesterov else buffers


def build_muon(model: nn.Module, hp: MuonHyperparameters, loop: Loop) -> Muon:
    """The paper's baseline: every 2-D parameter (embeddings too) on Muon, the rest on AdamW;
    muon_embeddings_on_adamw moves the embeddings (and the tied head) to AdamW."""
    adamw = Route("adamw", True, lr="lr_1d")
    table = routing(Route("muon", True), adamw if hp.muon_embeddings_on_adamw else Route("muon", True), adamw)
    return Muon(
        use_muon_groups(model, table, "muon", loop.learning_rate, hp),
        lr=loop.learning_rate, momentum=hp.muon_momentum, nesterov=hp.muon_nesterov,
        weight_decay=hp.weight_decay, adamw_betas=(hp.beta1_1d, hp.beta2_1d),
        adamw_eps=hp.eps, adamw_weight_decay=hp.weight_decay_1d, compiled=loop.compiled,
        adamw_variant=MUON_ADAMW_VARIANTS[hp.muon_adamw], ns_coefficients=hp.ns_coefficients,
        matrix_defaults=hp.update_settings(),
    )
