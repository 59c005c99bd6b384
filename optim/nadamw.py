"""
NAdamW: Nesterov-accelerated Adam (Dozat, 2016) with decoupled weight decay (Loshchilov & Hutter,
2019), as torch implements it: torch.optim.NAdam(decoupled_weight_decay=True), foreach. With
momentum decay psi = momentum_decay and mu_t = beta1 * (1 - 0.5 * 0.96^(t * psi)), each step:

    p = p * (1 - lr * weight_decay)
    m = beta1 m + (1 - beta1) g;  v = beta2 v + (1 - beta2) g^2
    p = p - lr * (mu_{t+1} m / (1 - prod_{i<=t+1} mu_i) + (1 - mu_t) g / (1 - prod_{i<=t} mu_i))
          / (sqrt(v / (1 - beta2^t)) + eps)
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn as nn

from optim.adamw import decay_routing
from optim.contract import Hyperparameters, Loop, beta, setting
from optim.routing import weight_decay_groups


@dataclass
class NAdamWHyperparameters(Hyperparameters):
    weight_decay: float = setting(0.1, 0.0)
    beta1: float = beta(0.9)  # torch's defaults: betas 0.9/0.999, momentum decay 0.004
    beta2: float = beta(0.999)
    eps: float = setting(1e-8, 0.0)
    momentum_decay: float = setting(4e-3, 0.0)
    decay_embeddings: bool = True  # as AdamW's: False leaves the embeddings and the tied head undecayed

    state_keys = ("decay_embeddings",)

    def display_name(self) -> str:
        return "NAdamW"


class NAdamW(torch.optim.NAdam):
    """torch's NAdam, whose running product of the momentum coefficients stays on the host after a
    resume: load_state_dict moves every state tensor but `step` to the parameter's device, and torch's
    foreach NAdam then reads mu_product back with .item(), two host syncs per parameter per step."""

    def load_state_dict(self, state_dict: dict) -> None:
        super().load_state_dict(state_dict)
        if self.defaults["capturable"]:
            return
        params = [p for group in self.param_groups for p in group["params"]]
        for index, saved in state_dict["state"].items():  # (a checkpoint's, loaded on the CPU)
            if "mu_product" in saved:
                self.state[params[index]]["mu_product"] = saved["mu_product"].to("cpu", copy=True)


def build_nadamw(model: nn.Module, hp: NAdamWHyperparameters, loop: Loop) -> NAdamW:
    groups = weight_decay_groups(model, decay_routing("nadamw", hp.decay_embeddings), hp.weight_decay)
    return NAdamW(groups, lr=loop.learning_rate, betas=(hp.beta1, hp.beta2), eps=hp.eps,
                  momentum_decay=hp.momentum_decay, decoupled_weight_decay=True, foreach=True)
