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

The step is batched: the parameters of one shape, rotated on the same sides (of one dtype and device, at
the same step) are stacked, and each stack runs as one chain of batched products (the projections, the
statistics, eigh, the power iteration and QR), not one per matrix: GPT-2 small's 50 matrices are 6
stacks (runs of at most STACK_ELEMENTS). A stack only batches the computation: every matrix keeps its own
statistics, bases, eigenvalue order and moments. m and v are updated in place as foreach ops, and the
parameters with no rotated side take plain Adam the same way. products() lists the batched products one
step performs, from which the benchmarks count its floor. Each stack's statistics and bases are kept as one tensor
per side, of which every matrix's state entries (L, R, Q_L, Q_R) are views: the products take them as they are, the
statistics are accumulated by one lerp per side, and a refresh makes the new bases the stack: no state is copied
into a stack each step (after a checkpoint's restore, once: stack_of).

Where we differ: parameters of more than 2 dimensions and merge_dims / data_format are not supported
(a GPT has none); the statistics L, R are kept in the parameter's dtype (the reference's are float32,
which fails for float64 or bf16 parameters; for float32 ones it is the same). And the reference carries m
out of the bases and back into them on every step (m <- Q_L^T (Q_L m Q_R^T) Q_R, in update_preconditioner),
where only the steps that change the bases need it: with Q unchanged, Q^T Q = I, and the round trip gives m
back up to the rounding of its two products and of Q's orthogonality, float32's (eigh and QR run in
float32). We make it only on the steps that refresh the bases, every precondition_frequency steps, which
saves two model-sized products per rotated side on the others. Float64 parameters keep it on every step:
there Q^T Q is 1e-7 from I, far above float64's rounding, and the reference's round trip does move m
(round_trip_is_rounding). The optimizer state is a few matrices per parameter (L, R, Q_L, Q_R), which the
checkpoint holds.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass

import torch
import torch.nn as nn

from errors import ConfigError
from optim.adamw import decay_routing
from optim.contract import Hyperparameters, Loop, MatrixProducts, Product, beta, setting
from optim.routing import weight_decay_groups
from optim.rules import GroupwiseOptimizer
from optim.sharding import gather_whole, local, local_rows

# Elements of one stack at most (a run of whole parameters, each counted with its statistics, n^2 per rotated
# side): it bounds the step's temporaries, 2 times this on most steps and 4 on a refresh step (measured; 4 GiB
# in float32), where GPT-2 XL's 48 (6400, 1600) matrices with their 6400 x 6400 statistics would make 10 GiB
# each. GPT-2 small's largest stack, its 12 (3072, 768) matrices, is 148M.
STACK_ELEMENTS = 2**28

Tensors = list[torch.Tensor]
Bases = list[torch.Tensor | None]  # per side of a stack: its bases or statistics (batch, n, n), or None (not rotated)


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


