"""
An optimizer from outside the project, by its import path: `--optimizer=package.module:Name`.

Name is either
  - a torch.optim.Optimizer subclass: each keyword argument of its constructor that has a default (but lr, the
    loop's learning_rate) becomes a config key of that name, typed by its default (a tuple is written
    --ns_coefficients="(3.4, -4.7, 2.0)"; a None default takes any value), checked when the config loads; or
  - a builder following the contract (optim.contract.Builder: build(model, hyperparameters, loop)), with an
    attribute `hyperparameters` naming its Hyperparameters dataclass, as the registry's own entries are.

A class gets the parameters the routing gives it (optim/routing.py), as the registry's optimizers do:
external_params="all", every parameter (weight decay on the blocks' matrices only, the official MARS groups);
"matrices", the blocks' 2-D matrices, the embeddings and 1-D parameters on the side AdamW (lr_1d, beta1_1d,
beta2_1d, weight_decay_1d), as Muon's recipes split them, for a class that takes only matrices (torch.optim.Muon).
The two then step as one optimizer (Combined): one state and one list of param groups, which checkpoints, resumes
and FSDP2's sharded state dicts read as any optimizer's.

    python train.py config/mini.py --optimizer=torch.optim:Muon --external_params=matrices --learning_rate=0.02
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import inspect
from collections.abc import Callable
from typing import Any

import torch
import torch.nn as nn

from config import TrainConfig, settable_keys
from errors import ConfigError
from optim.adamw import SideAdamW
from optim.contract import Hyperparameters, Loop, setting
from optim.routing import HIDDEN, parameter_kinds


def is_import_path(name: str) -> bool:
    """Whether an optimizer name is an import path (package.module:Name) rather than a registry name."""
    return ":" in name


@dataclasses.dataclass
class ExternalSettings(SideAdamW):
    """What every external optimizer reads besides its own keyword arguments."""

    external_params: str = setting("all", choices=("all", "matrices"))  # which parameters the class takes

    state_keys = ("external_params",)  # it moves parameters between the class and the side AdamW

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):  # (a tuple default read back from a run's config.json is a list)
            if isinstance(f.default, tuple) and isinstance(getattr(self, f.name), list):
                setattr(self, f.name, tuple(getattr(self, f.name)))
        super().__post_init__()


class Combined(torch.optim.Optimizer):
    """Optimizers over disjoint parameters stepping as one: one param_groups list (each inner optimizer's own group
    dicts) and one state dict, which every inner optimizer shares, so a state_dict, a resume and the loop's
    schedule (each group's lr) see one optimizer."""

    def __init__(self, inner: list[torch.optim.Optimizer]):
        self.inner = inner
        super().__init__([group for optimizer in inner for group in optimizer.param_groups], {})
        self._share()

    def _share(self) -> None:
        """Each inner optimizer's groups are this one's, and its state is this one's (new objects after a load)."""
        start = 0
        for optimizer in self.inner:
            optimizer.param_groups = self.param_groups[start:start + len(optimizer.param_groups)]
            optimizer.state = self.state
            start += len(optimizer.param_groups)

    def load_state_dict(self, state_dict: dict) -> None:
        super().load_state_dict(state_dict)
        self._share()

    @torch.no_grad()
    def step(self, closure: Callable | None = None) -> None:
        if closure is not None:
            raise ValueError("an external optimizer's step takes no closure here")
        for optimizer in self.inner:
            optimizer.step()


def keyword_settings(cls: type) -> list[tuple[str, Any, Any]]:
    """(name, type, field) for each constructor keyword argument with a default, but params and lr."""
    fields = []
    loop_keys = set(settable_keys(TrainConfig)) | {f.name for f in dataclasses.fields(ExternalSettings)}
    for name, parameter in inspect.signature(cls.__init__).parameters.items():
        if name in ("self", "params", "lr") or parameter.default is inspect.Parameter.empty or \
                parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
            continue
        if name in loop_keys:
            raise ConfigError(f"{cls.__module__}.{cls.__name__}'s keyword argument {name!r} has the name of a "
                              f"setting of the loop or of the side AdamW; wrap the class in a builder that renames it")
        default = parameter.default
        kind = Any if default is None else type(default)
        value = dataclasses.field(default_factory=lambda d=default: d) if isinstance(default, (list, dict)) else \
            dataclasses.field(default=default)
        fields.append((name, kind, value))
    return fields


def class_builder(cls: type[torch.optim.Optimizer], own: list[str]) -> Callable:
    """The contract's builder for an Optimizer class: groups by the routing, the class over its share."""

    def build(model: nn.Module, hp: Hyperparameters, loop: Loop) -> torch.optim.Optimizer:
        kwargs = {name: getattr(hp, name) for name in own}
        decay = kwargs.get("weight_decay", 0.0)
        kinds = parameter_kinds(model)
        hidden = [p for kind in HIDDEN for p in kinds.get(kind, [])]
        rest = [p for kind in ("embeddings", "1d") for p in kinds.get(kind, [])]
        if hp.external_params == "all":  # (the official decay groups: the blocks' matrices decay, nothing else)
            groups = [dict(params=hidden, weight_decay=decay), dict(params=rest, weight_decay=0.0)]
            return cls([g for g in groups if g["params"]], lr=loop.learning_rate, **kwargs)
        side = torch.optim.AdamW(rest, lr=hp.lr_1d, betas=(hp.beta1_1d, hp.beta2_1d),
                                 weight_decay=hp.weight_decay_1d)
        return Combined([cls([dict(params=hidden)], lr=loop.learning_rate, **kwargs), side])

    return build


@functools.cache
def spec_of(path: str) -> tuple[type[Hyperparameters], Callable]:
    """The Hyperparameters class and builder of package.module:Name, or a ConfigError naming what is wrong."""
    module_name, _, attribute = path.partition(":")
    if not module_name or not attribute:
        raise ConfigError(f"optimizer {path!r}: an optimizer from outside the project is named package.module:Name "
                          "(e.g. torch.optim:Muon)")
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        raise ConfigError(f"optimizer {path!r}: cannot import {module_name} ({e}); install it, or put its folder on "
                          "PYTHONPATH") from None
    target = module
    for part in attribute.split("."):
        if not hasattr(target, part):
            raise ConfigError(f"optimizer {path!r}: {module_name} has no {attribute!r}")
        target = getattr(target, part)
    if inspect.isclass(target) and issubclass(target, torch.optim.Optimizer):
        own = keyword_settings(target)
        schema = dataclasses.make_dataclass(
            f"{target.__name__}Settings", own, bases=(ExternalSettings,),
            namespace={"display_name": lambda self: path})  # (its import path: never taken for one of ours)
        return schema, class_builder(target, [name for name, _, _ in own])
    schema = getattr(target, "hyperparameters", None)
    if callable(target) and inspect.isclass(schema) and issubclass(schema, Hyperparameters):
        return schema, target
    raise ConfigError(f"optimizer {path!r} is neither a torch.optim.Optimizer subclass nor a builder with a "
                      "`hyperparameters` attribute (a Hyperparameters dataclass): see optim/contract.py")
