"""
Dion (Ahn, Xu et al., 2025, "Dion: Distributed Orthonormalized Updates", arXiv 2504.05295): a low-rank
orthonormal update from one step of power iteration on the momentum, with error feedback. Following the
authors' reference implementation (microsoft/dion at 0a059a4, dion/dion_reference.py, its single-device
path), for a matrix X of shape (m, n) with gradient G, momentum M and Q of shape (n, r):

    M = M + G
    P = orthonormal(M Q)              (m x r: the Q factor of M Q's QR decomposition)
    R = M^T P                         (n x r)
    M = M - (1 - mu) P R^T            (error feedback: what the update takes leaves the momentum)
    Q = R / (||R||_columns + eps)     (the next step's Q)
    X = X * (1 - lr * weight_decay) - lr * sqrt(m / n) * P Q^T

A wide matrix (m < n) runs transposed, as the reference's: on M^T, its Q of shape (m, r), the update
(P Q^T)^T. The rank r is rank_fraction * min(m, n), rounded up to a multiple of rank_multiple_of (at most
min(m, n)). If M is all zero, P is zero and Q stays (column-normalised). Q starts as a standard normal
matrix drawn from a generator seeded with the parameter's position in the optimizer (the same on every rank
and every run), and it is kept in the state (resumed from the checkpoint). The other parameters take AdamW
(the reference's scalar_opts.adamw_update, torch's arithmetic) with the same learning rate, betas
(beta1_1d, beta2_1d), eps, and no weight decay: the routing of the authors' train.py, the embeddings
and the head on the scalar optimizer, undecayed (our 1-D parameters, which their model has none of, with them).

orthonormal() is Cholesky QR, twice (CholeskyQR2), in float64: the Gram matrix P^T P (r x r), its Cholesky
factor T (upper triangular; shifted by float64's eps times its trace, so that a rank-deficient P does not
fail), P <- P T^{-1} (T's r x r inverse by a triangular solve, then a product); and again on the result.
That is the QR decomposition's Q factor up to the signs of its columns, which the update and the error
feedback do not see (P and R flip together): the reference's randomized Cholesky QR ("rcqr", its default: a
random sketch, Householder QR of the sketch, one Cholesky QR) gives the same Q to rounding, without a random
sketch or a QR of an m x r matrix.

The step is batched: the matrices of one shape run as one stack of products (torch.bmm), and the few
collectives each serve every matrix at once. Under data_parallel=fsdp each rank holds rows of X, G and M
(optim/sharding.py), and nothing m x n is ever gathered:
  - not transposed: P = M Q is row-local; the Grams of orthonormal() are sums over the row blocks (one
    all-reduce of every stack's r x r Grams, per Cholesky pass); R = M^T P is a sum over row blocks (one
    all-reduce); the error feedback and the update (P's rows times Q^T) are row-local;
  - transposed: P = M^T Q is a sum over row blocks (one all-reduce, of n x r matrices), orthonormalised whole
    on every rank; R = M P is row-local, and its rows join the all-reduce of the other R's (each rank adds
    its rows, the others zeros: exact) so that every rank holds the next Q whole; the error feedback and
    the update (Q's rows times P^T) are row-local.
So a step makes four all-reduces in all (P, two Grams, R), of r-wide matrices. Q is kept whole (plain
tensors, min(m, n) x r) on every rank. Under DDP every rank has the whole gradient and computes alone.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Iterable
from dataclasses import dataclass
from typing import ClassVar

import torch
import torch.distributed as dist
import torch.nn as nn

from optim.contract import Hyperparameters, Loop, MatrixProducts, Product, beta, setting
from optim.routing import Route, routed_params, routing
from optim.rules import ListwiseOptimizer, adamw_update
from optim.sharding import local, local_rows, shard_group

Tensors = list[torch.Tensor]
Q_SEED = 0  # Q's generator is seeded with this plus the parameter's position in the optimizer


@dataclass
class DionHyperparameters(Hyperparameters):
    mup_hidden_rule: ClassVar[str] = "spectral"  # (contract.Hyperparameters)
    # The authors' GPT recipe (configs/dion_160m.yaml): lr 0.02, mu 0.95, weight decay 0.01, rank fraction 0.5,
    # AdamW on the embeddings and the head with betas 0.9/0.95: their train.py writes betas=(0.95, 0.98) into those
    # groups, a key their Dion never reads (it reads beta1 and beta2, from its own default betas=(0.9, 0.95))
    weight_decay: float = setting(0.01, 0.0)  # the matrices' (the scalar optimizer's parameters: none)
    dion_momentum: float = beta(0.95)  # mu
    rank_fraction: float = setting(0.5, 0.0, 1.0, low_open=True)  # r / min(m, n)
    rank_multiple_of: int = setting(1, 1)  # r rounded up to a multiple of this
    dion_eps: float = setting(1e-8, 0.0)  # Q's column normalisation's epsilon (and the AdamW's eps)
    beta1_1d: float = beta(0.9)  # the AdamW's, on the embeddings, the head and the 1-D parameters
    beta2_1d: float = beta(0.95)

    state_keys = ("rank_fraction", "rank_multiple_of")

    def display_name(self) -> str:
        return "Dion"


def dion_rank(shape: tuple[int, ...], rank_fraction: float, rank_multiple_of: int) -> int:
    """r for a matrix of this shape, as the reference's _init_opt_state_dion."""
    m, n = shape
    r = rank_multiple_of * math.ceil(rank_fraction * min(m, n) / rank_multiple_of)
    return min(r, m, n)