class SOAP(MatrixProducts, GroupwiseOptimizer):
    """Under data_parallel=fsdp (optim/sharding.py) p, its gradient, m and v are sharded by rows, and the
    statistics and bases need whole gradients: every rank gathers the gradient, m and v of each matrix with
    a rotated side (one all-gather for all of them, each step), runs the step on them as one process does,
    keeping L, R, Q_L, Q_R whole (plain tensors), and keeps its rows of p, m and v. The products run on whole
    matrices, in the same stacks on every rank, and each rank takes its rows, so that they round as one
    process's do: a product's rows computed alone need not (a rotated 1-D parameter's differed by 1e-7). A
    parameter with no rotated side (a 1-D one without precondition_1d: plain Adam) stays local. Unsharded,
    the same code runs with no communication.

    State per parameter p: step, exp_avg (m) and exp_avg_sq (v), in p's layout (in the rotated coordinates),
    GG = [L or None, R or None] and, from the first step, Q = [Q_L or None, Q_R or None] (one entry each for a
    1-D parameter; None where the side is not rotated). The matrices of L, R, Q_L and Q_R are views of their stack's
    tensor (stack_of); the state_dict holds them per parameter (torch.save writes their stack's storage once, DCP
    each view alone), and after a restore the first step stacks them again, once."""

    side_state_sharded = False  # L, R, Q_L, Q_R whole on every rank under FSDP (bench.memory)

    def __init__(self, params: Iterable, lr: float = 3e-3, betas: tuple[float, float] = (0.95, 0.95),
                 shampoo_beta: float = -1, eps: float = 1e-8, weight_decay: float = 0.01,
                 precondition_frequency: int = 10, max_precond_dim: int = 10000, precondition_1d: bool = False,
                 correct_bias: bool = True):
        super().__init__(params, dict(lr=lr, betas=betas, shampoo_beta=shampoo_beta, eps=eps,
                                      weight_decay=weight_decay, precondition_frequency=precondition_frequency,
                                      max_precond_dim=max_precond_dim, precondition_1d=precondition_1d,
                                      correct_bias=correct_bias))

    def products(self) -> list[Product]:
        """The batched products of one step on one process, a stack at a time as update_groups runs them:
        stack_products of each group's stacks, by shape and rotated sides."""
        products = []
        for group in self.param_groups:
            sides = {p: rotated_sides(p.shape, group) for p in group["params"]}
            for stack in stacks(group["params"], lambda p: (tuple(p.shape), sides[p], p.dtype),
                                lambda p: stack_elements(p.shape, sides[p])):
                p = stack[0]
                if any(sides[p]):
                    products += stack_products(len(stack), tuple(p.shape), sides[p], p.dtype,
                                               group["precondition_frequency"])
        return products

    def update_groups(self, groups: list[tuple[dict, Tensors]]) -> None:
        for group, params in groups:
            for p in params:
                self._start_state(p, group)
        # every rotated parameter's gradient, m and v whole, in one all-gather for all of them
        rotated = [p for _, params in groups for p in params if any(s is not None for s in self.state[p]["GG"])]
        gathered = gather_whole([t for p in rotated for t in (p.grad, *self._moments(p))])
        whole = {p: gathered[3 * i: 3 * i + 3] for i, p in enumerate(rotated)}
        for group, params in groups:
            for stack in stacks([p for p in params if p in whole], self._stack_key, self._stack_elements):
                self._rotated_step(stack, [whole[p] for p in stack], group)
            for run in stacks([p for p in params if p not in whole], self._stack_key, lambda p: 0):
                self._adam_step(run, group)

    def _start_state(self, p: torch.Tensor, group: dict) -> None:
        if p.ndim > 2:
            raise ValueError(f"SOAP here takes 1-D and 2-D parameters; got shape {tuple(p.shape)}")
        if not self.state[p]:
            self.state[p].update(step=0, exp_avg=torch.zeros_like(p.grad), exp_avg_sq=torch.zeros_like(p.grad),
                                 GG=[torch.zeros(n, n, dtype=p.dtype, device=p.device) if rotated else None
                                     for n, rotated in zip(p.shape, rotated_sides(p.shape, group))])

    def _moments(self, p: torch.Tensor) -> Tensors:
        return [self.state[p]["exp_avg"], self.state[p]["exp_avg_sq"]]

    def _stack_key(self, p: torch.Tensor) -> Hashable:
        """What the parameters of one stack share: shape, rotated sides, dtypes, device, and where they are in
        the schedule (the first step, the step count)."""
        state = self.state[p]
        sides = tuple(s is not None for s in state["GG"])
        return tuple(p.shape), sides, p.dtype, p.grad.dtype, p.device, "Q" in state, state["step"]

    def _stack_elements(self, p: torch.Tensor) -> int:
        return stack_elements(p.shape, [s is not None for s in self.state[p]["GG"]])

    def _rotated_step(self, params: Tensors, whole: list[Tensors], group: dict) -> None:
        """One step of a stack of parameters with a rotated side, from their gradients, m and v, whole, to their
        rows of p, m and v. A 1-D parameter runs as an (n, 1) matrix, its right side not rotated. The products
        run on stacks; m and v are updated in place, whole (the state itself when it is not sharded)."""
        states = [self.state[p] for p in params]
        grads, exp_avgs, exp_avg_sqs = (list(tensors) for tensors in zip(*whole))
        grad = stacked(grads)
        sides = [side for side, statistic in enumerate(states[0]["GG"]) if statistic is not None]
        statistics: Bases = [None] * len(states[0]["GG"])
        for side in sides:
            statistics[side] = stack_of([s["GG"] for s in states], side)
        rate = group["shampoo_beta"] if group["shampoo_beta"] >= 0 else group["betas"][1]
        if "Q" not in states[0]:  # the first step only starts the statistics, and the bases from them
            accumulate_statistics(statistics, grad, rate)
            for state in states:
                state["Q"] = [None] * len(statistics)
            for side in sides:
                share([s["Q"] for s in states], side, eigenbases(statistics[side]))
            return
        bases: Bases = [None] * len(statistics)
        for side in sides:
            bases[side] = stack_of([s["Q"] for s in states], side)
        for state in states:
            state["step"] += 1
        updates = adam_updates(in_shapes(rotate(grad, bases), params), exp_avgs, exp_avg_sqs, group)
        updates = in_shapes(rotate(stacked(updates), bases, back=True), params)
        apply_updates(local(params), [u[local_rows(p)] for u, p in zip(updates, params)], group, states[0]["step"])
        # the statistics take this gradient; every precondition_frequency steps the bases follow them, and m
        # is carried from the old bases to the new (on other steps, the same bases: see round_trip_is_rounding)
        accumulate_statistics(statistics, grad, rate)
        refresh = states[0]["step"] % group["precondition_frequency"] == 0
        if refresh or not round_trip_is_rounding(grad.dtype):
            exp_avg = rotate(stacked(exp_avgs), bases, back=True)
            if refresh:
                bases, exp_avg_sq = refreshed_bases(statistics, bases, stacked(exp_avg_sqs))
                torch._foreach_copy_(exp_avg_sqs, in_shapes(exp_avg_sq, params))
                for side in sides:
                    bases[side] = share([s["Q"] for s in states], side, bases[side])
            torch._foreach_copy_(exp_avgs, in_shapes(rotate(exp_avg, bases), params))
        self._keep_own_rows(params, exp_avgs, exp_avg_sqs)

    def _keep_own_rows(self, params: Tensors, exp_avgs: Tensors, exp_avg_sqs: Tensors) -> None:
        """Under FSDP, this rank's rows of the whole m and v into its blocks of them."""
        if exp_avgs[0] is self.state[params[0]]["exp_avg"]:
            return  # not sharded: m and v are the state itself, updated in place
        blocks = local([moment for p in params for moment in self._moments(p)])
        torch._foreach_copy_(blocks, [whole[local_rows(p)] for p, moments in zip(params, zip(exp_avgs, exp_avg_sqs))
                                      for whole in moments])

    def _adam_step(self, params: Tensors, group: dict) -> None:
        """Plain Adam on the local blocks of parameters with no rotated side, as the reference's step with no
        bases (its first step, too, moves nothing), in foreach ops."""
        states = [self.state[p] for p in params]
        if "Q" not in states[0]:
            for p, state in zip(params, states):
                state["Q"] = [None] * p.ndim
            return
        for state in states:
            state["step"] += 1
        grads = local([p.grad for p in params])
        exp_avgs, exp_avg_sqs = (local(list(moments)) for moments in zip(*[self._moments(p) for p in params]))
        apply_updates(local(params), adam_updates(grads, exp_avgs, exp_avg_sqs, group), group, states[0]["step"])


