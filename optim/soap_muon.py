"""
SOAP-Muon (Vyas et al.'s note "SOAP-Muon"; modded-nanogpt's optimization track, record #14, PR #278, and the
records built on it, #44 to #46): Muon whose momentum is first preconditioned as SOAP preconditions a gradient,
Adam's second moment in the eigenbases of Shampoo's statistics, then orthogonalised. Following the record's code
(KellerJordan/modded-nanogpt at f411b3d, records/track_3_optimization/results/20260504_contra_muon_mlp_soapish/
train_gpt_contra_normuon_soapish_mlp.py: soap_precondition_momentum, soap_update_preconditioner, Muon.step), for a
matrix p of shape (rows, cols) with gradient g:

    b = lerp(b, g, 1 - mu);  u = lerp(g, b, mu)                 (the track's Nesterov momentum)
    from the second step:  u' = Q_L^T u Q_R;  v = soap_beta2 v + (1 - soap_beta2) u'^2
                           u = Q_L (u' / (sqrt(v) + eps)) Q_R^T at u's Frobenius norm (its norm's floor eps)
    p = p * (1 - lr * weight_decay) - lr * NS(u) * max(1, rows/cols)^0.5
    then L = lerp(L, g g^T, 1 - shampoo_beta), R = lerp(R, g^T g, 1 - shampoo_beta); after the first step
    Q_L, Q_R are eigh's eigenbases, and every precondition_frequency steps after that one power iteration and QR
    refresh them (v reordered with the eigenvalues): SOAP's own bases, optim/soap.py's functions.

NS is the track's (ns_coefficients=simple, ns_steps=12). What the record stacks on SOAP-Muon is not part of it and
each is another setting or optimizer here: its Contra-Muon term, NorMuon-lite's row normalisation, its u/w floor
(with which it runs no weight decay); record #44 refreshes the bases every step (precondition_frequency=1) and
estimates the norms from the Gram matrix (docs/optimizers.md's table of differences). The routing is the track's,
NorMuon's here: the blocks' matrices on SOAP-Muon, the embeddings, the tied head and the 1-D parameters on AdamW.

Sharding, as SOAP's: the statistics, the bases and the preconditioning need whole matrices, so under FSDP2 every
rank gathers each matrix's u, g and v (one all-gather for all of them), preconditions them whole as one process
does, keeping L, R, Q_L and Q_R whole (plain tensors) and its rows of v; Newton-Schulz then runs on owner ranks as
Muon's. The matrices of one shape run as one stack of batched products (optim/soap.py's stacks).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import ClassVar

import torch
import torch.nn as nn

from optim.adamw import SideAdamW
from optim.contract import Loop, Product, beta, setting
from optim.muon import Muon, ema_momentum, orthogonalized
from optim.newton_schulz import NewtonSchulzSettings, muon_scale, ns_coefficients_setting
from optim.routing import Route, routing, use_muon_groups
from optim.rules import decoupled_step_
from optim.sharding import gather_whole, local, local_rows, with_local_blocks
from optim.soap import (
    accumulate_statistics, eigenbases, in_shapes, refreshed_bases, rotate, share, stack_of, stack_products, stacked,
    stacks,
)


@dataclass
class SOAPMuonHyperparameters(SideAdamW, NewtonSchulzSettings):
    mup_hidden_rule: ClassVar[str] = "spectral"  # (contract.Hyperparameters: an orthogonalised update)
    weight_decay: float = setting(0.025, 0.0)  # the track's tuned Muon's (record #12); the records run none
    muon_momentum: float = beta(0.95)
    soap_beta2: float = beta(0.9)  # v's decay (the record's SOAP_BETA2)
    shampoo_beta: float = beta(0.9)  # L's and R's (the record's: the same constant)
    soap_eps: float = setting(1e-8, 0.0)
    precondition_frequency: int = setting(10, 1)  # the record's (#44 onwards: 1)
    eps: float = setting(1e-8, 0.0)  # the AdamW side's
    ns_steps: int = setting(12, 1)
    ns_coefficients: str = ns_coefficients_setting("simple")

    def display_name(self) -> str:
        return "SOAP-Muon"


class SOAPMuon(Muon):
    """Muon's param groups (use_muon); state per matrix: Muon's momentum_buffer, and SOAP's exp_avg_sq (v, in the
    parameter's layout), GG = [L, R] and, from the first step, Q = [Q_L, Q_R] (whole on every rank)."""

    side_state_sharded = False  # L, R, Q_L, Q_R whole on every rank under FSDP (bench.memory)

    def __init__(self, params: Iterable, lr: float = 0.02, weight_decay: float = 0.0, momentum: float = 0.95,
                 soap_beta2: float = 0.9, shampoo_beta: float = 0.9, soap_eps: float = 1e-8,
                 precondition_frequency: int = 10, ns_steps: int = 12, ns_coefficients: str = "simple",
                 adamw_lr: float = 3e-3, adamw_betas: tuple[float, float] = (0.9, 0.95), adamw_eps: float = 1e-8,
                 adamw_weight_decay: float = 0.0, *, compiled: bool = True):
        """The record's constants as defaults (its Muon's lr 0.02 and wd 0); params as Muon's."""
        super().__init__(params, lr=lr, momentum=momentum, nesterov=True, weight_decay=weight_decay,
                         ns_steps=ns_steps, adamw_lr=adamw_lr, adamw_betas=adamw_betas, adamw_eps=adamw_eps,
                         adamw_weight_decay=adamw_weight_decay, compiled=compiled, ns_coefficients=ns_coefficients,
                         matrix_defaults=dict(soap_beta2=soap_beta2, shampoo_beta=shampoo_beta, soap_eps=soap_eps,
                                              precondition_frequency=precondition_frequency))

    def products(self) -> list[Product]:
        """Newton-Schulz as Muon's, and SOAP's products of each stack (statistics, rotations in and out, the
        refresh's power iteration; the rotations of m SOAP makes on refresh steps are not made here)."""
        products = super().products()
        for group in self.param_groups:
            if group["use_muon"]:
                for stack in stacks(group["params"], lambda p: (tuple(p.shape), p.dtype), lambda p: p.numel()):
                    soap = stack_products(len(stack), tuple(stack[0].shape), (True, True), stack[0].dtype,
                                          group["precondition_frequency"])
                    products += soap[:6] + soap[-2:]  # (L, R, into and out of the bases; the power iterations)
        return products

    def _muon_update(self, group: dict, params: list[torch.Tensor]) -> None:
        directions = ema_momentum(params, [self._momentum_buffer(p) for p in params], group["momentum"], True)
        for p in params:
            self._start_state(p)
        gathered = gather_whole([t for p, u in zip(params, directions) for t in (u, p.grad, self.state[p]["exp_avg_sq"])])
        whole = {p: gathered[3 * i: 3 * i + 3] for i, p in enumerate(params)}
        preconditioned = {}
        for stack in stacks(params, self._stack_key, lambda p: p.numel()):
            preconditioned.update(zip(stack, self._preconditioned(stack, [whole[p] for p in stack], group)))
        directions = with_local_blocks(directions, [preconditioned[p][local_rows(p)] for p in params])
        updates = orthogonalized(params, directions, group)
        torch._foreach_mul_(updates, [muon_scale(*p.shape) for p in params])
        decoupled_step_(local(params), local(updates), group["lr"], group["weight_decay"])

    def _stack_key(self, p: torch.Tensor) -> tuple:
        """What the matrices of one stack share: shape, dtype, and where they are in the schedule (a matrix that
        missed a step, with no gradient, refreshes its bases on its own count)."""
        state = self.state[p]
        return tuple(p.shape), p.dtype, "Q" in state, state.get("soap_step")

    def _start_state(self, p: torch.Tensor) -> None:
        state = self.state[p]
        if "GG" not in state:
            state["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
            state["GG"] = [torch.zeros(n, n, dtype=p.dtype, device=p.device) for n in p.shape]

    def _preconditioned(self, params: list[torch.Tensor], whole: list[list[torch.Tensor]],
                        group: dict) -> list[torch.Tensor]:
        """A stack's u, whole, preconditioned in its bases (as it is at the first step, which has none); the
        statistics take g and the bases follow them (made at the first step, refreshed every
        precondition_frequency steps after it); this rank's rows of v kept."""
        states = [self.state[p] for p in params]
        directions, grads, exp_avg_sqs = (list(tensors) for tensors in zip(*whole))
        u = stacked(directions)
        statistics = [stack_of([s["GG"] for s in states], side) for side in (0, 1)]
        # the statistics take g (they make or refresh the bases below, after u is preconditioned in the old ones)
        accumulate_statistics(statistics, stacked(grads), group["shampoo_beta"])
        if "Q" not in states[0]:
            result = u
            for state in states:
                state["Q"], state["soap_step"] = [None, None], 0
            bases = [share([s["Q"] for s in states], side, eigenbases(statistics[side])) for side in (0, 1)]
        else:
            bases = [stack_of([s["Q"] for s in states], side) for side in (0, 1)]
            rotated = rotate(u, bases)
            v = stacked(exp_avg_sqs)
            v.mul_(group["soap_beta2"]).addcmul_(rotated, rotated, value=1.0 - group["soap_beta2"])
            result = rotate(rotated / (v.sqrt() + group["soap_eps"]), bases, back=True)
            norms = torch.linalg.matrix_norm(u, keepdim=True) / torch.linalg.matrix_norm(result, keepdim=True).clamp_min(
                group["soap_eps"])
            result = result * norms
            if states[0]["soap_step"] % group["precondition_frequency"] == 0:
                bases, v = refreshed_bases(statistics, bases, v)
                for side in (0, 1):
                    share([s["Q"] for s in states], side, bases[side])
            torch._foreach_copy_(exp_avg_sqs, in_shapes(v, params))
        for state in states:
            state["soap_step"] += 1
        blocks = local([s["exp_avg_sq"] for s in states])
        if blocks[0] is not exp_avg_sqs[0]:  # under FSDP: this rank's rows of the whole v
            torch._foreach_copy_(blocks, [v_whole[local_rows(p)] for v_whole, p in zip(exp_avg_sqs, params)])
        return in_shapes(result, params)


def build_soap_muon(model: nn.Module, hp: SOAPMuonHyperparameters, loop: Loop) -> SOAPMuon:
    """The blocks' matrices on SOAP-Muon; the embeddings, the tied head and the 1-D parameters on AdamW at lr_1d."""
    table = routing(Route("soap_muon", True), Route("adamw", True, lr="lr_1d"), Route("adamw", True, lr="lr_1d"))
    return SOAPMuon(
        use_muon_groups(model, table, "soap_muon", loop.learning_rate, hp),
        lr=loop.learning_rate, weight_decay=hp.weight_decay, momentum=hp.muon_momentum, soap_beta2=hp.soap_beta2,
        shampoo_beta=hp.shampoo_beta, soap_eps=hp.soap_eps, precondition_frequency=hp.precondition_frequency,
        ns_steps=hp.ns_steps, ns_coefficients=hp.ns_coefficients, adamw_betas=(hp.beta1_1d, hp.beta2_1d),
        adamw_eps=hp.eps, adamw_weight_decay=hp.weight_decay_1d, compiled=loop.compiled,
    )
