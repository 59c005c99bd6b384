"""
The learning-rate schedule: each step, every param group's lr from its base_lr.

Warmup is linear from 0 (base_lr * step / warmup_iters), as in the official MARS
code (nanoGPT now warms up with (step + 1) / (warmup_iters + 1)); then
  cosine:   floor + (base_lr - floor) * (1 + cos(pi * progress)) / 2, until lr_decay_iters;
  constant: base_lr;
  wsd:      base_lr, then linearly to floor over the last wsd_decay_frac of the run (with
            min_lr = 0 and wsd_decay_frac = 0.02, the paper-era official train_muon.py:
            constant, then to 0 over the last 2000 of 100k steps);
  onecycle: torch's OneCycleLR with cosine annealing, as llm-baselines' 'cos' scheduler runs it (Semenov et
            al.'s benchmark): the warmup too is a cosine, from the floor up to base_lr, and the decay a
            cosine back down to the floor; their div_factor 100 and final_div_factor 1 are min_lr =
            learning_rate / 100.
A group's floor is min_lr for the main group and, for the others, base_lr * min_lr /
learning_rate (min_lr_groups = "scaled") or min_lr itself ("absolute").
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from config import TrainConfig


def cosine_between(start: float, end: float, progress: float) -> float:
    """From start (progress 0) to end (progress 1) along half a cosine."""
    return end + 0.5 * (1.0 + math.cos(math.pi * min(max(progress, 0.0), 1.0))) * (start - end)


def scheduled_lr(step: int, base_lr: float, floor: float, cfg: TrainConfig, total_iters: int) -> float:
    """The lr at `step` of a group that starts from base_lr and ends at floor."""
    if cfg.lr_schedule == "onecycle":  # (OneCycleLR's phases: up over warmup_iters - 1 steps, then down)
        if step < cfg.warmup_iters:
            return cosine_between(floor, base_lr, step / max(cfg.warmup_iters - 1, 1))
        return cosine_between(base_lr, floor, (step - cfg.warmup_iters + 1) / max(total_iters - cfg.warmup_iters, 1))
    if step < cfg.warmup_iters:
        return base_lr * step / cfg.warmup_iters
    if cfg.lr_schedule == "constant":
        return base_lr
    if cfg.lr_schedule == "wsd":
        decay_start = int(total_iters * (1 - cfg.wsd_decay_frac))
        if step < decay_start:
            return base_lr
        return floor + (base_lr - floor) * (total_iters - step) / max(total_iters - decay_start, 1)
    decay_iters = cfg.lr_decay_iters or total_iters  # cosine
    if step >= decay_iters:
        return floor
    return cosine_between(base_lr, floor, (step - cfg.warmup_iters) / max(decay_iters - cfg.warmup_iters, 1))


def set_learning_rates(optimizer: torch.optim.Optimizer, step: int, cfg: TrainConfig, total_iters: int) -> float:
    """Set every group's lr for this step (and, under weight_decay_schedule="lr", its weight_decay: base_weight_decay
    x lr / base_lr); returns the main group's (for the logs)."""
    for group in optimizer.param_groups:
        base = group["base_lr"]
        floor = cfg.min_lr if cfg.min_lr_groups == "absolute" else base * cfg.min_lr / cfg.learning_rate
        group["lr"] = scheduled_lr(step, base, floor, cfg, total_iters)
        if cfg.weight_decay_schedule == "lr" and "base_weight_decay" in group and base > 0:
            group["weight_decay"] = group["base_weight_decay"] * group["lr"] / base
    return scheduled_lr(step, cfg.learning_rate, cfg.min_lr, cfg, total_iters)
