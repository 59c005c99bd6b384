"""
Which parameters take which update rule, as data: one routing table per optimizer.

A GPT's parameters are of four kinds: attention and mlp (the blocks' 2-D weights: a Llama's three SwiGLU
matrices are mlp), embeddings (the token and position tables and the lm_head, tied to the token table or,
in an untied Llama, its own matrix: every reference sends the head where it sends the embedding) and 1d
(biases, LayerNorm and RMSNorm weights). An optimizer's routing gives each kind a Route: the update rule it takes, whether
it takes the group's weight decay, and which setting is its peak learning rate (the loop's
learning_rate, or e.g. lr_1d for the AdamW that Muon and MARS run on the 1-D parameters). Every
builder makes its param groups from its routing with routed_params() (weight_decay_groups() for the
usual decay / no-decay groups, use_muon_groups() for the Muon family's split), and the diagnostics report
update sizes by the same kinds.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass

import torch.nn as nn

KINDS = ("attention", "mlp", "embeddings", "1d")
HIDDEN = ("attention", "mlp")  # mup's hidden matrices (their learning rates scale with width: optim.build_optimizer)


@dataclass(frozen=True)
class Route:
    rule: str  # the optimizer's name for the update, e.g. "adamw", "mars", "muon"
    decay: bool  # takes the group's weight decay
    lr: str = "learning_rate"  # the setting that is its peak learning rate (the schedule scales it alike)


def routing(matrices: Route, embeddings: Route, vectors: Route) -> dict[str, Route]:
    """A routing table: the blocks' matrices (attention and mlp), the embeddings, the 1-D parameters."""
    return {"attention": matrices, "mlp": matrices, "embeddings": embeddings, "1d": vectors}


def parameter_kinds(model: nn.Module) -> dict[str, list[nn.Parameter]]:
    """The model's trainable parameters by kind, each in the model's order (empty kinds left out)."""
    embeddings = {id(m.weight) for m in model.modules() if isinstance(m, nn.Embedding)}
    if isinstance(getattr(model, "lm_head", None), nn.Linear):  # (the model's own head, tied or not)
        embeddings.add(id(model.lm_head.weight))
    kinds: dict[str, list[nn.Parameter]] = {kind: [] for kind in KINDS}
    for name, p in model.named_parameters():  # (a tied parameter is named once)
        if p.requires_grad:
            kind = ("embeddings" if id(p) in embeddings else "1d" if p.ndim < 2 else
                    "attention" if ".attn." in name else "mlp")
            kinds[kind].append(p)
    return {kind: params for kind, params in kinds.items() if params}


def routed_params(model: nn.Module, table: dict[str, Route], key: Callable[[Route], Hashable] = lambda route: route
                  ) -> list[tuple[Route, list[nn.Parameter]]]:
    """The parameters of each distinct key(route) (by default the route itself), in the order the
    routes first appear in KINDS' order, with the first route of each and its parameters in the model's
    order: a builder's param groups, one per entry. Under mup the hidden matrices are always a group of their
    own, whose learning rate build_optimizer scales."""
    kind_of = {id(p): kind for kind, params in parameter_kinds(model).items() for p in params}
    mup = getattr(getattr(model, "config", None), "parametrization", "sp") == "mup"

    def group_key(kind: str) -> Hashable:
        return (key(table[kind]), kind in HIDDEN) if mup else key(table[kind])

    routed: dict[Hashable, tuple[Route, list[nn.Parameter]]] = {}
    for kind in KINDS:
        routed.setdefault(group_key(kind), (table[kind], []))
    for p in model.parameters():
        if id(p) in kind_of:
            routed[group_key(kind_of[id(p)])][1].append(p)
    return [(route, params) for route, params in routed.values() if params]


def use_muon_groups(model: nn.Module, table: dict[str, Route], rule: str, learning_rate: float, settings: object
                    ) -> list[dict]:
    """routed_params as param groups of an optimizer that runs `rule` on the groups flagged use_muon and its AdamW
    on the rest (the Muon family's split), each at its route's peak learning rate: learning_rate, or the setting of
    settings that the route names (e.g. lr_1d)."""
    return [dict(params=params, use_muon=route.rule == rule,
                 lr=learning_rate if route.lr == "learning_rate" else getattr(settings, route.lr))
            for route, params in routed_params(model, table)]


def weight_decay_groups(model: nn.Module, table: dict[str, Route], weight_decay: float,
                        key: Callable[[Route], Hashable] = lambda route: route) -> list[dict]:
    """routed_params as param groups whose weight_decay is weight_decay where the route decays, else 0."""
    return [dict(params=params, weight_decay=weight_decay if route.decay else 0.0)
            for route, params in routed_params(model, table, key)]
