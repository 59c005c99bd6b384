"""
The optimizer registry: every optimizer the training loop can build, in one table.

Each entry names an optimizer (the config key `optimizer`), its hyperparameters (the settings it
reads, their types, ranges and defaults, declared in its module: optim/contract.py) and its builder,
and its recipes for the CPU mini reproduction. Config validation (load_config), resume checks,
scripts/report.py, the sweep tool and the benchmarks read this table; adding an optimizer is one
file in optim/ plus one entry here. What the training loop may ask of an optimizer is the contract
in optim/contract.py; train.py never branches on an optimizer's name.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn as nn

import config
from optim.adamw import AdamWHyperparameters, build_adamw
from optim.contract import Builder, Hyperparameters, Loop
from optim.mars import MARS, MARSHyperparameters, build_mars
from optim.mars_m import MARSM, MARSMHyperparameters, build_mars_m
from optim.moonlight import Moonlight, MoonlightHyperparameters, build_moonlight
from optim.muon import Muon, MuonHyperparameters, build_muon

__all__ = ["MARS", "MARSM", "Moonlight", "Muon", "OPTIMIZERS", "OptimizerSpec", "build_optimizer", "load_config"]


@dataclass(frozen=True)
class OptimizerSpec:
    name: str  # the value of the config key `optimizer`
    hyperparameters: type[Hyperparameters]
    build: Builder
    mini_recipes: dict[str, str] = field(default_factory=dict)  # name -> arguments after config/mini.py


OPTIMIZERS: dict[str, OptimizerSpec] = {
    spec.name: spec
    for spec in (
        OptimizerSpec("adamw", AdamWHyperparameters, build_adamw, {"adamw": "config/mini_adamw.py"}),
        # MARS-exact first: it is the longest, so parallel runs finish together.
        OptimizerSpec("mars", MARSHyperparameters, build_mars,
                      {"mars_exact": "config/mini_mars.py --is_approx=False",
                       "mars_approx": "config/mini_mars.py --is_approx=True"}),
        OptimizerSpec("muon", MuonHyperparameters, build_muon, {"muon": "config/mini_muon.py"}),
        OptimizerSpec("mars-m", MARSMHyperparameters, build_mars_m, {"mars_m": "config/mini_mars_m.py"}),
        OptimizerSpec("moonlight", MoonlightHyperparameters, build_moonlight, {"moonlight": "config/mini_moonlight.py"}),
    )
}
HYPERPARAMETERS = {name: spec.hyperparameters for name, spec in OPTIMIZERS.items()}


def load_config(argv: list[str], base: dict[str, Any] | None = None) -> config.TrainConfig:
    """config.load_config with the registry's hyperparameters: [config_file.py] [--key=value ...]."""
    return config.load_config(argv, HYPERPARAMETERS, base)


def build_optimizer(model: nn.Module, cfg: config.TrainConfig, device_type: str) -> torch.optim.Optimizer:
    """The optimizer named by cfg.optimizer, each param group's base_lr set to its initial lr."""
    loop = Loop(learning_rate=cfg.learning_rate, compiled=cfg.compile, device_type=device_type)
    optimizer = OPTIMIZERS[cfg.optimizer].build(model, cfg.hyperparameters, loop)
    for group in optimizer.param_groups:
        group["base_lr"] = group["lr"]
    return optimizer


def hyperparameters_of(cfg: dict) -> Hyperparameters:
    """The optimizer settings of a run, from its config.json's config (a recorded config may hold keys
    other optimizers read: older runs recorded every optimizer's)."""
    schema = HYPERPARAMETERS[cfg["optimizer"]]
    return schema(**{f: cfg[f] for f in schema.__dataclass_fields__ if f in cfg})


def display_name(cfg: dict) -> str:
    """How reports name a run, from its config.json's config."""
    return hyperparameters_of(cfg).display_name()


def gradients_per_step(cfg: dict) -> int:
    """Forward-backward passes over the batch per step of a run, from its config.json's config."""
    return hyperparameters_of(cfg).gradients_per_step()


def mini_recipes() -> dict[str, str]:
    """Every optimizer's CPU mini-reproduction recipes: name -> arguments after config/mini.py."""
    return {name: args for spec in OPTIMIZERS.values() for name, args in spec.mini_recipes.items()}