def transposed(shape: tuple[int, ...]) -> bool:
    """Whether the reference runs the matrix transposed (wide: fewer rows than columns)."""
    return shape[0] < shape[1]


class Dion(MatrixProducts, ListwiseOptimizer):
    """Param groups say algorithm="dion" (2-D matrices) or "adamw" (anything). State per Dion matrix: momentum (in
    the parameter's layout: sharded under FSDP) and Q (whole on every rank); per AdamW parameter rules.adamw_update's
    step, exp_avg, exp_avg_sq."""

    side_state_sharded = False  # Q whole on every rank under FSDP (bench.memory)

    def __init__(self, params: Iterable, lr: float = 0.01, mu: float = 0.95, betas: tuple[float, float] = (0.9, 0.95),
                 weight_decay: float = 0.01, epsilon: float = 1e-8, rank_fraction: float = 1.0,
                 rank_multiple_of: int = 1, *, compiled: bool = False):
        """The reference's arguments and defaults (those of its single-device path)."""
        if not 0.0 < rank_fraction <= 1.0:
            raise ValueError(f"Invalid rank fraction: {rank_fraction}")
        self.compiled = compiled
        super().__init__(params, dict(lr=lr, mu=mu, betas=betas, weight_decay=weight_decay, epsilon=epsilon,
                                      rank_fraction=rank_fraction, rank_multiple_of=rank_multiple_of,
                                      algorithm="dion"))
        positions = [p for group in self.param_groups for p in group["params"]]
        self._position = {p: i for i, p in enumerate(positions)}

    def add_param_group(self, param_group: dict) -> None:
        algorithm = param_group.get("algorithm", "dion")
        if algorithm not in ("dion", "adamw"):
            raise ValueError(f"algorithm {algorithm!r}: choose dion or adamw")
        if algorithm == "dion" and any(p.ndim != 2 for p in param_group["params"]):
            raise ValueError("Dion takes 2-D matrices; put the other parameters in an algorithm='adamw' group")
        super().add_param_group(param_group)

    def products(self) -> list[Product]:
        """The batched products of one step on one process, a stack of same-shape matrices at a time: P, the two
        Grams, solves (each counted as a product of its size) and products of orthonormal() (float64), R, the error
        feedback and the update."""
        products = []
        for (shape, dtype, r), count in self._stack_shapes().items():
            m, n = shape
            rows, cols = (n, m) if transposed(shape) else (m, n)  # B = M or M^T: rows x cols
            products += [Product(count, rows, cols, r, dtype),  # P = B Q
                         Product(count, r, rows, r, torch.float64, 2.0),  # the Grams
                         Product(count, r, r, r, torch.float64, 2.0),  # T^{-1}: T's solve against I, as a product
                         Product(count, rows, r, r, torch.float64, 2.0),  # P T^{-1}
                         Product(count, cols, rows, r, dtype),  # R = B^T P
                         Product(count, m, r, n, dtype, 2.0)]  # the error feedback, the update
        return products

    def _stack_shapes(self) -> dict[tuple, int]:
        """How many matrices of each (shape, dtype, rank) the Dion groups hold."""
        shapes: dict[tuple, int] = {}
        for group in self.param_groups:
            for p in group["params"] if group["algorithm"] == "dion" else ():
                key = (tuple(p.shape), p.dtype, dion_rank(p.shape, group["rank_fraction"], group["rank_multiple_of"]))
                shapes[key] = shapes.get(key, 0) + 1
        return shapes

    def update_groups(self, groups: list[tuple[dict, Tensors]]) -> None:
        stacks: dict[Hashable, tuple[dict, Tensors]] = {}
        for index, (group, params) in enumerate(groups):
            if group["algorithm"] == "adamw":
                adamw_update(self.state, params, group["lr"], group["betas"], group["epsilon"],
                             group["weight_decay"], amsgrad=False, compiled=self.compiled)
                continue
            for p in params:
                self._start_state(p, group)
                stacks.setdefault((index, tuple(p.shape), p.dtype), (group, []))[1].append(p)
        if stacks:
            dion_step_(list(stacks.values()), self.state)

    def _start_state(self, p: torch.Tensor, group: dict) -> None:
        state = self.state[p]
        if state:
            return
        state["momentum"] = torch.zeros_like(p, memory_format=torch.preserve_format)
        m, n = p.shape
        shape = (min(m, n), dion_rank(p.shape, group["rank_fraction"], group["rank_multiple_of"]))
        if p.device.type == "meta":
            state["Q"] = torch.empty(shape, dtype=p.dtype, device=p.device)
        else:
            generator = torch.Generator(p.device).manual_seed(Q_SEED + self._position[p])
            state["Q"] = torch.randn(shape, generator=generator, dtype=p.dtype, device=p.device)


