"""
Orthogonalisation by the quintic Newton-Schulz iteration (NS5), shared by Muon,
Moonlight, MARS-M and MARS-Shampoo, and its work shared out across ranks.

NS5 maps a matrix G = U S V^T to approximately U V^T without an SVD: five
iterations of X <- a X + b (X X^T) X + c (X X^T)^2 X on X = G / (||G||_F + eps),
with the coefficients (3.4445, -4.7750, 2.0315) of the official MARS and Muon code.
We evaluate each iteration as A = X X^T, X <- a X + (b A + c A A) X: for X of n x m
(n <= m), 4 n^2 m + 2 n^3 FLOPs where the official (A X, then A (A X)) costs 6 n^2 m,
a third less on the 768 x 50304 embedding; the same polynomial, equal up to rounding.
"""

import functools

import torch
import torch.distributed as dist
from torch.distributed.tensor import DTensor

from optim.sharding import local, shard_group

NS5_COEFFICIENTS = (3.4445, -4.7750, 2.0315)


def ns5_dtype(device: torch.device) -> torch.dtype:
    """The iteration runs in bf16 on CUDA, as the official code does, and in fp32 elsewhere: on CPU,
    bf16 matrix products measured 50x slower than fp32."""
    return torch.bfloat16 if device.type == "cuda" else torch.float32


def _ns5_iterations(x: torch.Tensor, steps: int) -> torch.Tensor:
    a, b, c = NS5_COEFFICIENTS
    for _ in range(steps):
        gram = x @ x.mT
        x = a * x + (b * gram + c * gram @ gram) @ x
    return x


@functools.cache
def _compiled_ns5_iterations():
    # Compiled on CUDA, as the official code compiles NS5 (fuses the scalings into the products);
    # wrapped on first use so that importing the optimizers does not import torch._dynamo.
    return torch.compile(_ns5_iterations)


def newton_schulz5(matrix: torch.Tensor, steps: int = 5, eps: float = 1e-7) -> torch.Tensor:
    """NS5 of a 2-D matrix, returned in ns5_dtype (bf16 on CUDA, fp32 elsewhere)."""
    x = matrix.to(ns5_dtype(matrix.device)) / (matrix.norm() + eps)
    # Iterate on the wide orientation, so that X X^T is the smaller Gram matrix.
    tall = matrix.size(0) > matrix.size(1)
    if tall:
        x = x.mT
    x = (_compiled_ns5_iterations() if matrix.is_cuda else _ns5_iterations)(x, steps)
    return x.mT if tall else x


def muon_scale(rows: int, cols: int) -> float:
    """max(1, rows/cols)^0.5: Muon's and MARS-Shampoo's factor on NS5 of a rows x cols matrix."""
    return max(1.0, rows / cols) ** 0.5


def newton_schulz5_across_ranks(matrices: list[torch.Tensor], steps: int, eps: float) -> list[torch.Tensor]:
    """NS5 of every matrix (in its dtype). Under torch.distributed each rank computes its share and
    receives the others' results in ns5_dtype, which is what NS5 computed in: bf16 on CUDA (the
    official code's communication dtype), fp32 on CPU, exact either way. Each rank's results lie
    contiguously in one flat buffer, so each rank receives exactly the others' results, with no
    padding to the largest share (see exchanged_bytes). Sharded matrices (DTensors): newton_schulz5_of_shards."""
    if matrices and isinstance(matrices[0], DTensor):
        return newton_schulz5_of_shards(matrices, steps, eps)
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1 or not matrices:
        return [newton_schulz5(m, steps, eps).to(m.dtype) for m in matrices]
    world_size, rank = dist.get_world_size(), dist.get_rank()
    owners, loads = balanced_owners([m.numel() for m in matrices], world_size)
    starts = [sum(loads[:r]) for r in range(world_size)]
    flat = torch.empty(sum(loads), dtype=ns5_dtype(matrices[0].device), device=matrices[0].device)
    offsets, filled = [], list(starts)
    for m, owner in zip(matrices, owners):
        offsets.append(filled[owner])
        filled[owner] += m.numel()
        if owner == rank:
            flat[offsets[-1] : filled[owner]] = newton_schulz5(m, steps, eps).reshape(-1)
    # One broadcast per rank of its segment: an all-gather of unequal parts.
    works = [dist.broadcast(flat[starts[r] : starts[r] + loads[r]], src=r, async_op=True)
             for r in range(world_size) if loads[r]]
    for work in works:
        work.wait()
    return [flat[offset : offset + m.numel()].view_as(m).to(m.dtype) for m, offset in zip(matrices, offsets)]


