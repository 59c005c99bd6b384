"""
AdamH (Wen, Dang, Lyu, Ma, Liang, "Fantastic Pretraining Optimizers and Where to Find Them 2.1: Hyperball
Optimization"): Adam's direction taken on the hyperball, the sphere of each hidden matrix's initial Frobenius
norm, instead of weight decay. For a hidden matrix W with gradient g, its radius R = ||W_0||_F (kept in the
optimizer state, measured at its first step) and the loop's learning rate lr:

    g = g - (<W, g> / max(||W||^2, 1e-10)) W      (only with tangent_projection: marin's option, off by default)
    m = beta1 m + (1 - beta1) g;  v = beta2 v + (1 - beta2) g^2;  t = t + 1
    u = (m / (1 - beta1^t)) / (sqrt(v / (1 - beta2^t)) + eps)                     (Adam's update, no lr)
    W' = W - lr * R * u / max(||u||_F, 1e-10)                                    (a step of lr * R)
    W = R * W' / ||W'||_F                                                         (back onto the sphere)

so ||W||_F = R at every step and no weight decay is needed. The rest (the embeddings, the 1-D parameters:
biases, LayerNorm weights) take Adam at its own peak rate adam_lr, without weight decay by default
(adam_weight_decay: decoupled, as torch's AdamW).

Source: marin-community/marin, lib/levanter/src/levanter/optim/adamh.py at
7cb2d65fdad8e407a964a9d267e8172a955d8520 (scale_by_adamh and AdamHConfig.create_mask), the parity target
(tests/test_optim_hyperball.py); the authors' PyTorch AdamH is modded-nanogpt's optimization track,
records/track_3_optimization/results/20260430_adamh (the script logged in 7533dd87-....txt) at f411b3d.
docs/optimizers.md lists where the two differ and which of the differences are settings here.

Routing (optim/routing.py's kinds): the blocks' matrices (attention, mlp) take AdamH; the token and position
embeddings and the 1-D parameters take Adam (marin: "Embedding" and everything not a Linear weight); an untied
head (a Llama's lm_head, a Linear) takes AdamH, or Adam with hyperball_head=False (modded-nanogpt's AdamW
group for its head). GPT-2's tied embedding/head matrix takes Adam, the embedding's rule, by default: marin's
mask asks "Embedding" before "lm_head", so a matrix that is both is an embedding there;
hyperball_tied_embedding=True puts it on AdamH as a head.

The radius is per matrix, of the whole matrix: under FSDP2 the squared norms of each rank's row blocks are
summed over the shard group (optim/sharding.squared_norms), all matrices in one all-reduce. A step takes two
such reductions (||u|| with, for hyperball_radius="current", ||W||; then ||W'||), each batched over every
matrix of the group; the element-wise part is torch._foreach_* on the local blocks. hyperball_radius="current"
takes R = ||W||_F at every step as the authors' code does (equal in exact arithmetic; rounding then drifts R
slowly); "initial" keeps the radius measured at the first step in the state, where a resume finds it.
"""

from __future__ import annotations

import math

from collections.abc import Iterable
from dataclasses import dataclass
from typing import ClassVar

import torch
import torch.distributed as dist
import torch.nn as nn

from optim.contract import GroupState, Hyperparameters, Loop, beta, positive, setting
from optim.routing import Route, parameter_kinds, routed_params, routing
from optim.rules import GroupwiseOptimizer, adam_moments_, moment_buffers
from optim.sharding import local, shard_group, squared_norms

Tensors = list[torch.Tensor]
HYPERBALL_EPS = 1e-10  # the authors' floor on ||u||, and modded-nanogpt's on ||W'|| (a zero matrix stays zero)
RADII = ("initial", "current")


@dataclass
class AdamHHyperparameters(Hyperparameters):
    mup_hidden_rule: ClassVar[str] = "spectral"  # (contract.Hyperparameters)
    beta1: float = beta(0.9)  # AdamH's betas and eps (marin's Adam shares them; here the Adam side's are adam_*)
    beta2: float = beta(0.95)
    eps: float = setting(1e-8, 0.0)
    adam_lr: float = positive(6e-4)  # the Adam rule's peak learning rate (marin's adam_lr)
    adam_beta1: float = beta(0.9)
    adam_beta2: float = beta(0.95)
    adam_eps: float = setting(1e-8, 0.0)
    adam_weight_decay: float = setting(0.0, 0.0)  # marin's Adam has none
    hyperball_head: bool = True  # an untied head on the hyperball (marin) or on Adam (modded-nanogpt)
    hyperball_tied_embedding: bool = False  # the tied embedding/head on Adam (the embedding's rule) or the hyperball
    hyperball_radius: str = setting("initial", choices=RADII)  # R: ||W_0|| kept in the state, or ||W|| each step
    tangent_projection: bool = False  # the hyperball rules' g minus its projection on W first (marin's, off there)

    state_keys = ("hyperball_head", "hyperball_tied_embedding")  # they move a matrix between the rules

    def display_name(self) -> str:
        return "AdamH"