def rotated_sides(shape: tuple[int, ...], group: dict) -> tuple[bool, ...]:
    """Which sides of a parameter of this shape have a basis: those up to max_precond_dim, of a matrix (or of
    a vector with precondition_1d)."""
    return tuple(n <= group["max_precond_dim"] and (len(shape) > 1 or group["precondition_1d"]) for n in shape)


def stack_elements(shape: tuple[int, ...], sides: Iterable[bool]) -> int:
    """What a parameter adds to its stack's size: its elements and its statistics'."""
    return math.prod(shape) + sum(n * n for n, rotated in zip(shape, sides) if rotated)


def stacks(params: Tensors, key: Callable[[torch.Tensor], Hashable],
           elements: Callable[[torch.Tensor], int]) -> list[Tensors]:
    """The parameters that run as one stack: those of one key, in order, in runs of at most STACK_ELEMENTS
    elements (a run holds at least one parameter). The same runs on every rank: keys and sizes are of whole
    parameters."""
    by_key: dict[Hashable, Tensors] = {}
    for p in params:
        by_key.setdefault(key(p), []).append(p)
    runs = []
    for members in by_key.values():
        runs.append([])
        size = 0
        for p in members:
            if runs[-1] and size + elements(p) > STACK_ELEMENTS:
                runs.append([])
                size = 0
            runs[-1].append(p)
            size += elements(p)
    return runs


