"""
The optimizer registry: every optimizer the training loop can build, in one table.

Each entry names an optimizer (the config key `optimizer`), its hyperparameters (the settings it
reads, their types, ranges and defaults, declared in its module: optim/contract.py) and its builder
(its recipes for the CPU mini reproduction are config/cells.py's). Config validation (load_config), resume checks,
experiments/report.py, the sweep tool and the benchmarks read this table; adding an optimizer is one
file in optim/ plus one entry here. An optimizer from outside the project is named by its import path,
package.module:Name (optim/external.py), and resolved when a config names it. What the training loop may ask
of an optimizer is the contract in optim/contract.py; train.py never branches on an optimizer's name.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn as nn

import config
from errors import ConfigError
from huggingface import hf_model_args
from optim.ademamix import AdEMAMixHyperparameters, build_ademamix
from optim.averaging import with_weight_averaging
from optim.adamuon import AdaMuonHyperparameters, build_adamuon
from optim.adam_mini import AdamMiniHyperparameters, build_adam_mini
from optim.adamh import AdamHHyperparameters, build_adamh
from optim.adamw import AdamWHyperparameters, build_adamw
from optim.adopt import ADOPTHyperparameters, build_adopt
from optim.cautious_adamw import CautiousAdamWHyperparameters, build_cautious_adamw
from optim.contract import Builder, Hyperparameters, Loop
from optim.routing import HIDDEN, parameter_kinds
from optim.dion import DionHyperparameters, build_dion
from optim.dion2 import Dion2Hyperparameters, NorDion2Hyperparameters, build_dion2
from optim.external import is_import_path, spec_of as external_spec
from optim.kron import KronHyperparameters, build_kron
from optim.lion import LionHyperparameters, build_lion
from optim.mars import MARS, MARSHyperparameters, build_mars
from optim.mars_m import MARSM, MARSMHyperparameters, build_mars_m
from optim.moonlight import Moonlight, MoonlightHyperparameters, build_moonlight
from optim.muon import Muon, MuonHyperparameters, build_muon
from optim.muonclip import MuonClipHyperparameters, build_muonclip
from optim.muonh import MuonHHyperparameters, build_muonh
from optim.nadamw import NAdamWHyperparameters, build_nadamw
from optim.normuon import NorMuonHyperparameters, build_normuon
from optim.prodigy import ProdigyHyperparameters, build_prodigy
from optim.schedule_free import ScheduleFreeAdamWHyperparameters, build_schedule_free_adamw
from optim.scion import ScionHyperparameters, build_scion
from optim.signum import SignumHyperparameters, build_signum
from optim.shampoo import ShampooHyperparameters, build_shampoo
from optim.soap import SOAPHyperparameters, build_soap
from optim.soap_muon import SOAPMuonHyperparameters, build_soap_muon
from optim.sophia import SophiaHyperparameters, build_sophia

__all__ = ["MARS", "MARSM", "Moonlight", "Muon", "OPTIMIZERS", "OptimizerSpec", "build_optimizer", "load_config"]


@dataclass(frozen=True)
class OptimizerSpec:
    name: str  # the value of the config key `optimizer`
    hyperparameters: type[Hyperparameters]
    build: Builder


class Registry(dict):
    """The registry's table. A name written package.module:Name is an optimizer from outside the project
    (optim/external.py): resolved when asked for (a bad path is a ConfigError naming it), never listed, so what
    iterates the registry sees the project's own."""

    def __contains__(self, name: object) -> bool:
        return super().__contains__(name) or (isinstance(name, str) and is_import_path(name) and bool(self[name]))

    def __missing__(self, name: str) -> OptimizerSpec:
        if isinstance(name, str) and is_import_path(name):
            return OptimizerSpec(name, *external_spec(name))
        raise KeyError(name)


class SettingsTable(Mapping):
    """Each optimizer's Hyperparameters class, by name: the registry's view that config.load_config reads."""

    def __getitem__(self, name: str) -> type[Hyperparameters]:
        return OPTIMIZERS[name].hyperparameters

    def __contains__(self, name: object) -> bool:
        return name in OPTIMIZERS

    def __iter__(self) -> Iterator[str]:
        return iter(OPTIMIZERS)

    def __len__(self) -> int:
        return len(OPTIMIZERS)


