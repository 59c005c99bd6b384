"""
Dion2 and NorDion2 (Ahn, Xu et al., "Dion2", arXiv 2512.16928): Muon that orthogonalises only a fraction of each
matrix's momentum at each step, the rows or columns with the largest L1 norms, and decays what it took (error
feedback). Following the authors' code, microsoft/dion at 0a059a4 (dion/dion2.py, dion/nordion2.py, and the
routing and recipe of their train.py and configs/dion2_160m.yaml). For a matrix X of shape (m, n), gradient G and
momentum M:

    M = M + G
    S = the k = ceil(ortho_fraction * s) slices of M with the largest L1 norms, of its s slices along the shorter
        side (rows if m <= n, else columns; NorDion2: always rows)
    O = NS(M[S]), zero off S           (the submatrix orthogonalised)
    M[S] = mu * M[S]                   (error feedback: the slices the update took decay)
    NorDion2 only, NorMuon's normalisation of O's selected rows:
        v[S] = lerp(v[S], mean over each row of O * O, 1 - normuon_beta2)
        O = O / (sqrt(v) + 1e-8), rescaled to O's Frobenius norm (the norm ratio's floor 1e-8)
    X = X * (1 - lr * weight_decay) - lr * sqrt(m / n) * O

NS is Newton-Schulz with ns_coefficients: "dion" (the default), the authors' five per-iteration triples, which
their train.py runs (its --use_polar_express is off in their recipe), on X / (||X||_F + eps), eps = dion_eps.
The other parameters take AdamW as Dion's do (optim/dion.py: the embeddings and the head at the same learning
rate, undecayed, betas 0.9/0.95, eps dion_eps; our 1-D parameters with them).

Sharding: the selection needs the whole matrix (its columns' norms sum over rows), so each matrix's M goes whole
to one owner rank (sharding.on_owner_ranks, as Muon's Newton-Schulz does), which selects as one device does,
orthogonalises the submatrix and returns O at full size, zero off S (as the authors' selection_scope="global" returns
it; theirs selects rows of every row-sharded matrix, a tall one's too). Every rank then finds S
in its rows of O as the nonzero slices (their dion2_post_orthogonalize_masked; a slice of O is zero only where
that slice of M[S] is, which the decay leaves unchanged) and does the rest on its rows: the same numbers as one
process at any world size. The selection is made on M as it travels (Newton-Schulz's dtype: bf16 on CUDA), its norms
summed in float32, on one process too, so that it does not depend on the world size. The authors' FSDP default, "local" (each rank's
top-k of its own rows, rows even of a tall matrix), does, and so does their "global" (rows of a tall matrix): a declared
difference (docs/optimizers.md).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import ClassVar

import torch
import torch.nn as nn

from optim.contract import Loop, Product, beta, setting
from optim.dion import DION_ROUTING
from optim.muon import Muon, row_mean_squares
from optim.newton_schulz import (
    NewtonSchulzSettings, newton_schulz5_batched, ns5_dtype, ns5_flops, ns5_products, ns_coefficients_setting,
)
from optim.routing import routed_params
from optim.rules import decoupled_step_
from optim.sharding import local, on_owner_ranks, row_zeros_like, shard_group, squared_norms

NORDION2_EPS = 1e-8  # the authors' (not a setting): in the row normalisation and the norm ratio's floor


@dataclass
class Dion2Hyperparameters(NewtonSchulzSettings):
    mup_hidden_rule: ClassVar[str] = "spectral"  # (contract.Hyperparameters: the update's scale is sqrt(m / n))
    # configs/dion2_160m.yaml: lr 0.02, mu 0.95, weight decay 0.01, ortho_fraction 0.5
    weight_decay: float = setting(0.01, 0.0)  # the matrices' (the AdamW side's parameters: none)
    ortho_fraction: float = setting(0.5, 0.0, 1.0, low_open=True)  # k / s: the share of slices orthogonalised
    dion_momentum: float = beta(0.95)  # mu, the selected slices' decay
    dion_eps: float = setting(1e-8, 0.0)  # Newton-Schulz's normalisation's epsilon, and the AdamW's eps
    beta1_1d: float = beta(0.9)  # the AdamW's, on the embeddings, the head and the 1-D parameters
    beta2_1d: float = beta(0.95)
    ns_coefficients: str = ns_coefficients_setting("dion")

    def display_name(self) -> str:
        return "Dion2"


@dataclass
class NorDion2Hyperparameters(Dion2Hyperparameters):
    normuon_beta2: float = beta(0.95)  # the per-row second moment's decay (their train.py's muon_beta2)

    def display_name(self) -> str:
        return "NorDion2"


def selection(shape: tuple[int, ...], rows_only: bool) -> int:
    """The dimension whose slices are selected: rows (0) if the matrix is not tall (or rows_only), else columns."""
    return 0 if rows_only or shape[0] <= shape[1] else 1


def selected_count(shape: tuple[int, ...], rows_only: bool, fraction: float) -> int:
    return max(1, math.ceil(fraction * shape[selection(shape, rows_only)]))


def submatrix_shape(shape: tuple[int, ...], rows_only: bool, fraction: float) -> tuple[int, int]:
    k = selected_count(shape, rows_only, fraction)
    return (k, shape[1]) if selection(shape, rows_only) == 0 else (shape[0], k)


class Dion2(Muon):
    """Param groups say use_muon=True (2-D matrices, on Dion2) or False (AdamW), as Muon's. State per matrix: its
    momentum (and NorDion2's v, a (rows, 1) column: sharded under FSDP as the parameter's rows)."""

    side_state_sharded = True  # (bench.memory)

    def __init__(self, params: Iterable, lr: float = 0.01, ortho_fraction: float = 0.25, mu: float = 0.95,
                 weight_decay: float = 0.01, epsilon: float = 1e-8, adamw_betas: tuple[float, float] = (0.9, 0.95),
                 normalized: bool = False, beta2: float = 0.95, ns_steps: int = 5, ns_coefficients: str = "dion",
                 *, compiled: bool = True):
        """The authors' arguments and defaults (Dion2's; normalized=True: NorDion2's, with its muon_beta2 as beta2).
        The AdamW side runs at lr, undecayed, unless a group says otherwise."""
        if not 0.0 < ortho_fraction <= 1.0:
            raise ValueError(f"ortho_fraction must be in (0, 1], got {ortho_fraction}")
        super().__init__(params, lr=lr, momentum=mu, nesterov=False, weight_decay=weight_decay, ns_steps=ns_steps,
                         adamw_lr=lr, adamw_betas=adamw_betas, adamw_eps=epsilon, adamw_weight_decay=0.0,
                         compiled=compiled, ns_coefficients=ns_coefficients,
                         matrix_defaults=dict(ortho_fraction=ortho_fraction, epsilon=epsilon, normalized=normalized,
                                              beta2=beta2))

    def products(self) -> list[Product]:
        """Newton-Schulz of each matrix's selected submatrix, batched by shape within each group."""
        return [product for group in self.param_groups if group["use_muon"] and group["params"]
                for product in ns5_products(
                    [submatrix_shape(tuple(p.shape), group["normalized"], group["ortho_fraction"])
                     for p in group["params"]], group["ns_steps"], ns5_dtype(group["params"][0].device))]

    def _muon_update(self, group: dict, params: list[torch.Tensor]) -> None:
        momenta = [self._momentum_buffer(p) for p in params]
        torch._foreach_add_(local(momenta), local([p.grad for p in params]))
        orthogonal = local(selected_orthogonalized(momenta, group))
        selected = selected_slices(orthogonal, params, group["normalized"])
        factors = torch._foreach_mul(selected, -(1.0 - group["momentum"]))  # M[S] <- mu M[S]: 1 - (1 - mu) [S]
        torch._foreach_add_(factors, 1.0)
        torch._foreach_mul_(local(momenta), factors)
        if group["normalized"]:
            orthogonal = self._row_normalized(params, orthogonal, selected, group["beta2"])
        torch._foreach_mul_(orthogonal, [math.sqrt(p.shape[0] / p.shape[1]) for p in params])
        decoupled_step_(local(params), orthogonal, group["lr"], group["weight_decay"])

    def _row_normalized(self, params: list[torch.Tensor], orthogonal: list[torch.Tensor],
                        selected: list[torch.Tensor], beta2: float) -> list[torch.Tensor]:
        """NorDion2: the selected rows' second moments updated (the others kept), O divided row by row by their
        square roots and rescaled to its Frobenius norm (both norms whole under FSDP2: one all-reduce)."""
        second_moments = local([self._second_moment(p) for p in params])
        # lerp(v, mean square, 1 - beta2) on the selected rows, a lerp by 0 (v itself) on the others
        torch._foreach_lerp_(second_moments, row_mean_squares(orthogonal), torch._foreach_mul(selected, 1.0 - beta2))
        step_sizes = torch._foreach_sqrt(second_moments)
        torch._foreach_add_(step_sizes, NORDION2_EPS)
        normalised = torch._foreach_div(orthogonal, step_sizes)
        norms = squared_norms([*orthogonal, *normalised], shard_group(params)).sqrt_()
        before, after = norms.tensor_split(2)
        torch._foreach_mul_(normalised, list(before.div_(after.clamp_min_(NORDION2_EPS)).to(normalised[0].dtype)
                                             .unbind()))
        return normalised

    def _second_moment(self, p: torch.Tensor) -> torch.Tensor:
        state = self.state[p]
        if "second_momentum_buffer" not in state:
            state["second_momentum_buffer"] = row_zeros_like(p)
        return state["second_momentum_buffer"]


