"""
Scion (Pethick et al., 2025, "Training Deep Learning Models with Norm-Constrained LMOs"), as its authors implement
it (LIONS-EPFL/scion at f58a393, scion.py) and partition a GPT (examples/shallow-nanogpt/model.py, its "Mixed"
mode with the Sign first layer, the default of its train.py). Each parameter p with gradient g takes the linear
minimisation oracle (LMO) of its layer's norm ball, scaled by its group's radius, on a momentum:

    m = (1 - momentum) m + momentum g                 (momentum 0.1: an average over ~10 steps)
    p = (1 - lr) p - lr * scale * lmo(m)               (the constrained update: the decay is lr itself)

with, by kind of parameter (optim/routing.py):
  - the blocks' matrices: Spectral, lmo = NS5(m) sqrt(rows / cols), scale scion_hidden_scale (50); the attention's
    fused c_attn as the three matrices q, k and v the authors' GPT has (each its own NS5, scale 1);
  - the position table (a first layer): Sign, lmo = sign(m), scale scion_input_scale (1);
  - the token embedding, tied to the head here: Sign normalised, lmo = sign(m) / cols, scale scion_output_scale
    (3000), the authors' rule for the output layer (an untied head takes it, and the embedding the first layer's);
  - 1-D parameters (norms' weights, biases, which the authors' GPT has none of): their Auto rule for 1-D, BiasRMS,
    lmo = m / (rms(m) + 1e-8), scale scion_hidden_scale.
The default radii are the authors' for a GPT with a tied embedding (examples/modded-nanogpt/train_gpt_scion.py:
50 and 3000); their untied shallow GPT takes 1 / 3 / 10 with scion_init=True.
scion_unconstrained=True drops the (1 - lr) factor, as the authors' option does. scion_init=True re-initialises
the weights as the authors' Scion.init() does before their shallow GPT trains: each matrix to its norm ball's
radius (Spectral: orthogonal times sqrt(rows / cols); Sign: +-1, over cols where normalised; times the group's
scale), drawn on the CPU so that every rank and device starts alike; 1-D parameters keep the model's
initialisation (their BiasRMS.init would zero the LayerNorms' gains, which their GPT does not have). The NS5 of
the matrices runs on owner ranks, as Muon's (optim/newton_schulz.py); under FSDP a 1-D parameter's rms is its
whole tensor's (one all-reduce of squared norms); Sign is element-wise.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
import torch.nn as nn

from errors import ConfigError
from config import hf_source
from optim.contract import Loop, MatrixProducts, Product, positive, setting
from optim.newton_schulz import (
    NewtonSchulzSettings, newton_schulz5_across_ranks, ns5_dtype, ns5_products, ns_iterations,
)
from optim.routing import parameter_kinds
from optim.rules import GroupwiseOptimizer
from optim.sharding import local, local_rows, shard_group, squared_norms

NS5_EPS = 1e-7  # the authors' zeropower_via_newtonschulz5


@dataclass
class ScionHyperparameters(NewtonSchulzSettings):  # (ns_steps, ns_coefficients)
    mup_hidden_rule: ClassVar[str] = "spectral"  # (contract.Hyperparameters)
    scion_momentum: float = setting(0.1, 0.0, 1.0, low_open=True)  # the weight of the new gradient (1: none kept)
    scion_hidden_scale: float = positive(50.0)  # the radius of the blocks' matrices and of 1-D parameters
    scion_input_scale: float = positive(1.0)  # the first layer's (position table; an untied token embedding)
    scion_output_scale: float = positive(3000.0)  # the output layer's (the tied embedding, or an untied head)
    scion_unconstrained: bool = False
    scion_init: bool = False  # the authors' Scion.init(): the matrices drawn anew at their radii (a fresh start)

    def display_name(self) -> str:
        return "Scion"

    def check_loop(self, cfg: Any) -> None:
        if self.scion_init and hf_source(cfg.init_from):
            raise ConfigError("scion_init=True re-initialises every matrix, which would discard the weights of "
                              f"init_from={cfg.init_from!r}: drop scion_init to train on from them")


class Scion(MatrixProducts, GroupwiseOptimizer):
    def __init__(self, params: Iterable, lr: float = 1e-3, momentum: float = 0.1, unconstrained: bool = False,
                 ns_steps: int = 5, ns_coefficients: str = "quintic"):
        """params: groups that each say their lmo ("spectral", "sign", "sign_normalized" or "bias_rms") and scale;
        ns_coefficients: Newton-Schulz's coefficients, a key of newton_schulz.NS_COEFFICIENTS."""
        ns_iterations(ns_coefficients, ns_steps)  # (refuses a bad choice now)
        super().__init__(params, dict(lr=lr, momentum=momentum, unconstrained=unconstrained, ns_steps=ns_steps,
                                      ns_coefficients=ns_coefficients))

    def products(self) -> list[Product]:
        """NS5 of the spectral groups' matrices (a fused q, k, v as three), batched by shape within each group."""
        return [product for group in self.param_groups if group["lmo"] == "spectral" and group["params"]
                for product in ns5_products([(p.shape[0] // count, p.shape[1])
                                             for p, count in zip(group["params"], group["pieces"])
                                             for _ in range(count)], group["ns_steps"],
                                            ns5_dtype(group["params"][0].device))]

    def update_group(self, group: dict, params: list[torch.Tensor]) -> None:
        lr, momentum = group["lr"], group["momentum"]
        buffers = []
        for p in params:
            if "momentum_buffer" not in self.state[p]:
                self.state[p]["momentum_buffer"] = torch.zeros_like(p, memory_format=torch.preserve_format)
            buffers.append(self.state[p]["momentum_buffer"])
        if momentum != 1:  # (the authors' momentum 1 keeps no buffer: the lmo of the gradient itself)
            torch._foreach_lerp_(local(buffers), local([p.grad for p in params]), momentum)
        else:
            torch._foreach_copy_(local(buffers), local([p.grad for p in params]))
        lmo = group["lmo"]
        if lmo == "spectral":  # on owner ranks; a fused q, k, v matrix as its three matrices
            pieces = dict(zip(map(id, group["params"]), group["pieces"]))
            counts = [pieces[id(p)] for p in params]
            updates = newton_schulz5_across_ranks(buffers, group["ns_steps"], NS5_EPS, counts,
                                                  coefficients=group["ns_coefficients"])
            torch._foreach_mul_(updates, [(p.shape[0] / count / p.shape[1]) ** 0.5 for p, count in zip(params, counts)])
            updates = local(updates)
        elif lmo in ("sign", "sign_normalized"):
            updates = torch._foreach_sign(local(buffers))
            if lmo == "sign_normalized":
                torch._foreach_mul_(updates, [1.0 / p.shape[1] for p in params])
        else:  # bias_rms: m / (rms of the whole tensor + 1e-8)
            scales = torch._foreach_div(list(squared_norms(buffers, shard_group(params)).unbind()),
                                        [float(p.numel()) for p in params])
            torch._foreach_sqrt_(scales)
            torch._foreach_add_(scales, 1e-8)
            torch._foreach_reciprocal_(scales)
            updates = torch._foreach_mul(local(buffers), [s.to(params[0].dtype) for s in scales])
        if not group["unconstrained"]:
            torch._foreach_mul_(local(params), 1.0 - lr)
        torch._foreach_add_(local(params), local(updates), alpha=-lr * group["scale"])


def build_scion(model: nn.Module, hp: ScionHyperparameters, loop: Loop) -> Scion:
    kinds = parameter_kinds(model)
    token_embedding = model.transformer.wte.weight
    head = getattr(model, "lm_head", None)
    untied_head = head is not None and head.weight is not token_embedding
    output = ("sign_normalized", hp.scion_output_scale)
    first = ("sign", hp.scion_input_scale)
    output_layer = head.weight if untied_head else token_embedding
    groups = []
    fused_qkv = {id(m.c_attn.weight) for m in model.modules() if hasattr(m, "c_attn")}
    for (lmo, scale), params in [
        (("spectral", hp.scion_hidden_scale), kinds.get("attention", []) + kinds.get("mlp", [])),
        (("bias_rms", hp.scion_hidden_scale), kinds.get("1d", [])),
        (first, [p for p in kinds.get("embeddings", []) if p is not output_layer]),
        (output, [output_layer]),
    ]:
        if params:
            groups.append(dict(params=params, lmo=lmo, scale=scale, pieces=[3 if id(p) in fused_qkv else 1 for p in params]))
    if hp.scion_init:  # (a resume's checkpoint, loaded after the builder, replaces these weights)
        initialise_at_radii(groups)
    return Scion(groups, lr=loop.learning_rate, momentum=hp.scion_momentum, unconstrained=hp.scion_unconstrained,
                 ns_steps=hp.ns_steps, ns_coefficients=hp.ns_coefficients)


@torch.no_grad()
def initialise_at_radii(groups: list[dict]) -> None:
    """The authors' Scion.init() on the builder's groups, in their order of operations (float64 for the orthogonal
    draw, then the parameter's dtype): a fused q, k, v matrix as its three matrices; 1-D parameters unchanged.
    Drawn whole on the CPU from the global generator (seeded alike on every rank), each rank keeping its rows."""
    for group in groups:
        if group["lmo"] == "bias_rms":
            continue
        for p, count in zip(group["params"], group["pieces"]):
            whole = torch.empty(p.shape, dtype=p.dtype)
            for piece in whole.chunk(count):
                if group["lmo"] == "spectral":
                    drawn = nn.init.orthogonal_(torch.empty(piece.shape, dtype=torch.float64))
                    piece.copy_(drawn * (piece.shape[0] / piece.shape[1]) ** 0.5)
                else:  # sign: +-1, over the columns where normalised
                    piece.copy_(torch.randint(0, 2, piece.shape, dtype=p.dtype) * 2 - 1)
                    if group["lmo"] == "sign_normalized":
                        piece.mul_(1 / piece.shape[1])
            whole.mul_(group["scale"])
            local([p])[0].copy_(whole[local_rows(p)].to(p.device))
