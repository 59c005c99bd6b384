"""
MuonH (Wen, Dang, Lyu, Ma, Liang, "Fantastic Pretraining Optimizers and Where to Find Them 2.1: Hyperball
Optimization"): Muon's orthogonalised momentum taken on the hyperball of each hidden matrix's initial Frobenius
norm, instead of weight decay. For a hidden matrix W with gradient g, radius R = ||W_0||_F (kept in the optimizer
state, measured at its first step) and the loop's learning rate lr:

    g = g - (<W, g> / max(||W||^2, 1e-10)) W      (only with tangent_projection: marin's option, off by default)
    b = momentum b + g;  d = g + momentum b (Nesterov) or b
    u = NS5(d)                                   (Newton-Schulz on d / (||d||_F + muon_eps); no shape factor:
                                                  the normalisation below removes any scale)
    W' = W - lr * R * u / max(||u||_F, 1e-10);  W = R * W' / ||W'||_F

as AdamH's step (optim/adamh.py, which also runs its other rules here). The untied head takes AdamH at the same
lr (hyperball_head), the embeddings and 1-D parameters Adam at adam_lr, without weight decay by default.

Source: marin-community/marin, lib/levanter/src/levanter/optim/muonh.py at
ab6e485c6250984825d2ecbb983b3c02e247e062 (scale_with_muonh, MuonHConfig.create_mask; its Newton-Schulz is
levanter/optim/muon.py's zeropower_via_newtonschulz5, the quintic (3.4445, -4.7750, 2.0315) on
X / (||X|| + muon_epsilon), at 5c0dda2), the parity target (tests/test_optim_hyperball.py); the authors' PyTorch
MuonH is modded-nanogpt's records/track_3_optimization/results/20260430_muonh/train_gpt_simple_muonh.py at
f411b3d. docs/optimizers.md lists where the two differ and which of the differences are settings here.

Routing (optim/adamh.hyperball_routes): the blocks' matrices MuonH; an untied head AdamH (marin: "lm_head"), or
Adam with hyperball_head=False; the tied embedding/head Adam unless hyperball_tied_embedding; the embeddings and
the 1-D parameters Adam. Newton-Schulz runs batched by shape on owner ranks (optim/newton_schulz.py's
newton_schulz5_across_ranks, as Muon's), with ns_coefficients; the radii and ||u||, ||W'|| are whole-matrix
norms, batched, one all-reduce each over the shard group under FSDP2 (optim/adamh.hyperball_step_).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import torch
import torch.nn as nn

from optim.adamh import AdamH, AdamHHyperparameters, hyperball_routes, subtract_multiples_, tangent_coefficients
from optim.contract import Loop, MatrixProducts, Product, beta, setting
from optim.newton_schulz import (
    NewtonSchulzSettings, newton_schulz5_across_ranks, ns5_dtype, ns5_products, ns_iterations,
)
from optim.sharding import local, shard_group


@dataclass
class MuonHHyperparameters(AdamHHyperparameters, NewtonSchulzSettings):  # (ns_steps, ns_coefficients)
    muon_momentum: float = beta(0.95)
    muon_nesterov: bool = True
    muon_eps: float = setting(1e-8, 0.0)  # Newton-Schulz's X / (||X|| + muon_eps) (marin's muon_epsilon)

    def display_name(self) -> str:
        return "MuonH"


class MuonH(MatrixProducts, AdamH):
    rules = ("adam", "adamh", "muonh")

    def __init__(self, params: Iterable, lr: float = 0.02, momentum: float = 0.95, nesterov: bool = True,
                 ns_steps: int = 5, ns_coefficients: str = "quintic", ns_eps: float = 1e-8, **adamh):
        """params: groups that each say rule="muonh" (the blocks' 2-D matrices), "adamh" (2-D) or "adam"; a
        group's missing settings come from its rule's arguments: lr, momentum, nesterov, ns_* for MuonH, the
        others AdamH's (lr: MuonH's, where adamh names none)."""
        self.muonh_defaults = dict(lr=lr, momentum=momentum, nesterov=nesterov, ns_steps=ns_steps,
                                   ns_coefficients=ns_coefficients, ns_eps=ns_eps)
        super().__init__(params, **{"lr": lr, **adamh})

    def add_param_group(self, param_group: dict) -> None:
        if param_group.get("rule") == "muonh":
            for key, value in self.muonh_defaults.items():
                param_group.setdefault(key, value)
            ns_iterations(param_group["ns_coefficients"], param_group["ns_steps"])  # (refuses a bad choice now)
        super().add_param_group(param_group)

    def products(self) -> list[Product]:
        """Newton-Schulz of the MuonH matrices, batched by shape within each group (as the step runs it)."""
        return [product for group in self.param_groups if group["rule"] == "muonh" and group["params"]
                for product in ns5_products([tuple(p.shape) for p in group["params"]], group["ns_steps"],
                                            ns5_dtype(group["params"][0].device))]

    def hyperball_update(self, group: dict, params: list[torch.Tensor]) -> None:
        if group["rule"] != "muonh":
            super().hyperball_update(group, params)
            return
        grads = [p.grad for p in params]
        buffers = [self._momentum_buffer(p) for p in params]
        torch._foreach_mul_(buffers, group["momentum"])
        torch._foreach_add_(buffers, grads)
        if self.tangent_projection:  # g' = g - c W (marin's tangent_projection): b took g, so b less c W
            blocks = local(params)
            coefficients = tangent_coefficients(blocks, local(grads), shard_group(params))
            subtract_multiples_(local(buffers), blocks, coefficients)
        directions = torch._foreach_add(grads, buffers, alpha=group["momentum"]) if group["nesterov"] else buffers
        if self.tangent_projection and group["nesterov"]:  # d = g' + momentum b
            subtract_multiples_(local(directions), blocks, coefficients)
        updates = newton_schulz5_across_ranks(directions, group["ns_steps"], group["ns_eps"],
                                              coefficients=group["ns_coefficients"])
        self.hyperball_(params, local(updates), group["lr"])

    def _momentum_buffer(self, p: torch.Tensor) -> torch.Tensor:
        state = self.state[p]
        if "momentum_buffer" not in state:
            state["momentum_buffer"] = torch.zeros_like(p, memory_format=torch.preserve_format)
        return state["momentum_buffer"]


def build_muonh(model: nn.Module, hp: MuonHHyperparameters, loop: Loop) -> MuonH:
    return MuonH([dict(params=params, rule=rule) for rule, params in hyperball_routes(model, hp, "muonh")],
                 lr=loop.learning_rate, momentum=hp.muon_momentum, nesterov=hp.muon_nesterov, ns_steps=hp.ns_steps,
                 ns_coefficients=hp.ns_coefficients, ns_eps=hp.muon_eps, betas=(hp.beta1, hp.beta2), eps=hp.eps,
                 adam_lr=hp.adam_lr, adam_betas=(hp.adam_beta1, hp.adam_beta2), adam_eps=hp.adam_eps,
                 adam_weight_decay=hp.adam_weight_decay, radius=hp.hyperball_radius,
                 tangent_projection=hp.tangent_projection)
