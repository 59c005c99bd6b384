"""
The optimizer registry: every optimizer the training loop can build, in one table.

Each entry says how the optimizer is built from the training config, which config
keys it reads, which of them shape its state (a resume cannot change those), how
reports name a run of it, and its recipes for the CPU mini reproduction. Config
validation, resume checks, scripts/report.py and the mini scripts read this table;
adding an optimizer is one file in optim/ plus one entry here.

Contract with the training loop (train.py never branches on an optimizer's name):
  - every param group carries "base_lr"; the schedule sets lr = base_lr * multiplier
    (MARS's and Muon's AdamW-handled parameters follow the schedule through it too);
  - an optimizer with `needs_grad_on_next_batch = True` (MARS-exact) gets, before
    each step t, the clipped gradient at the current weights on the batch of step
    t+1 through `stash_grad_for_next_step()` (read from p.grad); step t still uses
    the gradient stashed before step t-1 (zero at the first step);
  - zero_grad() with either set_to_none value is correct for every optimizer here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch
import torch.nn as nn

from optim.adamw import build_adamw
from optim.mars import MARS, MARS_TYPES, build_mars
from optim.mars_m import MARSM, build_mars_m
from optim.moonlight import Moonlight, build_moonlight
from optim.muon import Muon, build_muon

if TYPE_CHECKING:
    from config import TrainConfig

__all__ = ["MARS", "MARSM", "Moonlight", "Muon", "OPTIMIZERS", "OptimizerSpec", "build_optimizer", "display_name"]


@dataclass(frozen=True)
class OptimizerSpec:
    name: str  # the value of the config key `optimizer`
    build: Callable[[nn.Module, TrainConfig, str], torch.optim.Optimizer]  # (model, config, device type)
    config_keys: tuple[str, ...]  # the TrainConfig keys build() reads
    state_keys: tuple[str, ...]  # the subset that shapes the optimizer state: refused on resume
    display_name: Callable[[dict], str]  # a run's name in reports, from its config dict
    mini_recipes: dict[str, str] = field(default_factory=dict)  # name -> arguments after config/mini.py
    # forward-backward passes over the batch per step (2: the exact forms' second gradient)
    gradients_per_step: Callable[[dict], int] = lambda cfg: 1


_MARS_NAMES = {"mars-adamw": "MARS", "mars-lion": "MARS-Lion", "mars-shampoo": "MARS-Shampoo"}
_ADAMW_KEYS = ("learning_rate", "weight_decay", "decay_embeddings", "beta1", "beta2", "eps")
_SIDE_ADAMW_KEYS = ("lr_1d", "beta1_1d", "beta2_1d", "weight_decay_1d")

OPTIMIZERS: dict[str, OptimizerSpec] = {
    spec.name: spec
    for spec in (
        OptimizerSpec(
            "adamw", build_adamw, config_keys=_ADAMW_KEYS, state_keys=(),
            display_name=lambda cfg: "AdamW",
            mini_recipes={"adamw": "config/mini_adamw.py"},
        ),
        OptimizerSpec(
            "mars", build_mars,
            config_keys=(*_ADAMW_KEYS, *_SIDE_ADAMW_KEYS, "mars_type", "gamma", "is_approx", "optimize_1d",
                         "amsgrad", "compile"),
            state_keys=("mars_type", "is_approx", "optimize_1d", "amsgrad"),
            display_name=lambda cfg: f"{_MARS_NAMES[cfg['mars_type']]}-{'approx' if cfg['is_approx'] else 'exact'}",
            # MARS-exact first: it is the longest, so parallel runs finish together.
            mini_recipes={"mars_exact": "config/mini_mars.py --is_approx=False",
                          "mars_approx": "config/mini_mars.py --is_approx=True"},
            gradients_per_step=lambda cfg: 1 if cfg["is_approx"] else 2,
        ),
        OptimizerSpec(
            "muon", build_muon,
            config_keys=("learning_rate", "weight_decay", "eps", "muon_momentum", "muon_nesterov",
                         "muon_embeddings_on_adamw", "muon_adamw", *_SIDE_ADAMW_KEYS, "compile"),
            state_keys=("muon_embeddings_on_adamw",),
            display_name=lambda cfg: "Muon",
            mini_recipes={"muon": "config/mini_muon.py"},
        ),
        OptimizerSpec(
            "mars-m", build_mars_m,
            config_keys=("learning_rate", "weight_decay", "beta1", "beta1_1d", "beta2_1d", "eps", "gamma",
                         "is_approx", "mars_m_efficient", "compile"),
            state_keys=("is_approx", "mars_m_efficient"),
            display_name=lambda cfg: "MARS-M" + ("-efficient" if cfg["mars_m_efficient"] else
                                                 "-approx" if cfg["is_approx"] else "-exact"),
            mini_recipes={"mars_m": "config/mini_mars_m.py"},
            gradients_per_step=lambda cfg: 1 if cfg["is_approx"] else 2,
        ),
        OptimizerSpec(
            "moonlight", build_moonlight,
            config_keys=("learning_rate", "weight_decay", "beta1", "muon_nesterov", "beta1_1d", "beta2_1d", "eps",
                         "compile"),
            state_keys=(),
            display_name=lambda cfg: "Moonlight",
            mini_recipes={"moonlight": "config/mini_moonlight.py"},
        ),
    )
}
VARIANT_CHOICES = {"mars_type": MARS_TYPES}  # config keys whose choices an optimizer defines


def build_optimizer(model: nn.Module, cfg: TrainConfig, device_type: str) -> torch.optim.Optimizer:
    """The optimizer named by cfg.optimizer, each param group's base_lr set to its initial lr."""
    optimizer = OPTIMIZERS[cfg.optimizer].build(model, cfg, device_type)
    for group in optimizer.param_groups:
        group["base_lr"] = group["lr"]
    return optimizer


def display_name(cfg: dict) -> str:
    """How reports name a run, from its config.json's config."""
    return OPTIMIZERS[cfg["optimizer"]].display_name(cfg)


def gradients_per_step(cfg: dict) -> int:
    """Forward-backward passes over the batch per step of a run, from its config.json's config."""
    return OPTIMIZERS[cfg["optimizer"]].gradients_per_step(cfg)


def mini_recipes() -> dict[str, str]:
    """Every optimizer's CPU mini-reproduction recipes: name -> arguments after config/mini.py."""
    return {name: args for spec in OPTIMIZERS.values() for name, args in spec.mini_recipes.items()}