def stack_products(batch: int, shape: tuple[int, ...], sides: tuple[bool, ...], dtype: torch.dtype,
                   precondition_frequency: int) -> list[Product]:
    """The batched products of one step of a stack of `batch` parameters of this shape (n x k; a vector n x 1):
    every step the statistics G G^T and G^T G, G into the bases (Q_L^T G, then . Q_R) and the update out of them
    (Q_L U, . Q_R^T), in the parameters' dtype; on refresh steps, one in precondition_frequency, m out of the old
    bases and into the new ones, and per side the power iteration S Q in float32, whose product also gives the
    estimated eigenvalues diag(Q^T S Q) (as sum(Q * S Q) over rows, no product of its own); for float64
    parameters m's round trip every step (round_trip_is_rounding). Not counted: the first step (statistics and
    eigh, once), eigh and QR (not products)."""
    n, k = shape if len(shape) == 2 else (shape[0], 1)
    left, right = sides[0], len(sides) > 1 and sides[1]
    statistics = [(n, k, n)] * left + [(k, n, k)] * right
    rotations = [(n, n, k)] * left + [(n, k, k)] * right  # rows, inner, cols: one way, into or out of the bases
    power_iterations = [(n, n, n)] * left + [(k, k, k)] * right
    refresh = 1.0 / precondition_frequency
    round_trip = refresh if round_trip_is_rounding(dtype) else 1.0
    return ([Product(batch, *s, dtype) for s in statistics + rotations * 2]
            + [Product(batch, *s, dtype, round_trip) for s in rotations * 2]
            + [Product(batch, *s, torch.float32, refresh) for s in power_iterations])


def round_trip_is_rounding(dtype: torch.dtype) -> bool:
    """Whether m's round trip through unchanged bases, Q_L^T (Q_L m Q_R^T) Q_R, is the identity to the rounding
    of m's dtype. The bases are orthogonal to float32's rounding (eigh and QR run in float32), which is the
    rounding of the products in float32 or narrower; in float64, Q^T Q is 1e-7 from I, far above float64's
    rounding, and the reference's round trip on every step moves m by that much (without it, the float64
    comparison with the reference in tests/test_optim_soap.py ends 6e-7 apart, against its 1e-9), so float64
    parameters keep it."""
    return torch.finfo(dtype).eps >= torch.finfo(torch.float32).eps


def stacked(tensors: Tensors) -> torch.Tensor:
    """Tensors of one shape as a stack of matrices (batch, n, k), vectors as (batch, n, 1); one alone as a view
    of it, not a copy."""
    stack = torch.stack(tensors) if len(tensors) > 1 else tensors[0].unsqueeze(0)
    return stack if stack.ndim == 3 else stack.unsqueeze(-1)


def in_shapes(stack: torch.Tensor, params: Tensors) -> Tensors:
    """Each parameter's matrix of a stack, in its parameter's shape (views)."""
    return list(stack.view(len(params), *params[0].shape).unbind(0))


def rotate(stack: torch.Tensor, bases: Bases, back: bool = False) -> torch.Tensor:
    """Into the bases, Q_L^T X Q_R, or (back) out of them, Q_L X Q_R^T, batched; a side without a basis stays."""
    left, right = bases[0], bases[1] if len(bases) > 1 else None
    if left is not None:
        stack = (left if back else left.mT) @ stack
    if right is not None:
        stack = stack @ (right.mT if back else right)
    return stack


def adam_updates(grads: Tensors, exp_avgs: Tensors, exp_avg_sqs: Tensors, group: dict) -> Tensors:
    """m and v take the (projected) gradients, in place; the updates m / (sqrt(v) + eps)."""
    beta1, beta2 = group["betas"]
    torch._foreach_mul_(exp_avgs, beta1)
    torch._foreach_add_(exp_avgs, grads, alpha=1.0 - beta1)
    torch._foreach_mul_(exp_avg_sqs, beta2)
    torch._foreach_add_(exp_avg_sqs, torch._foreach_mul(grads, grads), alpha=1.0 - beta2)
    denominators = torch._foreach_sqrt(exp_avg_sqs)
    torch._foreach_add_(denominators, group["eps"])
    return torch._foreach_div(exp_avgs, denominators)