def selected_slices(orthogonal: list[torch.Tensor], params: list[torch.Tensor], rows_only: bool) -> list[torch.Tensor]:
    """Each matrix's selected slices among this rank's rows: 1 where a row (a (rows, 1) column) or a column (a
    (1, cols) row) of O is nonzero, else 0, in O's dtype; one reduction per shape for all its matrices."""
    masks: list[torch.Tensor] = [None] * len(orthogonal)
    same: dict[tuple, list[int]] = {}
    for i, (o, p) in enumerate(zip(orthogonal, params)):
        same.setdefault((tuple(o.shape), selection(p.shape, rows_only)), []).append(i)
    for (_, dim), members in same.items():
        found = torch.stack([orthogonal[i] for i in members]).abs_().sum(dim=2 - dim, keepdim=True) > 0
        for i, mask in zip(members, found.to(orthogonal[0].dtype).unbind()):
            masks[i] = mask
    return masks


def selected_orthogonalized(momenta: list[torch.Tensor], group: dict) -> list[torch.Tensor]:
    """O of each matrix (in its momentum's dtype and layout): Newton-Schulz of its top-k slices by L1 norm, zero
    elsewhere, each computed from the whole M on one owner rank, the owner's matrices batched by shape."""
    rows_only, fraction = group["normalized"], group["ortho_fraction"]
    dtype = ns5_dtype(momenta[0].device)

    def select_and_orthogonalize(indices: list[int], wholes: list[list[torch.Tensor]]) -> list[list[torch.Tensor]]:
        same_shape: dict[tuple[int, ...], list[int]] = {}
        for i, (whole,) in enumerate(wholes):
            same_shape.setdefault(tuple(whole.shape), []).append(i)
        selections = []  # per shape: its members, their stack M, the selected dimension and the index of S in it
        for shape, members in same_shape.items():
            M = torch.stack([wholes[i][0] for i in members]).to(dtype)  # (B, m, n)
            dim = 1 + selection(shape, rows_only)
            # (B, s): each slice's L1 norm, accumulated in float32 (a bf16 sum would tie hundreds of rows)
            norms = torch.linalg.vector_norm(M, ord=1, dim=3 - dim, dtype=torch.promote_types(M.dtype, torch.float32))
            top = norms.topk(selected_count(shape, rows_only, fraction), dim=-1, sorted=False).indices
            index = top.unsqueeze(-1).expand(-1, -1, shape[1]) if dim == 1 else top.unsqueeze(1).expand(-1, shape[0], -1)
            selections.append((members, M, dim, index))
        # every submatrix in one call: batched by shape (a tall matrix's k columns with a wide one's k rows), as
        # products() declares them
        orthogonal = iter(newton_schulz5_batched([sub for _, M, dim, index in selections
                                                  for sub in M.gather(dim, index).unbind()],
                                                 group["ns_steps"], group["epsilon"], group["ns_coefficients"]))
        results: list[list[torch.Tensor]] = [None] * len(wholes)
        for members, M, dim, index in selections:
            O = torch.stack([next(orthogonal) for _ in members]).to(dtype)
            for i, o in zip(members, torch.zeros_like(M).scatter_(dim, index, O).unbind()):
                results[i] = [o]
        return results

    costs = [ns5_flops(*submatrix_shape(tuple(m.shape), rows_only, fraction), group["ns_steps"]) for m in momenta]
    return [o for (o,) in on_owner_ranks([[m] for m in momenta], select_and_orthogonalize, dtype, costs)]


def build_dion2(model: nn.Module, hp: Dion2Hyperparameters, loop: Loop) -> Dion2:
    """The blocks' matrices on Dion2 (decayed); the embeddings, the head and the 1-D parameters on AdamW at the same
    learning rate, undecayed: optim/dion.py's routing, their train.py's."""
    groups = [dict(params=params, use_muon=route.rule == "dion", weight_decay=hp.weight_decay if route.decay else 0.0)
              for route, params in routed_params(model, DION_ROUTING)]
    normalized = isinstance(hp, NorDion2Hyperparameters)
    return Dion2(groups, lr=loop.learning_rate, ortho_fraction=hp.ortho_fraction, mu=hp.dion_momentum,
                 weight_decay=hp.weight_decay, epsilon=hp.dion_eps, adamw_betas=(hp.beta1_1d, hp.beta2_1d),
                 normalized=normalized, beta2=hp.normuon_beta2 if normalized else 0.95, ns_steps=hp.ns_steps,
                 ns_coefficients=hp.ns_coefficients, compiled=loop.compiled)
