"""
Optimizers, built from the training config by one factory: AdamW (torch's),
MARS (optim/mars.py) and Muon (optim/muon.py).

train.py calls build_optimizer() and never branches on an optimizer's name.
Contract with the training loop:
  - every param group carries "base_lr"; the schedule sets lr = base_lr * multiplier
    (MARS's and Muon's AdamW-handled parameters follow the schedule through it too);
  - an optimizer with `needs_grad_on_next_batch = True` (MARS-exact) gets, before
    each step t, the clipped gradient at the current weights on the batch of step
    t+1 through `stash_grad_for_next_step()` (read from p.grad); step t still uses
    the gradient stashed before step t-1 (zero at the first step);
  - zero_grad() with either set_to_none value is correct for every optimizer here.
"""

import torch
import torch.nn as nn

from config import TrainConfig
from optim.mars import MARS
from optim.muon import Muon

__all__ = ["MARS", "Muon", "build_optimizer", "split_decay_groups"]


def split_decay_groups(model: nn.Module) -> tuple[list[nn.Parameter], list[nn.Parameter]]:
    """2-D+ parameters (matrices, embeddings) decay; 1-D ones (biases, LayerNorm) do not."""
    params = [p for p in model.parameters() if p.requires_grad]
    return [p for p in params if p.dim() >= 2], [p for p in params if p.dim() < 2]


def embedding_params(model: nn.Module) -> list[nn.Parameter]:
    """The embedding tables (the lm_head is tied to the token embedding: one parameter)."""
    return [m.weight for m in model.modules() if isinstance(m, nn.Embedding)]


def build_optimizer(model: nn.Module, cfg: TrainConfig, device_type: str) -> torch.optim.Optimizer:
    """The optimizer named by cfg.optimizer, with its parameter groups and base learning rates.
    cfg.compile also selects the optimizers' compiled kernels (the same numbers, faster)."""
    matrices, others = split_decay_groups(model)
    if cfg.optimizer == "adamw":
        groups = [dict(params=matrices, weight_decay=cfg.weight_decay), dict(params=others, weight_decay=0.0)]
        optimizer = torch.optim.AdamW(
            groups, lr=cfg.learning_rate, betas=(cfg.beta1, cfg.beta2), eps=cfg.eps,
            fused=device_type in ("cuda", "cpu"),
        )
    elif cfg.optimizer == "mars":
        # Like the official runs: decay / no-decay groups; MARS then leaves the 1-D
        # parameters to AdamW with weight_decay_1d (see optim/mars.py).
        groups = [dict(params=matrices, weight_decay=cfg.weight_decay), dict(params=others, weight_decay=0.0)]
        optimizer = MARS(
            groups, lr=cfg.learning_rate, betas=(cfg.beta1, cfg.beta2), eps=cfg.eps, weight_decay=cfg.weight_decay,
            amsgrad=cfg.amsgrad, gamma=cfg.gamma, is_approx=cfg.is_approx, mars_type=cfg.mars_type,
            optimize_1d=cfg.optimize_1d, lr_1d=cfg.lr_1d, betas_1d=(cfg.beta1_1d, cfg.beta2_1d),
            weight_decay_1d=cfg.weight_decay_1d, compiled=cfg.compile,
        )
    elif cfg.optimizer == "muon":
        # The paper's baseline: every 2-D parameter (embeddings too) on Muon, the rest
        # on AdamW; muon_embeddings_on_adamw moves the embeddings (and the tied head) to AdamW.
        on_adamw = {id(p) for p in embedding_params(model)} if cfg.muon_embeddings_on_adamw else set()
        params = [p for p in model.parameters() if p.requires_grad]
        takes_muon = {id(p): p.ndim == 2 and id(p) not in on_adamw for p in params}
        muon = [p for p in params if takes_muon[id(p)]]
        adamw = [p for p in params if not takes_muon[id(p)]]
        optimizer = Muon(
            [dict(params=muon, use_muon=True), dict(params=adamw, use_muon=False)],
            lr=cfg.learning_rate, momentum=cfg.muon_momentum, nesterov=cfg.muon_nesterov,
            weight_decay=cfg.weight_decay, adamw_lr=cfg.lr_1d, adamw_betas=(cfg.beta1_1d, cfg.beta2_1d),
            adamw_eps=cfg.eps, adamw_weight_decay=cfg.weight_decay_1d, compiled=cfg.compile,
        )
    else:
        raise NotImplementedError(f"optimizer '{cfg.optimizer}' is not implemented")
    for group in optimizer.param_groups:
        group["base_lr"] = group["lr"]
    return optimizer
