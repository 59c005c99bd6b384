"""
Optimizer diagnostics for the logs, computed on log steps only (no host sync in between):
  - update RMS and weight RMS, over all parameters and per kind (optim.routing.parameter_kinds:
    attention, mlp, embeddings, 1d), for every optimizer: the update is the weights after the step minus before;
  - for MARS-type optimizers (MARS, MARS-M), whether the variance-reduction term does anything:
    the fraction of tensors whose corrected gradient c was clipped (||c|| > 1),
    ||g_t - g_prev|| / ||g_t|| and cos(g_t, g_prev), over the tensors the MARS rule updates.
The values are 0-d device tensors; the loop reads them with the rest of a log row.
"""

import torch
import torch.distributed as dist
import torch.nn as nn

from optim.sharding import local, shard_group, squared_norms


def weights_before_step(kinds: dict[str, list[nn.Parameter]]) -> dict[str, list[torch.Tensor]]:
    """A copy of the weights (one model's worth of memory, on log steps only; a rank's own blocks when sharded)."""
    return {kind: torch._foreach_mul(local([p.detach() for p in params]), 1.0) for kind, params in kinds.items()}


def update_and_weight_rms(kinds: dict[str, list[nn.Parameter]], before: dict[str, list[torch.Tensor]]
                          ) -> dict[str, torch.Tensor]:
    """RMS of (weights now - before) and of the weights, per kind and over all; consumes `before`."""
    row, totals = {}, []
    for kind, params in kinds.items():
        group, weights = shard_group(params), local([p.detach() for p in params])
        torch._foreach_sub_(before[kind], weights)  # in place: the update, negated
        update_sq, weight_sq = squared_norm(before[kind], group), squared_norm(weights, group)
        count = sum(p.numel() for p in params)
        row[f"update_rms/{kind}"] = (update_sq / count).sqrt()
        row[f"weight_rms/{kind}"] = (weight_sq / count).sqrt()
        totals.append((update_sq, weight_sq, count))
    count = sum(c for _, _, c in totals)
    row["update_rms"] = (sum(u for u, _, _ in totals) / count).sqrt()
    row["weight_rms"] = (sum(w for _, w, _ in totals) / count).sqrt()
    return row


def variance_reduction_stats(tensors_by_coefficient: dict[float, tuple[list[torch.Tensor], list[torch.Tensor]]]
                             ) -> dict[str, torch.Tensor]:
    """For the gradients g a MARS-type step is about to use and their g_prev, grouped by the
    correction coefficient k (c = g + k (g - g_prev)): the fraction of tensors with ||c|| > 1, and
    ||g - g_prev|| / ||g|| and cos(g, g_prev) over all of them ({} when none has a g_prev yet)."""
    clipped, tensors, change_sq, sum_sq, grad_sq, last_sq = [], 0, 0.0, 0.0, 0.0, 0.0
    for k, (grads, last_grads) in tensors_by_coefficient.items():
        group, grads, last_grads = shard_group(grads), local(grads), local(last_grads)
        difference = torch._foreach_sub(grads, last_grads)  # g - g_prev
        change_sq = change_sq + squared_norm(difference, group)
        torch._foreach_mul_(difference, k)
        torch._foreach_add_(difference, grads)  # now c = g + k (g - g_prev)
        clipped.append((squared_norms(difference, group) > 1.0).sum())
        del difference
        sum_sq = sum_sq + squared_norm(torch._foreach_add(grads, last_grads), group)
        grad_sq, last_sq = grad_sq + squared_norm(grads, group), last_sq + squared_norm(last_grads, group)
        tensors += len(grads)
    if not tensors:
        return {}
    # g . g_prev = (||g + g_prev||^2 - ||g - g_prev||^2) / 4, in float64
    cos = (sum_sq - change_sq) / 4 / (grad_sq * last_sq).sqrt().clamp_min(1e-30)
    return {"mars/clipped_fraction": torch.stack(clipped).sum().double() / tensors,
            "mars/grad_change": (change_sq / grad_sq).sqrt(), "mars/grad_cos": cos}


def squared_norm(tensors: list[torch.Tensor], group: dist.ProcessGroup | None) -> torch.Tensor:
    """sum of squares of all the tensors (whole tensors from their blocks over group when sharded:
    optim/sharding.py), in float64."""
    return squared_norms(tensors, group).double().sum()