def apply_updates(blocks: Tensors, updates: Tensors, group: dict, step: int) -> None:
    """p <- p - step_size * update, then p <- p - lr * weight_decay * p (decoupled, after the step)."""
    beta1, beta2 = group["betas"]
    step_size = group["lr"]
    if group["correct_bias"]:
        step_size *= (1.0 - beta2**step) ** 0.5 / (1.0 - beta1**step)
    torch._foreach_add_(blocks, updates, alpha=-step_size)
    if group["weight_decay"] > 0.0:
        torch._foreach_add_(blocks, blocks, alpha=-group["lr"] * group["weight_decay"])


def stack_of(entries: list[list], side: int) -> torch.Tensor:
    """The matrices entries[i][side] (each parameter's state list) as one stack (batch, n, n): the stack they are
    views of, in order, when they are (share made them so), else a new one, which the entries are then made views
    of (the first step's statistics, or what a checkpoint restored): one copy, not one per step."""
    matrices = [e[side] for e in entries]
    base = matrices[0]._base
    if (base is not None and base.shape == (len(matrices), *matrices[0].shape) and base.is_contiguous()
            and all(m._base is base and m.storage_offset() == base.storage_offset() + i * base.stride(0)
                    for i, m in enumerate(matrices))):
        return base
    return share(entries, side, torch.stack(matrices))


def share(entries: list[list], side: int, stack: torch.Tensor) -> torch.Tensor:
    """Each entries[i][side] made a view of stack[i]; the stack, contiguous and a tensor of its own (the products
    then round as they did on the stacked copies, and stack_of knows it)."""
    if stack._base is not None or not stack.is_contiguous():
        stack = stack.clone(memory_format=torch.contiguous_format)
    for e, view in zip(entries, stack.unbind(0)):
        e[side] = view
    return stack


def accumulate_statistics(statistics: Bases, grad: torch.Tensor, rate: float) -> None:
    """L <- lerp(L, G G^T, 1 - rate) and R <- lerp(R, G^T G, 1 - rate) for a stack of gradients (g g^T for a
    rotated 1-D g), into the stacks of L and R (each parameter's own, as views)."""
    for side, stack in enumerate(statistics):
        if stack is not None:
            stack.lerp_(grad @ grad.mT if side == 0 else grad.mT @ grad, 1.0 - rate)


def eigenbases(statistics: torch.Tensor) -> torch.Tensor:
    """The eigenvectors of a stack of statistics, by decreasing eigenvalue, computed in float32 (in float64
    if that fails, for all of the stack)."""
    matrix = statistics.float()
    shift = 1e-30 * torch.eye(matrix.shape[-1], device=matrix.device)
    try:
        _, vectors = torch.linalg.eigh(matrix + shift)
    except torch.linalg.LinAlgError:
        _, vectors = torch.linalg.eigh(matrix.double() + shift)
        vectors = vectors.float()
    return torch.flip(vectors, [-1]).to(statistics.dtype)


def refreshed_bases(statistics: Bases, bases: Bases,
                    exp_avg_sq: torch.Tensor) -> tuple[Bases, torch.Tensor]:
    """New bases from the old, for a stack: order each by its estimated eigenvalues diag(Q^T S Q) (v reordered
    alike), one power iteration S Q, QR; in float32. S Q serves both: the estimates are sum(Q * S Q) over rows,
    and S (Q P) = (S Q) P for the ordering P."""
    new_bases = []
    for side, (stack, basis) in enumerate(zip(statistics, bases)):
        if stack is None:
            new_bases.append(None)
            continue
        old = basis.float()
        power = stack.float() @ old
        order = torch.argsort((old * power).sum(-2), dim=-1, descending=True)  # (batch, n)
        index = order[:, :, None] if side == 0 else order[:, None, :]  # along v's rows, or its columns
        exp_avg_sq = exp_avg_sq.gather(side + 1, index.expand_as(exp_avg_sq))
        power = power.gather(2, order[:, None, :].expand_as(power))  # S Q P, the columns in their new order
        new_bases.append(torch.linalg.qr(power).Q.to(basis.dtype))
    return new_bases, exp_avg_sq


def build_soap(model: nn.Module, hp: SOAPHyperparameters, loop: Loop) -> SOAP:
    groups = weight_decay_groups(model, decay_routing("soap", hp.decay_embeddings), hp.weight_decay)
    return SOAP(groups, lr=loop.learning_rate, betas=(hp.beta1, hp.beta2), shampoo_beta=hp.shampoo_beta, eps=hp.eps,
                precondition_frequency=hp.precondition_frequency, max_precond_dim=hp.max_precond_dim,
                precondition_1d=hp.precondition_1d)
