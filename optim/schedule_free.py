"""
Schedule-Free AdamW (Defazio et al., 2024, "The Road Less Scheduled", arXiv 2405.15682), from its
authors' package `schedulefree` (facebookresearch/schedule_free): AdamWScheduleFree, foreach.

It replaces the learning-rate schedule (lr_schedule must be constant; its own linear warmup is
sf_warmup_steps, the recipes' choice with warmup_iters=0) and keeps two sequences: gradients are taken at y, an interpolation between the
averaged weights x and the base iterate z, and x is what one evaluates and saves. So the optimizer
is an EvaluationWeights (optim/contract.py): the loop swaps x into the parameters to evaluate, sample
and checkpoint (as the package asks: eval() before evaluating or saving, train() before stepping), and
a checkpoint holds x, from which train() restores y on resume.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn as nn

from errors import ConfigError
from optim.adamw import decay_routing
from optim.contract import EvaluationWeights, GroupState, Hyperparameters, Loop, beta, setting
from optim.routing import weight_decay_groups


@dataclass
class ScheduleFreeAdamWHyperparameters(Hyperparameters):
    # The package's defaults (its lr default, 2.5e-3, comes with the config)
    weight_decay: float = setting(0.0, 0.0)
    beta1: float = beta(0.9)
    beta2: float = beta(0.999)
    eps: float = setting(1e-8, 0.0)
    sf_warmup_steps: int = setting(0, 0)  # its linear lr warmup, in steps
    sf_r: float = setting(0.0, 0.0)  # polynomial weighting of the average
    sf_weight_lr_power: float = setting(2.0, 0.0)  # the average's weights during warmup: lr ** this
    decay_embeddings: bool = True  # as AdamW's: False leaves the embeddings and the tied head undecayed

    state_keys = ("decay_embeddings",)

    def display_name(self) -> str:
        return "Schedule-Free AdamW"

    def check_loop(self, cfg: Any) -> None:
        # (the loop's warmup_iters may stay: a linear warmup from 0, where sf_warmup_steps is the authors')
        if cfg.lr_schedule != "constant":
            raise ConfigError("Schedule-Free AdamW replaces the learning-rate schedule: set lr_schedule='constant' "
                              "(warmup: its own sf_warmup_steps, with warmup_iters=0, as the authors')")


@functools.cache
def schedule_free_adamw_class() -> type[torch.optim.Optimizer]:
    """The package's AdamWScheduleFree, declaring its evaluation weights and group state. Imported when
    first built, so that a machine without the package runs every other optimizer."""
    try:
        import schedulefree
    except ImportError:
        raise ConfigError("optimizer 'schedule-free-adamw' needs its authors' package: pip install "
                          "'schedulefree>=1.4' (requirements.txt lists it)") from None

    class ScheduleFreeAdamW(EvaluationWeights, GroupState, schedulefree.AdamWScheduleFree):
        # the package's run state: step count, the average's weights, and which weights the parameters hold
        group_state_keys = ("k", "weight_sum", "lr_max", "scheduled_lr", "train_mode")

        def eval_weights(self) -> None:
            self.eval()

        def train_weights(self) -> None:
            self.train()

    return ScheduleFreeAdamW


def build_schedule_free_adamw(model: nn.Module, hp: ScheduleFreeAdamWHyperparameters, loop: Loop
                              ) -> torch.optim.Optimizer:
    groups = weight_decay_groups(model, decay_routing("schedule-free-adamw", hp.decay_embeddings), hp.weight_decay)
    optimizer = schedule_free_adamw_class()(
        groups, lr=loop.learning_rate, betas=(hp.beta1, hp.beta2), eps=hp.eps, warmup_steps=hp.sf_warmup_steps,
        r=hp.sf_r, weight_lr_power=hp.sf_weight_lr_power, foreach=True)
    optimizer.train_weights()  # the package starts in eval mode; the loop steps in train mode
    return optimizer
