"""
Adam-mini (Zhang et al., 2024, "Adam-mini: Use Fewer Learning Rates To Gain More"): AdamW whose second moment
is one number per block of parameters, as its authors implement it (zyushun/Adam-mini, the `adam-mini` package
1.1.1, adam_mini/adam_mini.py) and partition a GPT-2 (its examples/gpt2). For each block b of a parameter p,
with the step count t:

    v_b = beta2 v_b + (1 - beta2) mean over b of g^2
    p = p * (1 - lr * weight_decay);   m = beta1 m + (1 - beta1) g
    p = p - lr / (1 - beta1^t) * m / (sqrt(v_b) / sqrt(1 - beta2^t) + eps)

Its blocks, by what the package's names pick out on its GPT-2 (whose attention has separate q, k, v and o
matrices; ours holds q, k and v in one c_attn): queries and keys one block per head (head_dim rows); values, the
attention's output projection, the MLP's matrices, the token embedding (and the head tied to it, or an untied
head) one block per row, that is per output neuron or per token; the position table and the norms' weights one
block each (its embedding names do not name a position table); biases one block per element (plain AdamW).
Weight decay: every weight but the norms' and the biases, the embeddings included.

Every block here is a run of rows of the parameter's 2-D view (a 1-D parameter is a column), so the whole step
runs on flat buffers: g^2 into one buffer, one segmented sum of its rows, one of those rows' sums into blocks,
and the update (each row's denominator broadcast over it), whatever the number of parameters. Under FSDP a block may straddle ranks (a head's rows, a
norm's elements): each rank sums its rows, one all-reduce of every row's sum (a vector of the model's rows, 1 MB
for GPT-2 small) makes them whole, and every rank keeps every block's v (plain tensors, the same on every rank),
so a block's statistic is the whole block's at any world size.
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
from optim.sharding import local, local_rows, shard_group

Layout = list[tuple[int, int]]  # (rows per block, blocks), in row order, covering the parameter's rows


@dataclass
class AdamMiniHyperparameters(Hyperparameters):
    weight_decay: float = setting(0.1, 0.0)
    beta1: float = beta(0.9)
    beta2: float = beta(0.999)  # the package's default (its GPT-2 example: 0.95)
    eps: float = positive(1e-8)
    decay_embeddings: bool = True  # the package decays the embeddings; False leaves them (and a tied head) alone

    state_keys = ("decay_embeddings",)

    def display_name(self) -> str:
        return "Adam-mini"


def block_layouts(model: nn.Module) -> dict[nn.Parameter, Layout]:
    """Each trainable parameter's blocks, as the authors' package partitions its GPT-2 (module docstring)."""
    head_dim = model.config.n_embd // model.config.n_head
    layouts = {}
    for name, p in model.named_parameters():
        rows = p.shape[0]
        if p.ndim == 1:
            layouts[p] = [(1, rows)] if name.endswith(".bias") else [(rows, 1)]
        elif name.endswith("attn.c_attn.weight"):  # queries and keys per head, values per neuron
            query_key_rows = 2 * p.shape[1]
            layouts[p] = [(head_dim, query_key_rows // head_dim), (1, rows - query_key_rows)]
        elif name.endswith("wpe.weight"):
            layouts[p] = [(rows, 1)]
        else:
            layouts[p] = [(1, rows)]
    return layouts


class AdamMini(GroupState, ListwiseOptimizer):
    group_state_keys = ("step",)

    def __init__(self, params: Iterable, layouts: dict[nn.Parameter, Layout], lr: float = 1e-3,
                 betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8, weight_decay: float = 0.0):
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay))
        self.layouts = layouts
        self.plan: BlockPlan | None = None  # built at the first step, on the parameters' device

    def _state(self, p: torch.Tensor) -> dict:
        state = self.state[p]
        if not state:
            state["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
            blocks = sum(count for _, count in self.layouts[p])
            state["vmean"] = torch.zeros(blocks, dtype=p.dtype, device=p.device)  # whole on every rank
        return state

    def update_groups(self, groups: list[tuple[dict, list[torch.Tensor]]]) -> None:
        params = [p for _, members in groups for p in members]
        if self.plan is None or self.plan.param_ids != [id(p) for p in params]:
            self.plan = BlockPlan(params, self.layouts)
        plan = self.plan
        first = self.param_groups[0]
        (beta1, beta2), eps = first["betas"], first["eps"]
        t = first.get("step", 0) + 1
        states = [self._state(p) for p in params]
        grads = local([p.grad for p in params])
        # each block's mean of g^2: rows' sums of squares (this rank's rows), made whole, summed into blocks
        flat, squares = flat_copy(grads)
        torch._foreach_mul_(squares, squares)
        row_sums = torch.zeros(plan.rows, dtype=flat.dtype, device=flat.device)
        row_sums.index_copy_(0, plan.local_row_positions,
                             torch.segment_reduce(flat, "sum", lengths=plan.local_row_lengths, unsafe=True))
        if (group := shard_group(params)) is not None:
            dist.all_reduce(row_sums, group=group)
        block_means = torch.segment_reduce(row_sums, "sum", lengths=plan.block_rows, unsafe=True) / plan.block_numels
        vmeans = [s["vmean"] for s in states]
        torch._foreach_mul_(vmeans, beta2)
        torch._foreach_add_(vmeans, list(block_means.split(plan.blocks)), alpha=1.0 - beta2)
        del squares, flat
        # each of this rank's rows' denominator, from its block, broadcast over the row's elements
        row_denominators = torch.cat(vmeans)[plan.local_row_blocks].sqrt_().div_(math.sqrt(1 - beta2**t)).add_(eps)
        denominators = {id(p): rows.view(-1, *[1] * (g.ndim - 1))
                        for p, rows, g in zip(params, row_denominators.split(plan.local_rows), grads)}
        for group in self.param_groups:
            group["step"] = t
        for group, members in groups:
            lr, weight_decay = group["lr"], group["weight_decay"]
            exp_avgs = local([self.state[p]["exp_avg"] for p in members])
            if weight_decay:
                torch._foreach_mul_(local(members), 1.0 - lr * weight_decay)
            torch._foreach_lerp_(exp_avgs, local([p.grad for p in members]), 1.0 - beta1)
            torch._foreach_addcdiv_(local(members), exp_avgs, [denominators[id(p)] for p in members],
                                    value=-lr / (1 - beta1**t))


class BlockPlan:
    """Where the step's flat buffers put each parameter's rows and blocks, for this rank's shards: built once
    (index tensors on the parameters' device)."""

    def __init__(self, params: list[torch.Tensor], layouts: dict[nn.Parameter, Layout]):
        device = params[0].device
        self.param_ids = [id(p) for p in params]
        blocks_local = local(params)
        self.local_rows = [b.shape[0] for b in blocks_local]
        self.blocks = [sum(count for _, count in layouts[p]) for p in params]
        row_lengths, row_positions, row_blocks, block_rows, block_numels = [], [], [], [], []
        rows_before = blocks_before = 0
        for p, block in zip(params, blocks_local):
            rows, columns = p.shape[0], (p.shape[1] if p.ndim == 2 else 1)
            block_of_row = []
            for rows_per_block, count in layouts[p]:
                for _ in range(count):
                    block_rows.append(rows_per_block)
                    block_numels.append(rows_per_block * columns)
                    block_of_row += [blocks_before] * rows_per_block
                    blocks_before += 1
            held = range(rows)[local_rows(p)]
            row_lengths += [columns] * len(held)
            row_positions += [rows_before + r for r in held]
            row_blocks += [block_of_row[r] for r in held]
            rows_before += rows
        self.rows = rows_before
        self.local_row_lengths = torch.tensor(row_lengths, dtype=torch.long, device=device)
        self.local_row_positions = torch.tensor(row_positions, dtype=torch.long, device=device)
        self.local_row_blocks = torch.tensor(row_blocks, dtype=torch.long, device=device)
        self.block_rows = torch.tensor(block_rows, dtype=torch.long, device=device)
        self.block_numels = torch.tensor(block_numels, dtype=params[0].dtype, device=device)


def build_adam_mini(model: nn.Module, hp: AdamMiniHyperparameters, loop: Loop) -> AdamMini:
    groups = weight_decay_groups(model, decay_routing("adam-mini", hp.decay_embeddings), hp.weight_decay)
    return AdamMini(groups, block_layouts(model), lr=loop.learning_rate, betas=(hp.beta1, hp.beta2), eps=hp.eps)