def newton_schulz5_of_shards(matrices: list[DTensor], steps: int, eps: float) -> list[DTensor]:
    """NS5 of matrices sharded by rows over a group (FSDP2), sharded alike. Each matrix has an owner rank
    (balanced_owners); one all-to-all sends every owner the other ranks' row blocks of its matrices,
    in ns5_dtype, the owner runs NS5 on each whole matrix, and a second all-to-all returns each rank its
    rows of the results. Every block travels at its own size, with no padding."""
    group = shard_group(matrices)
    world_size, rank = dist.get_world_size(group), dist.get_rank(group)
    blocks = local(matrices)
    dtype, device = ns5_dtype(blocks[0].device), blocks[0].device
    rows = [row_blocks(m.shape[0], world_size) for m in matrices]  # each rank's rows of each matrix
    sizes = [[r * m.shape[1] for r in matrix_rows] for m, matrix_rows in zip(matrices, rows)]
    owners, _ = balanced_owners([m.numel() for m in matrices], world_size)
    owned_by = [[i for i, owner in enumerate(owners) if owner == r] for r in range(world_size)]
    # to each owner, this rank's blocks of its matrices; from each rank, its blocks of this rank's matrices
    send_sizes = [sum(sizes[i][rank] for i in owned_by[r]) for r in range(world_size)]
    receive_sizes = [sum(sizes[i][r] for i in owned_by[rank]) for r in range(world_size)]
    outgoing = [blocks[i].reshape(-1).to(dtype) for r in range(world_size) for i in owned_by[r]]
    incoming = _all_to_all(outgoing, send_sizes, receive_sizes, dtype, device, group)
    from_ranks = [part.split([sizes[i][r] for i in owned_by[rank]]) for r, part in enumerate(incoming.split(receive_sizes))]
    results = []  # this rank's matrices, orthogonalised, cut into each rank's rows
    for j, i in enumerate(owned_by[rank]):
        whole = torch.cat([from_ranks[r][j] for r in range(world_size)]).view(matrices[i].shape)
        results.append(newton_schulz5(whole, steps, eps).split(rows[i]))
    returned = [results[j][r].reshape(-1) for r in range(world_size) for j in range(len(owned_by[rank]))]
    incoming = _all_to_all(returned, receive_sizes, send_sizes, dtype, device, group)
    updates: list[torch.Tensor] = [None] * len(matrices)
    for r, part in enumerate(incoming.split(send_sizes)):
        for i, rows_of_i in zip(owned_by[r], part.split([sizes[i][rank] for i in owned_by[r]])):
            updates[i] = rows_of_i.view(blocks[i].shape).to(matrices[i].dtype)
    return [DTensor.from_local(u, m.device_mesh, m.placements, run_check=False, shape=m.shape, stride=m.stride())
            for u, m in zip(updates, matrices)]


def _all_to_all(parts: list[torch.Tensor], send_sizes: list[int], receive_sizes: list[int], dtype: torch.dtype,
                device: torch.device, group: dist.ProcessGroup) -> torch.Tensor:
    """The flat parts (in rank order, send_sizes elements to each rank) exchanged; what each rank sent us."""
    outgoing = torch.cat(parts) if parts else torch.empty(0, dtype=dtype, device=device)
    incoming = torch.empty(sum(receive_sizes), dtype=dtype, device=device)
    dist.all_to_all_single(incoming, outgoing, receive_sizes, send_sizes, group=group)
    return incoming


def row_blocks(rows: int, world_size: int) -> list[int]:
    """Each rank's rows of a matrix sharded on dim 0 as FSDP2 shards it (torch.chunk: blocks of
    ceil(rows / world_size), the last ranks' smaller or empty)."""
    block = -(-rows // world_size)
    return [max(0, min(block, rows - r * block)) for r in range(world_size)]


def balanced_owners(sizes: list[int], world_size: int) -> tuple[list[int], list[int]]:
    """A rank for each matrix: largest first, each to the least-loaded rank (the same on every rank);
    and each rank's load, its matrices' total size."""
    owners, loads = [0] * len(sizes), [0] * world_size
    for i in sorted(range(len(sizes)), key=lambda i: -sizes[i]):
        owners[i] = loads.index(min(loads))
        loads[owners[i]] += sizes[i]
    return owners, loads


def exchanged_bytes(sizes: list[int], world_size: int, element_size: int) -> int:
    """Bytes one rank receives per newton_schulz5_across_ranks call at most (the busiest link)."""
    _, loads = balanced_owners(sizes, world_size)
    return (sum(loads) - min(loads)) * element_size
