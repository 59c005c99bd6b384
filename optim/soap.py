"""
SOAP (Vyas et al., 2024, "SOAP: Improving and Stabilizing Shampoo using Adam", arXiv 2409.11321):
Adam run in the eigenbasis of Shampoo's preconditioner. A drop-in replacement for the authors'
implementation (nikhilvyas/SOAP, soap.py) for the 1-D and 2-D parameters a GPT has: the same
arguments, defaults and arithmetic. For a matrix p with gradient G, left and right statistics
L = EMA(G G^T), R = EMA(G^T G) (rate shampoo_beta, else beta2) and their eigenbases Q_L, Q_R:

    G' = Q_L^T G Q_R;  m = beta1 m + (1-beta1) G';  v = beta2 v + (1-beta2) G'^2
    p = p - lr * sqrt(1-beta2^t)/(1-beta1^t) * Q_L (m / (sqrt(v) + eps)) Q_R^T
    p = p - lr * weight_decay * p

A side longer than max_precond_dim (GPT-2's 50304-row embedding) is not rotated; 1-D parameters are
not rotated unless precondition_1d (plain Adam). As the reference: the first step only starts the
statistics (the parameter does not move); the bases come from torch.linalg.eigh at the first step
and, every precondition_frequency steps, from one power iteration and a QR decomposition, in float32;
m is carried from the old basis to the new one, v is reordered with the eigenvalues.

Where we differ: parameters of more than 2 dimensions and merge_dims / data_format are not supported
(a GPT has none); the statistics L, R are kept in the parameter's dtype (the reference's are float32,
which fails for float64 or bf16 parameters; for float32 ones it is the same). Each matrix has its own bases, so the step is a Python loop over parameters, like
Muon's Newton-Schulz; the optimizer state is a few matrices per parameter (L, R, Q_L, Q_R), which the
checkpoint holds.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import torch
import torch.nn as nn

from config import ConfigError
from optim.adamw import decay_routing
from optim.contract import Hyperparameters, Loop, beta, setting
from optim.routing import weight_decay_groups
from optim.rules import GroupwiseOptimizer
from optim.sharding import gather_whole, local, local_rows


@dataclass
class SOAPHyperparameters(Hyperparameters):
    # The authors' defaults (their README: lr 3e-3, betas 0.95/0.95, weight decay 0.01, frequency 10)
    weight_decay: float = setting(0.01, 0.0)
    beta1: float = beta(0.95)
    beta2: float = beta(0.95)
    eps: float = setting(1e-8, 0.0)
    shampoo_beta: float = setting(-1.0, -1.0, 1.0, high_open=True)  # the statistics' EMA rate; -1: beta2
    precondition_frequency: int = setting(10, 1)
    max_precond_dim: int = setting(10000, 1)
    precondition_1d: bool = False
    decay_embeddings: bool = True  # as AdamW's: False leaves the embeddings and the tied head undecayed

    state_keys = ("max_precond_dim", "precondition_1d", "decay_embeddings")

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.shampoo_beta != -1 and not 0.0 <= self.shampoo_beta < 1.0:
            raise ConfigError(f"config key 'shampoo_beta' must be -1 (beta2) or in [0, 1), got {self.shampoo_beta}")

    def display_name(self) -> str:
        return "SOAP"


class SOAP(GroupwiseOptimizer):
    """Under data_parallel=fsdp (optim/sharding.py) p, its gradient, m and v are sharded by rows, and the
    statistics and bases need whole gradients: every rank gathers the gradient, m and v of each matrix with
    a rotated side (one all-gather per group and step), runs the step on them as one process does, keeping
    L, R, Q_L, Q_R whole (plain tensors), and keeps its rows of p, m and v. The products run on whole
    matrices and each rank takes its rows, so that they round as one process's do: a product's rows computed
    alone need not (a rotated 1-D parameter's differed by 1e-7). A parameter with no rotated side (a 1-D one
    without precondition_1d: plain Adam) stays local. Unsharded, the same code runs with no communication."""

    side_state_sharded = False  # L, R, Q_L, Q_R whole on every rank under FSDP (bench.memory)

    def __init__(self, params: Iterable, lr: float = 3e-3, betas: tuple[float, float] = (0.95, 0.95),
                 shampoo_beta: float = -1, eps: float = 1e-8, weight_decay: float = 0.01,
                 precondition_frequency: int = 10, max_precond_dim: int = 10000, precondition_1d: bool = False,
                 correct_bias: bool = True):
        super().__init__(params, dict(lr=lr, betas=betas, shampoo_beta=shampoo_beta, eps=eps,
                                      weight_decay=weight_decay, precondition_frequency=precondition_frequency,
                                      max_precond_dim=max_precond_dim, precondition_1d=precondition_1d,
                                      correct_bias=correct_bias))

    def update_group(self, group: dict, params: list[torch.Tensor]) -> None:
        for p in params:
            if p.ndim > 2:
                raise ValueError(f"SOAP here takes 1-D and 2-D parameters; got shape {tuple(p.shape)}")
            if not self.state[p]:
                rotated = [n <= group["max_precond_dim"] and (p.ndim > 1 or group["precondition_1d"]) for n in p.shape]
                self.state[p].update(step=0, exp_avg=torch.zeros_like(p.grad), exp_avg_sq=torch.zeros_like(p.grad),
                                     GG=[torch.zeros(n, n, dtype=p.dtype, device=p.device) if r else None
                                         for n, r in zip(p.shape, rotated)])
        inputs = [[p.grad, self.state[p]["exp_avg"], self.state[p]["exp_avg_sq"]] for p in params]
        whole = [any(g is not None for g in self.state[p]["GG"]) for p in params]
        gathered = iter(gather_whole([t for tensors, w in zip(inputs, whole) if w for t in tensors]))
        for p, tensors, w in zip(params, inputs, whole):
            grad, exp_avg, exp_avg_sq = [next(gathered) for _ in tensors] if w else local(tensors)
            self._update(p, grad, exp_avg, exp_avg_sq, local_rows(p) if w else slice(None), group)

    def _update(self, p: torch.Tensor, grad: torch.Tensor, exp_avg: torch.Tensor, exp_avg_sq: torch.Tensor,
                rows: slice, group: dict) -> None:
        """One step from the gradient, m and v, whole (or p's local blocks if no side is rotated), to `rows`
        of p, m and v."""
        state = self.state[p]
        beta1, beta2 = group["betas"]
        rate = group["shampoo_beta"] if group["shampoo_beta"] >= 0 else beta2
        if "Q" not in state:  # the first step only starts the statistics
            accumulate_statistics(state["GG"], grad, rate)
            state["Q"] = [None if g is None else eigenbasis(g) for g in state["GG"]]
            return
        projected = project(grad, state["Q"])
        state["step"] += 1
        exp_avg.mul_(beta1).add_(projected, alpha=1.0 - beta1)
        exp_avg_sq.mul_(beta2).add_(projected.square(), alpha=1.0 - beta2)
        denom = exp_avg_sq.sqrt().add_(group["eps"])
        step_size = group["lr"]
        if group["correct_bias"]:
            step_size *= (1.0 - beta2 ** state["step"]) ** 0.5 / (1.0 - beta1 ** state["step"])
        block = local([p])[0]
        block.add_(project(exp_avg / denom, state["Q"], back=True)[rows], alpha=-step_size)
        if group["weight_decay"] > 0.0:
            block.add_(block, alpha=-group["lr"] * group["weight_decay"])
        # the statistics take this gradient; every precondition_frequency steps the bases follow them
        exp_avg = project(exp_avg, state["Q"], back=True)
        accumulate_statistics(state["GG"], grad, rate)
        if state["step"] % group["precondition_frequency"] == 0:
            state["Q"], exp_avg_sq = power_iteration_bases(state["GG"], state["Q"], exp_avg_sq)
        local([state["exp_avg_sq"]])[0].copy_(exp_avg_sq[rows])
        local([state["exp_avg"]])[0].copy_(project(exp_avg, state["Q"])[rows])


def accumulate_statistics(statistics: list[torch.Tensor | None], grad: torch.Tensor, rate: float) -> None:
    """L <- lerp(L, G G^T, 1 - rate) and R <- lerp(R, G^T G, 1 - rate) (g g^T for a rotated 1-D g)."""
    for dim, statistic in enumerate(statistics):
        if statistic is not None:
            other = [d for d in range(grad.ndim) if d != dim]
            statistic.lerp_(torch.tensordot(grad, grad, dims=[other, other]), 1.0 - rate)


def eigenbasis(statistic: torch.Tensor) -> torch.Tensor:
    """The eigenvectors of a statistic, by decreasing eigenvalue, computed in float32."""
    matrix = statistic.float()
    try:
        _, vectors = torch.linalg.eigh(matrix + 1e-30 * torch.eye(matrix.shape[0], device=matrix.device))
    except torch.linalg.LinAlgError:
        _, vectors = torch.linalg.eigh(matrix.double() + 1e-30 * torch.eye(matrix.shape[0], device=matrix.device))
        vectors = vectors.float()
    return torch.flip(vectors, [1]).to(statistic.dtype)


def power_iteration_bases(statistics: list[torch.Tensor | None], bases: list[torch.Tensor | None],
                          exp_avg_sq: torch.Tensor) -> tuple[list[torch.Tensor | None], torch.Tensor]:
    """New bases from the old: order each by its estimated eigenvalues (v reordered alike), one power
    iteration, QR; in float32."""
    new_bases = []
    for dim, (statistic, basis) in enumerate(zip(statistics, bases)):
        if statistic is None:
            new_bases.append(None)
            continue
        matrix, old = statistic.float(), basis.float()
        order = torch.argsort(torch.diag(old.T @ matrix @ old), descending=True)
        exp_avg_sq = exp_avg_sq.index_select(dim, order)
        q, _ = torch.linalg.qr(matrix @ old[:, order])
        new_bases.append(q.to(statistic.dtype))
    return new_bases, exp_avg_sq


def project(tensor: torch.Tensor, bases: list[torch.Tensor | None], back: bool = False) -> torch.Tensor:
    """Into the bases, Q_L^T X Q_R, or (back) out of them, Q_L X Q_R^T; a side without a basis stays.
    Each pass contracts the leading dimension and appends the result's, so two passes restore the order."""
    for basis in bases:
        if basis is None:
            tensor = tensor.permute(*range(1, tensor.ndim), 0)
        else:
            tensor = torch.tensordot(tensor, basis, dims=[[0], [1 if back else 0]])
    return tensor


def build_soap(model: nn.Module, hp: SOAPHyperparameters, loop: Loop) -> SOAP:
    groups = weight_decay_groups(model, decay_routing("soap", hp.decay_embeddings), hp.weight_decay)
    return SOAP(groups, lr=loop.learning_rate, betas=(hp.beta1, hp.beta2), shampoo_beta=hp.shampoo_beta, eps=hp.eps,
                precondition_frequency=hp.precondition_frequency, max_precond_dim=hp.max_precond_dim,
                precondition_1d=hp.precondition_1d)
