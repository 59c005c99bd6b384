"""
Kron: PSGD with Kronecker-factored preconditioners (Li, 2018, "Preconditioned Stochastic Gradient Descent"), as
Wen et al.'s benchmark runs it: levanter's Kron (stanford-crfm/levanter, src/levanter/optim/kron.py, its
KronConfig defaults), the JAX PSGD Kron with its parameters cut into blocks. For each parameter, at step t:

    m = beta1 m + (1 - beta1) g;   M = m / (1 - beta1^t)
    M is laid out as blocks (layout below), each block with a preconditioner Q_d per dimension d, upper
    triangular (Q_d of side n) or diagonal (q_d of n numbers); on update steps, with V ~ N(0, 1) over the blocks:
        G = M + 2^-11.5 mean|M| V                       (the mean over the parameter's padded blocks)
        A = Q_1 G Q_2^T;   B = Q_1^-T V Q_2^-1          (a diagonal side multiplies or divides by q)
        triangular Q_d:  Q_d -= precond_lr triu(T_A - T_B) Q_d / (lb(T_A + T_B) + tiny)
        diagonal q_d:    q_d -= precond_lr (T_A - T_B) q_d / (max|T_A + T_B| + tiny)
      with T_A = A A^T (d = 1) or A^T A (d = 2), or for a diagonal side the sums of A^2 over the other
      dimension (the same of B for T_B), lb a cheap lower bound of a symmetric matrix's spectral norm
    P = Q_1^T Q_1 M Q_2^T Q_2  (the undamped M, the new Q's);   P = P / max(1, rms(P) / 1.1)
    p = p - lr (P + weight_decay p)       (decay on the blocks' matrices: not on embeddings, norms, biases)

Layout: a dimension of size 1 or over kron_max_size_triangular, or any dimension of a vector, is diagonal; a
matrix whose two dimensions cost more than their product by levanter's heuristic (target 8192) is merged into
a vector (diagonal only if both were); a non-diagonal dimension over kron_block_size is cut into blocks of that
size, and every block is padded with zeros to a multiple of it in each dimension. Preconditioners start at
init_scale^(1/ndim) times the identity (or ones). Updates follow a counter: the update probability is 1 for
kron_update_prob_flat_start steps, then anneals as exp(-0.001 (t - flat_start)) to kron_update_prob_min, and a
step updates when the steps since the last update reach 1/probability; every 100th update first rebalances each
block's preconditioners to equal infinity norms. The loop's grad_clip is levanter's global clip (1.0).

The parameters whose blocks share a signature (the blocks' padded shape and diagonal sides) are preconditioned as
one stack, their blocks concatenated: one chain of batched products per signature (per BATCH_ELEMENTS of blocks),
not one per parameter. Every block gets the numbers it would alone, whatever else is in its batch, and what spans
a parameter's blocks stays its own: the noise V, the damping's mean and the RMS clip. Under torch.distributed
each parameter's preconditioning runs on one owner rank (sharding.on_owner_ranks), which batches all the
parameters it owns: under FSDP the preconditioners are stored sharded over their blocks, so no rank holds every
preconditioner, and only its owner assembles a parameter's whole momentum and preconditioners; under DDP the
owner computes and broadcasts. The noise V is counter-based: each element's is a hash of (step, parameter index,
element index) turned normal by the inverse normal CDF, so any world size and any batching draws the same, and a
whole stack draws at once (levanter's comes from a JAX key split per step).
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Iterable
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.tensor import DTensor, Shard, distribute_tensor

from optim.adamw import decay_routing
from optim.contract import GroupState, Hyperparameters, Loop, MatrixProducts, Product, beta, positive, setting
from optim.routing import weight_decay_groups
from optim.rules import ListwiseOptimizer
from optim.sharding import local, on_owner_ranks

TINY = float(torch.finfo(torch.float32).tiny)
BALANCE_EVERY = 100  # updates between rebalancings
MERGE_TARGET = 8192  # levanter's target_merged_dim_size
# Elements of blocks preconditioned as one stack at most (runs of whole parameters): it bounds the owner's
# temporaries, a dozen or so stacks this size (6 GiB). GPT-2 small's matrices are one stack (85M elements); XL's
# on one rank would make stacks of 6.7 GiB each.
BATCH_ELEMENTS = 2**27


@dataclass
class KronHyperparameters(Hyperparameters):
    weight_decay: float = setting(0.1, 0.0)
    beta1: float = beta(0.9)
    kron_precond_lr: float = positive(0.1)
    kron_precond_init_scale: float = positive(1.0)
    kron_update_prob_min: float = setting(0.05, 0.0, 1.0, low_open=True)
    kron_update_prob_flat_start: int = setting(500, 0)
    kron_block_size: int = setting(256, 1)
    kron_max_size_triangular: int = setting(25000, 1)
    kron_merge_small_dims: bool = True

    state_keys = ("kron_block_size", "kron_max_size_triangular", "kron_merge_small_dims")

    def display_name(self) -> str:
        return "Kron"


@dataclass(frozen=True)
class Layout:
    """How one parameter is laid out as blocks: its (merged) shape, which dimensions are diagonal, each
    dimension's cut points, and the padded side of every block."""

    shape: tuple[int, ...]
    diagonal: tuple[bool, ...]
    pieces: tuple[tuple[int, ...], ...]  # each dimension's piece sizes
    padded: tuple[int, ...]

    @property
    def blocks(self) -> int:
        return math.prod(len(p) for p in self.pieces)

    @property
    def signature(self) -> tuple:
        """What parameters share to be preconditioned as one stack of blocks: the blocks' shape and diagonal sides."""
        return self.padded, self.diagonal


