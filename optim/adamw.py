"""AdamW: torch's fused implementation, the paper's baseline; and the settings of the AdamW that MARS and
Muon run on their other (1-D) parameters."""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn as nn

from optim.contract import Hyperparameters, Loop, beta, positive, setting
from optim.routing import Route, routing, weight_decay_groups


@dataclass
class AdamWHyperparameters(Hyperparameters):
    weight_decay: float = setting(0.1, 0.0)
    beta1: float = beta(0.9)
    beta2: float = beta(0.95)
    eps: float = setting(1e-8, 0.0)
    # Which 2-D parameters take weight_decay: True, every one (nanoGPT's rule); False, the blocks' matrices
    # only, as the official MARS code (no decay for the embeddings and the tied head).
    decay_embeddings: bool = True

    state_keys = ("decay_embeddings",)  # it moves the embeddings between param groups

    def display_name(self) -> str:
        return "AdamW"


@dataclass
class SideAdamW(Hyperparameters):
    """The AdamW on the parameters a matrix optimizer leaves alone (MARS's and Muon's 1-D parameters)."""

    lr_1d: float = positive(3e-3)
    beta1_1d: float = beta(0.9)
    beta2_1d: float = beta(0.95)
    weight_decay_1d: float = setting(0.1, 0.0)


def decay_routing(rule: str, decay_embeddings: bool) -> dict[str, Route]:
    """Every parameter on one rule; the matrices decay, the embeddings with decay_embeddings, 1-D never."""
    return routing(Route(rule, True), Route(rule, decay_embeddings), Route(rule, False))


def build_adamw(model: nn.Module, hp: AdamWHyperparameters, loop: Loop) -> torch.optim.AdamW:
    groups = weight_decay_groups(model, decay_routing("adamw", hp.decay_embeddings), hp.weight_decay)
    return torch.optim.AdamW(groups, lr=loop.learning_rate, betas=(hp.beta1, hp.beta2), eps=hp.eps,
                             fused=loop.device_type in ("cuda", "cpu"))
