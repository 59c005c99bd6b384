"""
The optimizer registry: every optimizer the training loop can build, in one table.

Each entry names an optimizer (the config key `optimizer`), its hyperparameters (the settings it
reads, their types, ranges and defaults, declared in its module: optim/contract.py) and its builder,
and its recipes for the CPU mini reproduction. Config validation (load_config), resume checks,
experiments/report.py, the sweep tool and the benchmarks read this table; adding an optimizer is one
file in optim/ plus one entry here. What the training loop may ask of an optimizer is the contract
in optim/contract.py; train.py never branches on an optimizer's name.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn as nn

import config
from optim.ademamix import AdEMAMixHyperparameters, build_ademamix
from optim.adam_mini import AdamMiniHyperparameters, build_adam_mini
from optim.adamw import AdamWHyperparameters, build_adamw
from optim.adopt import ADOPTHyperparameters, build_adopt
from optim.cautious_adamw import CautiousAdamWHyperparameters, build_cautious_adamw
from optim.contract import Builder, Hyperparameters, Loop
from optim.kron import KronHyperparameters, build_kron
from optim.lion import LionHyperparameters, build_lion
from optim.mars import MARS, MARSHyperparameters, build_mars
from optim.mars_m import MARSM, MARSMHyperparameters, build_mars_m
from optim.moonlight import Moonlight, MoonlightHyperparameters, build_moonlight
from optim.muon import Muon, MuonHyperparameters, build_muon
from optim.nadamw import NAdamWHyperparameters, build_nadamw
from optim.prodigy import ProdigyHyperparameters, build_prodigy
from optim.schedule_free import ScheduleFreeAdamWHyperparameters, build_schedule_free_adamw
from optim.scion import ScionHyperparameters, build_scion
from optim.signum import SignumHyperparameters, build_signum
from optim.soap import SOAPHyperparameters, build_soap
from optim.sophia import SophiaHyperparameters, build_sophia

__all__ = ["MARS", "MARSM", "Moonlight", "Muon", "OPTIMIZERS", "OptimizerSpec", "build_optimizer", "load_config"]


@dataclass(frozen=True)
class MiniRecipe:
    """A run of the CPU mini reproduction: its arguments after config/mini.py, the learning rates
    scripts/mini_sweep.sh tries (its config's rate comes from that sweep, or from scripts/tune_mini.sh for the
    recipes it tuned), and the keys of the optimizer's own
    that experiments/tune.py tunes beside the learning rate and weight decay (its warmup, its second-moment or
    momentum rate, and what its paper says matters most)."""

    args: str
    learning_rates: tuple[float, ...]
    tune: tuple[str, ...] = ()


@dataclass(frozen=True)
class OptimizerSpec:
    name: str  # the value of the config key `optimizer`
    hyperparameters: type[Hyperparameters]
    build: Builder
    mini_recipes: dict[str, MiniRecipe] = field(default_factory=dict)


OPTIMIZERS: dict[str, OptimizerSpec] = {
    spec.name: spec
    for spec in (
        OptimizerSpec("adamw", AdamWHyperparameters, build_adamw,
                      {"adamw": MiniRecipe("config/mini_adamw.py", (1e-3, 2e-3, 4e-3, 8e-3),
                                            ("warmup_iters", "beta1", "beta2"))}),
        # MARS-exact first: it is the longest, so parallel runs finish together (four rates: twice the
        # compute per step).
        OptimizerSpec("mars", MARSHyperparameters, build_mars, {
            "mars_exact": MiniRecipe("config/mini_mars.py config/mini_mars_exact.py", (1.5e-3, 3e-3, 6e-3, 1.2e-2),
                                     ("warmup_iters", "beta2", "gamma")),
            "mars_approx": MiniRecipe("config/mini_mars.py config/mini_mars_approx.py", (1.5e-3, 3e-3, 6e-3, 1.2e-2, 2.4e-2),
                                      ("warmup_iters", "beta2", "gamma")),
        }),
        OptimizerSpec("muon", MuonHyperparameters, build_muon,
                      {"muon": MiniRecipe("config/mini_muon.py", (5e-3, 1e-2, 2e-2, 4e-2, 8e-2),
                                           ("warmup_iters", "muon_momentum"))}),
        OptimizerSpec("mars-m", MARSMHyperparameters, build_mars_m,
                      {"mars_m": MiniRecipe("config/mini_mars_m.py", (3e-3, 6e-3, 1.2e-2, 2.4e-2, 4.8e-2),
                                             ("warmup_iters", "beta1", "gamma"))}),
        OptimizerSpec("moonlight", MoonlightHyperparameters, build_moonlight,
                      {"moonlight": MiniRecipe("config/mini_moonlight.py", (3e-3, 6e-3, 1.2e-2, 2.4e-2, 4.8e-2),
                                                   ("warmup_iters", "beta1"))}),
        # the baselines of the 2025 optimizer benchmarks (Wen et al.; Semenov et al.)
        OptimizerSpec("lion", LionHyperparameters, build_lion,
                      {"lion": MiniRecipe("config/mini_lion.py", (1e-4, 2e-4, 4e-4, 8e-4, 1.6e-3),
                                           ("warmup_iters", "beta2"))}),
        OptimizerSpec("nadamw", NAdamWHyperparameters, build_nadamw,
                      {"nadamw": MiniRecipe("config/mini_nadamw.py", (1e-3, 2e-3, 4e-3, 8e-3),
                                             ("warmup_iters", "beta2"))}),
        OptimizerSpec("ademamix", AdEMAMixHyperparameters, build_ademamix,
                      {"ademamix": MiniRecipe("config/mini_ademamix.py", (2.5e-4, 5e-4, 1e-3, 2e-3, 4e-3, 8e-3),
                                                 ("warmup_iters", "beta3", "alpha"))}),
        OptimizerSpec("schedule-free-adamw", ScheduleFreeAdamWHyperparameters, build_schedule_free_adamw,
                      {"schedule_free_adamw": MiniRecipe("config/mini_schedule_free_adamw.py",
                                                         (2e-3, 4e-3, 8e-3, 1.6e-2), ("sf_warmup_steps", "beta2"))}),
        OptimizerSpec("adopt", ADOPTHyperparameters, build_adopt,
                      {"adopt": MiniRecipe("config/mini_adopt.py", (1e-3, 2e-3, 4e-3, 8e-3),
                                           ("warmup_iters", "beta2"))}),
        OptimizerSpec("signum", SignumHyperparameters, build_signum,
                      {"signum": MiniRecipe("config/mini_signum.py", (1e-4, 2e-4, 4e-4, 8e-4, 1.6e-3),
                                            ("warmup_iters", "beta1"))}),
        OptimizerSpec("cautious-adamw", CautiousAdamWHyperparameters, build_cautious_adamw,
                      {"cautious_adamw": MiniRecipe("config/mini_cautious_adamw.py", (1e-3, 2e-3, 4e-3, 8e-3),
                                                    ("warmup_iters", "beta1", "beta2"))}),
        # Prodigy's learning_rate multiplies the step size it estimates: 1 is its authors' and the benchmark's.
        OptimizerSpec("prodigy", ProdigyHyperparameters, build_prodigy,
                      {"prodigy": MiniRecipe("config/mini_prodigy.py", (0.125, 0.25, 0.5, 1.0, 2.0),
                                             ("warmup_iters", "prodigy_d_coef"))}),
        OptimizerSpec("sophia", SophiaHyperparameters, build_sophia,
                      {"sophia": MiniRecipe("config/mini_sophia.py", (2.5e-4, 5e-4, 1e-3, 2e-3, 4e-3),
                                            ("warmup_iters", "sophia_rho"))}),
        OptimizerSpec("adam-mini", AdamMiniHyperparameters, build_adam_mini,
                      {"adam_mini": MiniRecipe("config/mini_adam_mini.py", (1e-3, 2e-3, 4e-3, 8e-3),
                                               ("warmup_iters", "beta2"))}),
        # Scion's learning rate is also its weight decay (the constrained update: p <- (1 - lr) p - ...)
        OptimizerSpec("scion", ScionHyperparameters, build_scion,
                      {"scion": MiniRecipe("config/mini_scion.py", (2.5e-4, 5e-4, 1e-3, 2e-3, 4e-3, 8e-3, 1.6e-2),
                                           ("warmup_iters", "scion_momentum"))}),
        OptimizerSpec("kron", KronHyperparameters, build_kron,
                      {"kron": MiniRecipe("config/mini_kron.py",
                                          (1e-3, 2e-3, 4e-3, 8e-3, 1.6e-2, 3.2e-2),
                                          ("warmup_iters", "beta1", "kron_precond_lr"))}),
        OptimizerSpec("soap", SOAPHyperparameters, build_soap,
                      {"soap": MiniRecipe("config/mini_soap.py", (1.5e-3, 3e-3, 6e-3, 1.2e-2, 2.4e-2, 4.8e-2),
                                         ("warmup_iters", "beta2", "precondition_frequency"))}),
    )
}
HYPERPARAMETERS = {name: spec.hyperparameters for name, spec in OPTIMIZERS.items()}


def load_config(argv: list[str], base: dict[str, Any] | None = None) -> config.TrainConfig:
    """config.load_config with the registry's hyperparameters: [config_file.py] [--key=value ...]."""
    return config.load_config(argv, HYPERPARAMETERS, base)


def help_text(argv: list[str]) -> str:
    """train.py --help (config.help_text with the registry's optimizers)."""
    return config.help_text(argv, HYPERPARAMETERS)


def build_optimizer(model: nn.Module, cfg: config.TrainConfig, device_type: str) -> torch.optim.Optimizer:
    """The optimizer named by cfg.optimizer, each param group's base_lr set to its initial lr."""
    loop = Loop(learning_rate=cfg.learning_rate, compiled=cfg.compile, device_type=device_type,
                total_iters=cfg.total_iters(), tokens_per_step=cfg.total_batch_size)
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


def gradients_per_step(cfg: dict) -> float:
    """Forward-backward passes over the batch per step of a run, from its config.json's config."""
    return hyperparameters_of(cfg).gradients_per_step()


def mini_recipes() -> dict[str, MiniRecipe]:
    """Every optimizer's CPU mini-reproduction recipes by name."""
    return {name: recipe for spec in OPTIMIZERS.values() for name, recipe in spec.mini_recipes.items()}