def _merge_cost(size: int) -> float:
    """levanter's cost of a dimension of this size against the merge target."""
    if size < MERGE_TARGET:
        return math.log2(MERGE_TARGET / size) + (100 * math.log2(1024 / size) if size < 1024 else 0.0)
    return 10 * math.log2(size / MERGE_TARGET) + (1000 * math.log2(size / 65536) if size > 65536 else 0.0)


def layout_of(shape: tuple[int, ...], block_size: int, max_size_triangular: int, merge: bool) -> Layout:
    diagonal = tuple(size == 1 or size > max_size_triangular or len(shape) < 2 for size in shape)
    if merge and len(shape) == 2 and _merge_cost(shape[0] * shape[1]) < _merge_cost(shape[0]) + _merge_cost(shape[1]):
        shape, diagonal = (shape[0] * shape[1],), (diagonal[0] and diagonal[1],)
    pieces = []
    for size, diag in zip(shape, diagonal):
        cut = [block_size] * ((size - 1) // block_size) + [size - block_size * ((size - 1) // block_size)]
        pieces.append(tuple(cut) if not diag and size > block_size else (size,))
    padded = tuple(-(-max(p) // block_size) * block_size for p in pieces)
    return Layout(tuple(shape), diagonal, tuple(pieces), padded)


def to_blocks(x: torch.Tensor, layout: Layout) -> torch.Tensor:
    """k parameter-shaped tensors stacked, x (k, *shape), as their zero-padded blocks: (k * blocks, *padded), each
    parameter's in row-major order. A dimension's pieces are consecutive and only its last is short, so padding
    each dimension at its end to (pieces x padded side) puts every block in place: one pad and one copy, whatever
    the number of blocks and parameters."""
    k, counts = len(x), [len(p) for p in layout.pieces]
    ends = [count * side - size for size, count, side in zip(layout.shape, counts, layout.padded)]
    x = F.pad(x.reshape(k, *layout.shape), [n for end in reversed(ends) for n in (0, end)])
    interleaved = [n for count, side in zip(counts, layout.padded) for n in (count, side)]
    order = [0, *range(1, 2 * len(counts), 2), *range(2, 2 * len(counts) + 1, 2)]  # the pieces, then the sides
    return x.reshape(k, *interleaved).permute(order).reshape(k * layout.blocks, *layout.padded)


def from_blocks(blocks: torch.Tensor, layout: Layout, shape: torch.Size) -> torch.Tensor:
    """to_blocks undone: the blocks of k parameters put back together and unpadded, (k, *shape)."""
    counts, dims, k = [len(p) for p in layout.pieces], len(layout.pieces), blocks.shape[0] // layout.blocks
    interleaved = [n for d in range(dims) for n in (1 + d, 1 + dims + d)]  # each dim's (count, side) together
    x = blocks.reshape(k, *counts, *layout.padded).permute([0, *interleaved])
    x = x.reshape(k, *[count * side for count, side in zip(counts, layout.padded)])
    return x[(slice(None), *[slice(0, size) for size in layout.shape])].reshape(k, *shape)


def _mix32(x: torch.Tensor) -> torch.Tensor:
    """Wellons's lowbias32 (hash-prospector), in place on int32 x read as unsigned 32-bit integers: a bijection
    whose every output bit depends on every input bit. int32 keeps the noise's passes over memory at half int64's;
    its products wrap modulo 2^32 as integer products do on CPUs and GPUs, and >> is arithmetic, so each shift is
    masked to the logical one."""
    x ^= (x >> 16).bitwise_and_(0xFFFF)
    x.mul_(0x21F0AAAD)
    x ^= (x >> 15).bitwise_and_(0x1FFFF)
    x.mul_(0x735A2D97)
    x ^= (x >> 15).bitwise_and_(0x1FFFF)
    return x


@functools.cache
def _numbering(indices: tuple[int, ...], counts: tuple[int, ...], rows: int,
               device: torch.device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """For a stack of the blocks of parameters `indices` (counts[k] blocks of `rows` rows each): each block's place
    in the list (blocks,), its parameter's index and the index of its first row within its parameter (blocks, 1,
    int32). Cached, made once per stack and device: a copy to the device each step would wait for it."""
    slot = torch.repeat_interleave(torch.arange(len(counts)), torch.tensor(counts))
    first = torch.cat([torch.arange(count) for count in counts]) * rows
    index = torch.tensor(indices)[slot, None]
    return slot.to(device), index.to(device, torch.int32), first[:, None].to(device, torch.int32)


def block_noise(step: int, indices: list[int], counts: list[int], padded: tuple[int, ...],
                device: torch.device) -> torch.Tensor:
    """The preconditioner update's V for a stack of the blocks of parameters `indices` (counts[k] blocks each,
    padding included), (blocks, *padded), each element's a function of (step, parameter index, element) alone: a
    counter-based hash to a uniform of 23 bits, made normal by the inverse CDF. Each row of a block (its last
    dimension) gets a key from (step, index, row within the parameter) by four rounds of _mix32, and each element
    one more of its row's key and its column; all of it exact integer arithmetic, then ndtri, a scalar kernel,
    element by element: a parameter draws the same whatever else is in its stack, on any world size."""
    rows, columns = math.prod(padded[:-1]), padded[-1]
    _, index, first = _numbering(tuple(indices), tuple(counts), rows, device)
    key = _mix32(_mix32(torch.full_like(index, step)) ^ index)  # (blocks, 1): the (step, parameter)'s
    row = _mix32((first + torch.arange(rows, device=device, dtype=torch.int32)) ^ key)
    row = _mix32(row.add_(key))  # (blocks, rows)
    # the columns spread by an odd multiplier, so that no two rows' keys make one row a permutation of the other
    column = torch.arange(columns, device=device, dtype=torch.int32).mul_(0x2545F491)
    h = _mix32(row[:, :, None] ^ column)
    uniform = (h >> 9).bitwise_and_(0x7FFFFF).float().add_(0.5).mul_(2.0**-23)  # the top 23 bits: in (0, 1), exactly
    return torch.special.ndtri(uniform).view(-1, *padded)


def kron_noise(step: int, index: int, shape: tuple[int, ...], device: torch.device) -> torch.Tensor:
    """The preconditioner update's V for parameter `index` at `step`, (blocks, *padded): block_noise's, alone."""
    return block_noise(step, [index], [shape[0]], tuple(shape[1:]), device)


def _lower_bound(s: torch.Tensor) -> torch.Tensor:
    """A cheap lower bound of each block's spectral norm, for symmetric s (blocks, n, n), as levanter's _lb."""
    top = s.abs().amax(dim=(1, 2))
    scaled = s / torch.where(top > 0, top, 1.0)[:, None, None]
    column = (scaled * scaled).sum(1).argmax(1)
    x = torch.einsum("bi,bij->bj", scaled[torch.arange(len(s)), :, column], scaled)
    x = x / x.norm(dim=1, keepdim=True).clamp_min(TINY)
    return torch.where(top > 0, top * torch.einsum("bj,bkj->bk", x, scaled).norm(dim=1), 0.0)


def _apply(q: torch.Tensor, diagonal: bool, x: torch.Tensor, dim: int, transpose: bool = False) -> torch.Tensor:
    """Blocks x (blocks, n1[, n2]) times a preconditioner along dimension `dim`: q x (q^T x with transpose) for
    dim 1, x q^T (x q with transpose) for dim 2; a diagonal q scales that dimension."""
    if diagonal:
        return x * (q.unsqueeze(2) if dim == 1 and x.dim() == 3 else q.unsqueeze(1) if dim == 2 else q)
    if dim == 2:
        return x @ (q if transpose else q.mT)
    m = q.mT if transpose else q
    if x.dim() == 3:
        return m @ x
    # Vector blocks as rows, x^T m^T with m^T contiguous: a stack of one column (m x) runs as another kernel than
    # a stack of several, so that a block's numbers would depend on what else is in its batch; rows do not.
    return (x.unsqueeze(1) @ m.mT.contiguous()).squeeze(1)


def _solve(q: torch.Tensor, diagonal: bool, x: torch.Tensor, dim: int) -> torch.Tensor:
    """q^-T x along dimension 1, x q^-1 along dimension 2 (q upper triangular); a diagonal q divides."""
    if diagonal:
        return _apply(1 / q, True, x, dim)
    if dim == 2:
        return torch.linalg.solve_triangular(q, x, upper=True, left=False)
    column = x if x.dim() == 3 else x.unsqueeze(2)
    solved = torch.linalg.solve_triangular(q.mT, column, upper=False)
    return solved if x.dim() == 3 else solved.squeeze(2)


def _balanced(qs: list[torch.Tensor]) -> list[torch.Tensor]:
    """Each block's preconditioners scaled to the geometric mean of their infinity norms (their product, the
    preconditioner, unchanged): levanter's rebalancing, which keeps the sides from drifting apart in scale."""
    norms = torch.stack([q.abs().flatten(1).amax(1) for q in qs])  # (dims, blocks)
    mean = norms.log().mean(0).exp()
    return [q * (mean / n).view(-1, *[1] * (q.dim() - 1)) for q, n in zip(qs, norms)]


def _statistics(x: torch.Tensor, dim: int) -> torch.Tensor:
    """T of blocks x along dimension `dim`, for a triangular side: x x^T (dim 1), x^T x (dim 2), the outer product
    of a vector block."""
    if x.dim() == 2:
        return x.unsqueeze(2) * x.unsqueeze(1)
    return x @ x.mT if dim == 1 else x.mT @ x


def _diagonal_statistics(x: torch.Tensor, dim: int) -> torch.Tensor:
    """The diagonal of T, for a diagonal side: the sums of x^2 over the other dimension (x^2 of a vector block)."""
    others = [k for k in range(1, x.dim()) if k != dim]
    return (x * x).sum(others) if others else x * x


def _updated(qs: list[torch.Tensor], diagonal: tuple[bool, ...], g: torch.Tensor, v: torch.Tensor,
             precond_lr: float) -> list[torch.Tensor]:
    """The preconditioners after one update from the damped G and the noise V, each block's from its own."""
    a, b = g, v
    for d, (q, diag) in enumerate(zip(qs, diagonal)):
        a = _apply(q, diag, a, d + 1)
        b = _solve(q, diag, b, d + 1)
    new = []
    for d, (q, diag) in enumerate(zip(qs, diagonal)):
        if diag:
            ta, tb = _diagonal_statistics(a, d + 1), _diagonal_statistics(b, d + 1)
            denominator = (ta + tb).abs().flatten(1).amax(1).view(-1, 1) + TINY
            new.append(q - precond_lr * (ta - tb) * q / denominator)
        else:
            ta, tb = _statistics(a, d + 1), _statistics(b, d + 1)
            step_size = precond_lr / (_lower_bound(ta + tb) + TINY)
            new.append(q - step_size.view(-1, 1, 1) * (torch.triu(ta - tb) @ q))
    return new


def _preconditioned(blocks: torch.Tensor, qs: list[torch.Tensor], diagonal: tuple[bool, ...]) -> torch.Tensor:
    """Q_1^T Q_1 M Q_2^T Q_2 of blocks M."""
    for d, (q, diag) in enumerate(zip(qs, diagonal)):
        blocks = _apply(q, diag, _apply(q, diag, blocks, d + 1), d + 1, transpose=True)
    return blocks


def batches(layouts: list[Layout]) -> list[list[int]]:
    """The parameters (indices into layouts) preconditioned as one stack of blocks: those of one signature, those
    of one layout adjacent (cut into blocks together), in runs of at most BATCH_ELEMENTS elements of blocks (a run
    holds at least one parameter)."""
    signatures: dict[tuple, dict[Layout, list[int]]] = {}
    for i, layout in enumerate(layouts):
        signatures.setdefault(layout.signature, {}).setdefault(layout, []).append(i)
    runs = []
    for by_layout in signatures.values():
        members = [i for same in by_layout.values() for i in same]
        runs.append([])
        elements = 0
        for i in members:
            size = layouts[i].blocks * math.prod(layouts[i].padded)
            if runs[-1] and elements + size > BATCH_ELEMENTS:
                runs.append([])
                elements = 0
            runs[-1].append(i)
            elements += size
    return runs


def precondition(momenta: list[torch.Tensor], qs: list[list[torch.Tensor]], layouts: list[Layout], step: int,
                 indices: list[int], update: bool, balance: bool, precond_lr: float,
                 debias: float = 1.0) -> list[list[torch.Tensor]]:
    """The Kron step of parameters of one signature, on whole tensors (on their owner rank): each one's [P, *new
    qs], from its momentum m (M = m / debias). Their blocks are stacked as one, so that one chain of batched
    products serves them all; every block gets the numbers it would alone, and what spans a parameter's blocks
    stays its own: its noise (drawn by its index), its damping (over its padded blocks) and its clip (over its P).
    The parameters of one layout (adjacent, as batches orders them) are cut into blocks and put back together as
    one tensor (a merged one in its merged shape)."""
    diagonal, padded = layouts[0].diagonal, layouts[0].padded
    counts = [layout.blocks for layout in layouts]
    shapes = [(layout, len(list(same))) for layout, same in itertools.groupby(layouts)]  # (layout, parameters)
    starts = list(itertools.accumulate([n * layout.blocks for layout, n in shapes], initial=0))
    firsts = list(itertools.accumulate([n for _, n in shapes], initial=0))
    blocks = momenta[0].new_empty((sum(counts), *padded), dtype=torch.float32)
    for (layout, n), start, first in zip(shapes, starts, firsts):
        same = torch.stack([m.reshape(layout.shape) for m in momenta[first:first + n]])
        blocks[start:start + n * layout.blocks] = to_blocks(same, layout)
    if debias != 1.0:
        blocks.div_(debias)
    stacked = [torch.cat([unit[d].float() for unit in qs]) for d in range(len(diagonal))]  # (copies)
    if balance:
        stacked = _balanced(stacked)
    if update:
        noise = block_noise(step, indices, counts, padded, blocks.device)  # (the padding too)
        # levanter's damping, 2^-11.5 mean|M| over each parameter's padded blocks, summed in float64 so that its
        # float32 value does not depend on what else is in the stack (a sum's order does)
        slot, *_ = _numbering(tuple(indices), tuple(counts), math.prod(padded[:-1]), blocks.device)  # (noise's)
        sums = torch._foreach_norm(list(blocks.split(counts)), 1, dtype=torch.float64)
        torch._foreach_div_(sums, [count * math.prod(padded) for count in counts])
        damping = (2**-11.5 * torch.stack(sums)).float()[slot].view(-1, *[1] * len(padded))
        stacked = _updated(stacked, diagonal, torch.addcmul(blocks, damping, noise), noise, precond_lr)
    directions = _preconditioned(blocks, stacked, diagonal)
    ps = []
    for (layout, n), start, first in zip(shapes, starts, firsts):
        p = from_blocks(directions[start:start + n * layout.blocks], layout, layout.shape)
        # the RMS clip, each parameter's, its sum of squares in float64 as the damping's
        rms = torch.stack(torch._foreach_norm(list(p.unbind(0)), 2, dtype=torch.float64)) / math.sqrt(p[0].numel())
        ps += p.div_(torch.clamp_min(rms.float() / 1.1, 1.0).view(-1, *[1] * (p.dim() - 1))).unbind(0)
    return [[p.view(m.shape), *new] for p, m, new in zip(ps, momenta, zip(*[q.split(counts) for q in stacked]))]


def block_products(layout: Layout, blocks: int, update_rate: float) -> list[Product]:
    """The batched products of one stack of `blocks` blocks laid out as `layout`, in float32, per triangular side
    (a diagonal side is element-wise, as is a vector block's T, an outer product): every step, the application's
    Q M and Q^T (Q M); on update steps, update_rate of them in the long run, A's product, B's triangular solve
    (counted as a product of its size: twice a solve's FLOPs), T_A and T_B, the lower bound's two matrix-vector
    products and triu(T_A - T_B) Q."""
    products = []
    for d, (side, diag) in enumerate(zip(layout.padded, layout.diagonal)):
        if diag:
            continue
        if len(layout.padded) == 1:  # a vector block, as a row: x^T Q^T
            applied, statistics = (1, side, side), []
        else:
            other = layout.padded[1 - d]
            applied = (side, side, other) if d == 0 else (other, side, side)
            statistics = [(side, other, side)] * 2  # T_A, T_B
        updating = [applied] * 2 + statistics + [(1, side, side)] * 2 + [(side, side, side)]
        products += [Product(blocks, *shape, torch.float32) for shape in [applied] * 2]
        products += [Product(blocks, *shape, torch.float32, update_rate) for shape in updating]
    return products


class Kron(MatrixProducts, GroupState, ListwiseOptimizer):
    group_state_keys = ("kron_count", "kron_update_counter", "kron_balance_counter")
    side_state_sharded = True  # under FSDP the preconditioner stacks are sharded over their blocks (bench.memory)

    def __init__(self, params: Iterable, lr: float = 1e-3, beta1: float = 0.9, weight_decay: float = 0.0,
                 precond_lr: float = 0.1, init_scale: float = 1.0, update_prob_min: float = 0.05,
                 update_prob_flat_start: int = 500, block_size: int = 256, max_size_triangular: int = 25000,
                 merge_small_dims: bool = True):
        super().__init__(params, dict(lr=lr, beta1=beta1, weight_decay=weight_decay, kron_count=0,
                                      kron_update_counter=0, kron_balance_counter=0))
        self.settings = dict(precond_lr=precond_lr, init_scale=init_scale, update_prob_min=update_prob_min,
                             update_prob_flat_start=update_prob_flat_start)
        params = [p for g in self.param_groups for p in g["params"]]
        self.index = {id(p): i for i, p in enumerate(params)}
        self.layouts = {id(p): layout_of(tuple(p.shape), block_size, max_size_triangular, merge_small_dims)
                        for p in params}

    def _state(self, p: torch.Tensor) -> dict:
        state = self.state[p]
        if not state:
            layout = self.layouts[id(p)]
            state["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
            scale = self.settings["init_scale"] ** (1 / len(layout.shape))
            for d, (side, diag) in enumerate(zip(layout.padded, layout.diagonal)):
                one = torch.ones(side, device=p.device) if diag else torch.eye(side, device=p.device)
                q = (scale * one).expand(layout.blocks, *one.shape).clone()
                if isinstance(p, DTensor):  # sharded over the blocks, as the parameter over its rows: every rank
                    # builds the same q, so each keeps its own blocks (src_data_rank=None) without a scatter, whose
                    # padded receive buffer a rank with fewer blocks (or none) would keep whole
                    q = distribute_tensor(q, p.device_mesh, [Shard(0)], src_data_rank=None)
                state[f"q{d}"] = q
        return state

    def products(self) -> list[Product]:
        """The batched products of one step on one process, a stack of blocks at a time as kron_step makes them
        (batches), the update's at its probability's long-run value, update_prob_min (block_products)."""
        layouts = [self.layouts[id(p)] for group in self.param_groups for p in group["params"]]
        return [product for run in batches(layouts)
                for product in block_products(layouts[run[0]], sum(layouts[i].blocks for i in run),
                                              self.settings["update_prob_min"])]

    def _schedule(self, first: dict) -> tuple[int, bool, bool]:
        """The step count and whether this step updates and rebalances the preconditioners (levanter's counter,
        in float32 as its schedule is)."""
        t = first["kron_count"] + 1
        flat_start, floor = self.settings["update_prob_flat_start"], self.settings["update_prob_min"]
        probability = torch.tensor(-0.001, dtype=torch.float32) * (t - flat_start)
        probability = probability.exp().clamp(floor, 1.0)
        counter = first["kron_update_counter"] + 1
        update = bool(counter >= 1 / probability)
        balances = first["kron_balance_counter"] + (1 if update else 0)
        balance = update and balances >= BALANCE_EVERY
        for group in self.param_groups:
            group.update(kron_count=t, kron_update_counter=0 if update else counter,
                         kron_balance_counter=0 if balance else balances)
        return t, update, balance

    def update_groups(self, groups: list[tuple[dict, list[torch.Tensor]]]) -> None:
        t, update, balance = self._schedule(self.param_groups[0])
        params = [p for _, members in groups for p in members]
        states = [self._state(p) for p in params]
        exp_avgs = [s["exp_avg"] for s in states]
        beta1 = self.param_groups[0]["beta1"]
        torch._foreach_lerp_(local(exp_avgs), local([p.grad for p in params]), 1.0 - beta1)
        layouts = [self.layouts[id(p)] for p in params]
        units = [[m] + [s[f"q{d}"] for d in range(len(layout.shape))]
                 for m, s, layout in zip(exp_avgs, states, layouts)]
        debias = 1 - beta1**t

        def kron_step(indices: list[int], wholes: list[list[torch.Tensor]]) -> list[list[torch.Tensor]]:
            """This rank's parameters (all of them on one process), a stack of blocks of one signature at a time."""
            results = [None] * len(indices)
            for run in batches([layouts[i] for i in indices]):
                members = [indices[k] for k in run]
                batch = precondition([wholes[k][0] for k in run], [wholes[k][1:] for k in run],
                                     [layouts[i] for i in members], t, [self.index[id(params[i])] for i in members],
                                     update, balance, self.settings["precond_lr"], debias)
                for k, result in zip(run, batch):
                    results[k] = result
            return results

        # The preconditioners come back only from a step that updates them (and rebalances, on some of those):
        # on the others (95% of them once the probability reaches 0.05) only the direction travels.
        results = on_owner_ranks(units, kron_step, torch.float32, returned=None if update else 1)
        if update:
            torch._foreach_copy_(local([q for unit in units for q in unit[1:]]),
                                 local([q for r in results for q in r[1:]]))
        updates = {id(p): direction for p, (direction, *_) in zip(params, results)}
        for group, members in groups:
            lr, weight_decay = group["lr"], group["weight_decay"]
            if weight_decay:
                torch._foreach_mul_(local(members), 1.0 - lr * weight_decay)
            torch._foreach_add_(local(members), local([updates[id(p)] for p in members]), alpha=-lr)


def build_kron(model: nn.Module, hp: KronHyperparameters, loop: Loop) -> Kron:
    groups = weight_decay_groups(model, decay_routing("kron", False), hp.weight_decay)
    return Kron(groups, lr=loop.learning_rate, beta1=hp.beta1, weight_decay=hp.weight_decay,
                precond_lr=hp.kron_precond_lr, init_scale=hp.kron_precond_init_scale,
                update_prob_min=hp.kron_update_prob_min, update_prob_flat_start=hp.kron_update_prob_flat_start,
                block_size=hp.kron_block_size, max_size_triangular=hp.kron_max_size_triangular,
                merge_small_dims=hp.kron_merge_small_dims)
