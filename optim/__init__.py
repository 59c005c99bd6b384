"""
Optimizers, built from the training config by one factory.

train.py calls build_optimizer() and never branches on an optimizer's name.
Contract with the training loop:
  - every param group carries "base_lr"; the schedule sets lr = base_lr * multiplier;
  - an optimizer whose class sets `needs_grad_on_next_batch = True` (MARS-exact)
    gets, before each step t, the clipped gradient at the current weights on the
    batch of step t+1 through `stash_grad_for_next_step()` (read from p.grad).
"""

import torch
import torch.nn as nn

from config import TrainConfig


def split_decay_groups(model: nn.Module) -> tuple[list[nn.Parameter], list[nn.Parameter]]:
    """2-D+ parameters (matrices, embeddings) decay; 1-D ones (biases, LayerNorm) do not."""
    params = [p for p in model.parameters() if p.requires_grad]
    return [p for p in params if p.dim() >= 2], [p for p in params if p.dim() < 2]


def build_optimizer(model: nn.Module, cfg: TrainConfig, device_type: str) -> torch.optim.Optimizer:
    """The optimizer named by cfg.optimizer, with its parameter groups and base learning rates."""
    matrices, others = split_decay_groups(model)
    if cfg.optimizer == "adamw":
        groups = [
            dict(params=matrices, weight_decay=cfg.weight_decay),
            dict(params=others, weight_decay=0.0),
        ]
        optimizer = torch.optim.AdamW(
            groups, lr=cfg.learning_rate, betas=(cfg.beta1, cfg.beta2), eps=cfg.eps, fused=True
        )
    else:
        raise NotImplementedError(f"optimizer '{cfg.optimizer}' is not implemented yet")
    for group in optimizer.param_groups:
        group["base_lr"] = group["lr"]
    return optimizer