def hyperball_step_(params: Tensors, updates: Tensors, lr: float, radii: torch.Tensor,
                    group: torch.distributed.ProcessGroup | None, current: bool) -> None:
    """W <- R (W - lr R u / max(||u||, 1e-10)) / ||W - lr R u / max(||u||, 1e-10)|| for each matrix (local blocks of
    the group's shards, or whole), in place; overwrites updates. radii: each matrix's R (1-D, float64), replaced by
    ||W|| where current. Two reductions over the shard group, each one all-reduce for every matrix."""
    params, n = local(params), len(params)
    norms = squared_norms([*updates, *params] if current else list(updates), group).sqrt_()
    if current:
        norms, radii = norms[:n], norms[n:]
    dtype = params[0].dtype
    torch._foreach_mul_(updates, list((radii * -lr / norms.clamp_min_(HYPERBALL_EPS)).to(dtype).unbind()))
    torch._foreach_add_(params, updates)
    torch._foreach_mul_(params, list((radii / squared_norms(params, group).sqrt_().clamp_min_(HYPERBALL_EPS))
                                     .to(dtype).unbind()))


def tangent_coefficients(params: Tensors, grads: Tensors, group: dist.ProcessGroup | None) -> torch.Tensor:
    """<W, g> / max(||W||^2, 1e-10) of each matrix (1-D, float64), from local blocks (summed over the shard group
    in one all-reduce): g - c W is marin's tangent_projection, g minus its projection on W."""
    dots = torch.stack([t.sum(dtype=torch.float64) for t in torch._foreach_mul(params, grads)])
    sums = torch.cat([dots, torch.stack(torch._foreach_norm(params, 2, dtype=torch.float64)).square()])
    if group is not None:
        dist.all_reduce(sums, group=group)
    dots, squares = sums.tensor_split(2)
    return dots / squares.clamp_min(HYPERBALL_EPS)


def subtract_multiples_(tensors: Tensors, params: Tensors, coefficients: torch.Tensor) -> None:
    """t <- t - c W for each local block, in place."""
    torch._foreach_add_(tensors, torch._foreach_mul(params, list((-coefficients).to(params[0].dtype).unbind())))


class Hyperball(GroupState, GroupwiseOptimizer):
    """The hyperball optimizers' common part: param groups that each name their rule, "adam" (torch's AdamW
    arithmetic, decoupled weight decay) or a hyperball rule of a subclass ("adamh" here), the radii in the state.
    Each group counts its steps (a Python int: the bias corrections are exact floats, with no host sync).
    tangent_projection: the hyperball rules take g - (<W, g> / max(||W||^2, 1e-10)) W for g (marin's option)."""

    rules: tuple[str, ...] = ("adam", "adamh")
    group_state_keys = ("step",)

    def __init__(self, params: Iterable, defaults: dict, radius: str = "initial", tangent_projection: bool = False):
        if radius not in RADII:
            raise ValueError(f"radius {radius!r}: choose one of {', '.join(RADII)}")
        self.radius, self.tangent_projection = radius, tangent_projection
        super().__init__(params, defaults)

    def add_param_group(self, param_group: dict) -> None:
        if param_group.get("rule") not in self.rules:
            raise ValueError(f"each param group must say its rule: one of {', '.join(self.rules)}")
        if param_group["rule"] != "adam" and any(p.ndim != 2 for p in param_group["params"]):
            raise ValueError("the hyperball rules take 2-D matrices only; put other parameters in a rule='adam' group")
        super().add_param_group(param_group)

    def update_group(self, group: dict, params: Tensors) -> None:
        if group["rule"] == "adam":
            updates = self.adam_updates(group, params)  # p <- p (1 - lr wd) - lr u
            torch._foreach_mul_(local(params), 1.0 - group["lr"] * group["weight_decay"])
            torch._foreach_add_(local(params), updates, alpha=-group["lr"])
        else:
            self.hyperball_update(group, params)

    def adam_updates(self, group: dict, params: Tensors, grads: Tensors | None = None) -> Tensors:
        """Adam's u = (m / (1 - beta1^t)) / (sqrt(v / (1 - beta2^t)) + eps) of each parameter (its local block),
        after folding the gradient (or grads: local blocks) into m and v."""
        group["step"] = t = group.get("step", 0) + 1
        beta1, beta2 = group["betas"]
        states = [moment_buffers(self.state[p], p) for p in params]
        exp_avgs, exp_avg_sqs = local([s["exp_avg"] for s in states]), local([s["exp_avg_sq"] for s in states])
        adam_moments_(exp_avgs, exp_avg_sqs, grads or local([p.grad for p in params]), beta1, beta2)
        updates = torch._foreach_sqrt(exp_avg_sqs)
        torch._foreach_div_(updates, math.sqrt(1.0 - beta2**t))
        torch._foreach_add_(updates, group["eps"])
        torch._foreach_reciprocal_(updates)
        torch._foreach_mul_(updates, exp_avgs)
        torch._foreach_div_(updates, 1.0 - beta1**t)
        return updates

    def hyperball_update(self, group: dict, params: Tensors) -> None:
        """AdamH: Adam's update u (of the tangent gradients, with tangent_projection), then the hyperball step."""
        grads = None
        if self.tangent_projection:
            blocks, grads = local(params), local([p.grad for p in params])
            grads = [g.clone() for g in grads]
            subtract_multiples_(grads, blocks, tangent_coefficients(blocks, grads, shard_group(params)))
        self.hyperball_(params, self.adam_updates(group, params, grads), group["lr"])

    def hyperball_(self, params: Tensors, updates: Tensors, lr: float) -> None:
        """The hyperball step of params along updates (local blocks), each matrix's radius measured at its first
        step (one reduction for all of a group's new matrices) and kept in the state."""
        group = shard_group(params)
        new = [p for p in params if "radius" not in self.state[p]]
        if new:
            for p, radius in zip(new, squared_norms(new, group).sqrt_().to(new[0].dtype).unbind()):
                self.state[p]["radius"] = radius
        radii = torch.stack([self.state[p]["radius"] for p in params]).double()
        hyperball_step_(params, updates, lr, radii, group, current=self.radius == "current")