# ----------------------------------------------------------------------------- the step


class Stack:
    """The matrices of one shape in one param group: their local rows of M stacked (B, rows, n) and their Q
    (B, min(m, n), r), whole; and the state tensors (momenta, Qs) the step writes them back to."""

    def __init__(self, group: dict, params: Tensors, state: dict):
        self.group, self.params = group, params
        self.shape = tuple(params[0].shape)
        self.transposed = transposed(self.shape)
        self.rows = local_rows(params[0])
        self.momenta = local([state[p]["momentum"] for p in params])
        self.Qs = [state[p]["Q"] for p in params]
        self.M = torch.stack(self.momenta)
        self.Q = torch.stack(self.Qs)


def dion_step_(stacks: list[tuple[dict, Tensors]], state: dict) -> None:
    """One Dion step of every matrix, stack by stack, with one all-reduce per phase for all of them under FSDP."""
    group = shard_group([p for _, params in stacks for p in params])
    for _, params in stacks:  # M <- M + G
        torch._foreach_add_(local([state[p]["momentum"] for p in params]), local([p.grad for p in params]))
    stacks = [Stack(g, params, state) for g, params in stacks]
    # P = B Q: row-local (M Q), or a sum over row blocks (M^T Q, transposed)
    Ps = [s.M.mT @ s.Q[:, s.rows] if s.transposed else s.M @ s.Q for s in stacks]
    all_reduce_([P for P, s in zip(Ps, stacks) if s.transposed], group)
    # orthonormal(P): P whole on every rank (transposed) or its rows (reduce the Grams)
    sharded = [not s.transposed and group is not None for s in stacks]
    Ps, nonzero = cholesky_qr2(Ps, sharded, group)
    # R = B^T P: a sum over row blocks (M^T P), or row-local (M P, transposed: into zeros, reduced whole)
    Rs = []
    for s, P in zip(stacks, Ps):
        if s.transposed:
            R = torch.zeros(s.Q.shape, dtype=P.dtype, device=P.device)
            R[:, s.rows] = s.M @ P
        else:
            R = s.M.mT @ P
        Rs.append(R)
    all_reduce_(Rs, group)
    for s, P, R, keep in zip(stacks, Ps, Rs, nonzero):
        # an all-zero M: P = 0, and Q stays (the reference's fix_all_zero_or_nan)
        P, R = P.nan_to_num() * keep, R.nan_to_num() * keep + s.Q * ~keep
        lr, mu = s.group["lr"], s.group["mu"]
        # error feedback: M <- M - (1 - mu) P R^T (transposed: R's rows times P^T)
        if s.transposed:
            s.M.baddbmm_(R[:, s.rows], P.mT, alpha=-(1.0 - mu))
        else:
            s.M.baddbmm_(P, R.mT, alpha=-(1.0 - mu))
        torch._foreach_copy_(s.momenta, list(s.M.unbind(0)))
        # Q <- R / (||R||_columns + eps), in float32 at least
        R = R.to(torch.promote_types(R.dtype, torch.float32))
        Q = (R / (torch.linalg.vector_norm(R, dim=1, keepdim=True) + s.group["epsilon"])).to(P.dtype)
        torch._foreach_copy_(s.Qs, list(Q.unbind(0)))
        # X <- X (1 - lr wd) - lr sqrt(m / n) P Q^T (transposed: Q's rows times P^T)
        update = Q[:, s.rows] @ P.mT if s.transposed else P @ Q.mT
        scale = lr * math.sqrt(s.shape[0] / s.shape[1])
        blocks = local(s.params)
        torch._foreach_mul_(blocks, 1.0 - lr * s.group["weight_decay"])
        torch._foreach_add_(blocks, list(update.unbind(0)), alpha=-scale)


