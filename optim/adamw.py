"""AdamW: torch's fused implementation, the paper's baseline."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
import torch.nn as nn

from optim.param_groups import split_decay_groups

if TYPE_CHECKING:
    from config import TrainConfig


def build_adamw(model: nn.Module, cfg: TrainConfig, device_type: str) -> torch.optim.AdamW:
    decayed, not_decayed = split_decay_groups(model, cfg.decay_embeddings)
    groups = [dict(params=decayed, weight_decay=cfg.weight_decay), dict(params=not_decayed, weight_decay=0.0)]
    return torch.optim.AdamW(groups, lr=cfg.learning_rate, betas=(cfg.beta1, cfg.beta2), eps=cfg.eps,
                             fused=device_type in ("cuda", "cpu"))