class AdamH(Hyperball):
    def __init__(self, params: Iterable, lr: float = 0.02, betas: tuple[float, float] = (0.9, 0.95), eps: float = 1e-8,
                 adam_lr: float = 6e-4, adam_betas: tuple[float, float] = (0.9, 0.95), adam_eps: float = 1e-8,
                 adam_weight_decay: float = 0.0, radius: str = "initial", tangent_projection: bool = False):
        """params: groups that each say rule="adamh" (2-D matrices) or "adam"; a group's missing settings come from
        the arguments of its rule (lr, betas, eps for AdamH; adam_* for Adam)."""
        self.rule_defaults = dict(adamh=dict(lr=lr, betas=betas, eps=eps),
                                  adam=dict(lr=adam_lr, betas=adam_betas, eps=adam_eps, weight_decay=adam_weight_decay))
        super().__init__(params, {}, radius, tangent_projection)

    def add_param_group(self, param_group: dict) -> None:
        for key, value in self.rule_defaults.get(param_group.get("rule"), {}).items():
            param_group.setdefault(key, value)
        super().add_param_group(param_group)


def hyperball_routes(model: nn.Module, hp: AdamHHyperparameters, matrix_rule: str) -> list[tuple[str, list]]:
    """The rule of each parameter: the blocks' matrices on matrix_rule, the head on AdamH (hyperball_head; tied to
    the embedding, hyperball_tied_embedding), the rest (embeddings, 1-D) on Adam; (rule, params) in that order."""
    adam = Route("adam", True, lr="adam_lr")  # (adam_weight_decay, where set, on every Adam parameter)
    table = routing(Route(matrix_rule, False), adam, adam)
    head = getattr(model, "lm_head", None)
    head = head.weight if isinstance(head, nn.Linear) else None
    tied = head is not None and any(m.weight is head for m in model.modules() if isinstance(m, nn.Embedding))
    on_hyperball = hp.hyperball_tied_embedding if tied else hp.hyperball_head
    heads = [p for p in parameter_kinds(model).get("embeddings", []) if p is head and on_hyperball]
    routes = [(route.rule, [p for p in params if all(p is not h for h in heads)])
              for route, params in routed_params(model, table)]
    if heads and matrix_rule == "adamh":
        routes[0][1].extend(heads)
    elif heads:
        routes.insert(1, ("adamh", heads))
    return [(rule, params) for rule, params in routes if params]


def build_adamh(model: nn.Module, hp: AdamHHyperparameters, loop: Loop) -> AdamH:
    return AdamH([dict(params=params, rule=rule) for rule, params in hyperball_routes(model, hp, "adamh")],
                 lr=loop.learning_rate, betas=(hp.beta1, hp.beta2), eps=hp.eps, adam_lr=hp.adam_lr,
                 adam_betas=(hp.adam_beta1, hp.adam_beta2), adam_eps=hp.adam_eps,
                 adam_weight_decay=hp.adam_weight_decay, radius=hp.hyperball_radius,
                 tangent_projection=hp.tangent_projection)