OPTIMIZERS: Registry = Registry({
    spec.name: spec
    for spec in (
        OptimizerSpec("adamw", AdamWHyperparameters, build_adamw),
        OptimizerSpec("mars", MARSHyperparameters, build_mars),
        OptimizerSpec("muon", MuonHyperparameters, build_muon),
        OptimizerSpec("mars-m", MARSMHyperparameters, build_mars_m),
        OptimizerSpec("moonlight", MoonlightHyperparameters, build_moonlight),
        # the baselines of the 2025 optimizer benchmarks (Wen et al.; Semenov et al.)
        OptimizerSpec("lion", LionHyperparameters, build_lion),
        OptimizerSpec("nadamw", NAdamWHyperparameters, build_nadamw),
        OptimizerSpec("ademamix", AdEMAMixHyperparameters, build_ademamix),
        OptimizerSpec("schedule-free-adamw", ScheduleFreeAdamWHyperparameters, build_schedule_free_adamw),
        OptimizerSpec("adopt", ADOPTHyperparameters, build_adopt),
        OptimizerSpec("signum", SignumHyperparameters, build_signum),
        OptimizerSpec("cautious-adamw", CautiousAdamWHyperparameters, build_cautious_adamw),
        OptimizerSpec("prodigy", ProdigyHyperparameters, build_prodigy),
        OptimizerSpec("sophia", SophiaHyperparameters, build_sophia),
        OptimizerSpec("adam-mini", AdamMiniHyperparameters, build_adam_mini),
        OptimizerSpec("scion", ScionHyperparameters, build_scion),
        OptimizerSpec("kron", KronHyperparameters, build_kron),
        OptimizerSpec("soap", SOAPHyperparameters, build_soap),
        # the optimizers that lead the field in 2026 (NorMuon, AdaMuon, MuonClip, Dion and Dion2, Shampoo, the
        # hyperball optimizers, SOAP-Muon)
        OptimizerSpec("normuon", NorMuonHyperparameters, build_normuon),
        OptimizerSpec("adamuon", AdaMuonHyperparameters, build_adamuon),
        OptimizerSpec("muonclip", MuonClipHyperparameters, build_muonclip),
        OptimizerSpec("dion", DionHyperparameters, build_dion),
        OptimizerSpec("dion2", Dion2Hyperparameters, build_dion2),
        OptimizerSpec("nordion2", NorDion2Hyperparameters, build_dion2),
        OptimizerSpec("shampoo", ShampooHyperparameters, build_shampoo),
        OptimizerSpec("adamh", AdamHHyperparameters, build_adamh),
        OptimizerSpec("muonh", MuonHHyperparameters, build_muonh),
        OptimizerSpec("soap-muon", SOAPMuonHyperparameters, build_soap_muon),
    )
})
HYPERPARAMETERS = SettingsTable()


def load_config(argv: list[str], base: dict[str, Any] | None = None) -> config.TrainConfig:
    """config.load_config with the registry's hyperparameters and the Hugging Face mapping (which reads the model of
    init_from='hf:...'): [config_file.py] [--key=value ...]."""
    return config.load_config(argv, HYPERPARAMETERS, base, hf_model_args)


def help_text(argv: list[str]) -> str:
    """train.py --help (config.help_text with the registry's optimizers)."""
    return config.help_text(argv, HYPERPARAMETERS)


def build_optimizer(model: nn.Module, cfg: config.TrainConfig, device_type: str) -> torch.optim.Optimizer:
    """The optimizer named by cfg.optimizer, each param group's base_lr set to its initial lr (under mup, the
    hidden matrices' scaled by mup_scale_hidden_groups) and its base_weight_decay to its weight_decay."""
    loop = Loop(learning_rate=cfg.learning_rate, compiled=cfg.compile, device_type=device_type,
                total_iters=cfg.total_iters(), tokens_per_step=cfg.total_batch_size)
    optimizer = OPTIMIZERS[cfg.optimizer].build(model, cfg.hyperparameters, loop)
    if cfg.parametrization == "mup":
        mup_scale_hidden_groups(model, optimizer, cfg.hyperparameters.mup_hidden_rule)
    for group in optimizer.param_groups:
        group["base_lr"] = group["lr"]
        if "weight_decay" in group:  # (the schedule's weight_decay_schedule="lr" scales it from here)
            group["base_weight_decay"] = group["weight_decay"]
    if cfg.weight_decay_schedule == "lr" and not any("weight_decay" in g for g in optimizer.param_groups):
        raise ConfigError(f"weight_decay_schedule=lr: {cfg.optimizer}'s param groups have no weight_decay (its "
                          "decay, if any, is its own rule), so the schedule would change nothing; remove the setting")
    if cfg.weight_averaging:
        optimizer = with_weight_averaging(optimizer, cfg.weight_averaging, cfg.ema_decay, cfg.averaging_interval,
                                          cfg.averaging_start)
    return optimizer


def mup_scale_hidden_groups(model: nn.Module, optimizer: torch.optim.Optimizer, rule: str) -> None:
    """mup's per-layer rule on the groups of hidden matrices (routed_params makes them groups of their own), with
    m = n_embd / mup_base_width: the learning rate / m under the "adam" rule, unchanged under "spectral"
    (Hyperparameters.mup_hidden_rule); under both, the per-step decay lr x weight_decay goes as 1 / m (Qiu et al.,
    arXiv 2512.05620: weight decay scaled as 1 / width). The embeddings, the head and the 1-D parameters keep
    theirs (mup's input and output weights and vectors)."""
    m = model.config.width_multiplier()
    hidden = {id(p) for kind in HIDDEN for p in parameter_kinds(model).get(kind, [])}
    for group in optimizer.param_groups:
        ids = {id(p) for p in group["params"]}
        if ids and ids <= hidden:
            if rule == "adam":
                group["lr"] /= m
            elif "weight_decay" in group:
                group["weight_decay"] /= m
        elif ids & hidden:  # (a builder that groups without routed_params)
            raise ValueError(f"a param group mixes hidden matrices with other parameters: mup cannot scale its "
                             f"learning rate; build the groups with optim.routing.routed_params")


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