def cholesky_qr2(Ps: Tensors, sharded: list[bool], group: dist.ProcessGroup | None
                 ) -> tuple[Tensors, list[torch.Tensor]]:
    """Each stack of P (B, rows, r) orthonormalised by two passes of Cholesky QR in float64, in P's dtype; and
    whether each matrix's P was not all zero ((B, 1, 1) booleans). A sharded P is this rank's rows of it: its
    Grams are summed over the ranks (one all-reduce per pass for all of them)."""
    dtypes, Ps = [P.dtype for P in Ps], [P.double() for P in Ps]
    nonzero = []
    for first in (True, False):
        grams = [P.mT @ P for P in Ps]
        all_reduce_([G for G, rows in zip(grams, sharded) if rows], group)
        for i, G in enumerate(grams):
            trace = G.diagonal(dim1=-2, dim2=-1).sum(-1)[:, None, None]
            if first:
                nonzero.append(trace > 0)
            G.diagonal(dim1=-2, dim2=-1).add_(trace[..., 0] * torch.finfo(torch.float64).eps)
            T, _ = torch.linalg.cholesky_ex(G, upper=True)
            identity = torch.eye(T.shape[-1], dtype=T.dtype, device=T.device).expand_as(T)
            Ps[i] = Ps[i] @ torch.linalg.solve_triangular(T, identity, upper=True)  # P T^{-1}: a product
    return [P.to(dtype) for P, dtype in zip(Ps, dtypes)], nonzero


def all_reduce_(tensors: Tensors, group: dist.ProcessGroup | None) -> None:
    """Sum each tensor over the group's ranks, in place, in one all-reduce for all of them (of one dtype);
    nothing without a group."""
    if group is None or not tensors:
        return
    flat = torch.cat([t.reshape(-1) for t in tensors])
    dist.all_reduce(flat, group=group)
    parts = flat.split([t.numel() for t in tensors])
    torch._foreach_copy_(tensors, [part.view_as(t) for part, t in zip(parts, tensors)])


# Their train.py: the blocks' matrices on Dion (decayed); the embeddings and the head on the scalar optimizer, at
# the same learning rate, undecayed; our 1-D parameters (their model has none) with them.
DION_ROUTING = routing(Route("dion", True), Route("adamw", False), Route("adamw", False))


def build_dion(model: nn.Module, hp: DionHyperparameters, loop: Loop) -> Dion:
    groups = [dict(params=params, algorithm=route.rule, weight_decay=hp.weight_decay if route.decay else 0.0)
              for route, params in routed_params(model, DION_ROUTING)]
    return Dion(groups, lr=loop.learning_rate, mu=hp.dion_momentum, betas=(hp.beta1_1d, hp.beta2_1d),
                weight_decay=hp.weight_decay, epsilon=hp.dion_eps, rank_fraction=hp.rank_fraction,
                rank_multiple_of=hp.rank_multiple_of, compiled=loop.compiled)
