"""
Optimizers on sharded parameters. Under data_parallel=fsdp (parallel.py) every parameter, gradient and
optimizer state tensor is a DTensor sharded on dim 0: each rank holds a block of rows. Element-wise rules
run on those local blocks as they are (the compiled rules too, on plain local tensors: rules.RuleKernel);
what needs a whole tensor is gathered here, once per step for all tensors:
  - a per-tensor norm (MARS's clip of c, the diagnostics): each rank's squared norms of its blocks,
    summed by one all-reduce over the shard group;
  - a whole matrix (Newton-Schulz: optim/newton_schulz.py) goes to one owner rank and comes back;
  - whole matrices on every rank (SOAP's statistics: optim/soap.py), one all-gather for all of them,
    each rank then computing the rows of the results it holds (local_rows).
Unsharded tensors pass through every function unchanged, with no communication.
"""

import math

import torch
import torch.distributed as dist
from torch.distributed.tensor import DTensor

Tensors = list[torch.Tensor]


def local(tensors: Tensors) -> Tensors:
    """Each tensor's block on this rank (the tensor itself when it is not sharded); shares its memory."""
    return [t.to_local() if isinstance(t, DTensor) else t for t in tensors]


def shard_group(tensors: Tensors) -> dist.ProcessGroup | None:
    """The process group the tensors are sharded over (None when they are not: plain tensors)."""
    return tensors[0].device_mesh.get_group() if tensors and isinstance(tensors[0], DTensor) else None


def squared_norms(tensors: Tensors, group: dist.ProcessGroup | None) -> torch.Tensor:
    """||t||^2 of each whole tensor (1-D, float64), from local blocks and the group they are sharded over.
    Accumulated in float64, a sum over blocks rounds to the same float32 norm as the whole tensor's."""
    squares = torch.stack(torch._foreach_norm(local(tensors), 2, dtype=torch.float64)).square()
    if group is not None:
        dist.all_reduce(squares, group=group)
    return squares


def gather_whole(tensors: Tensors) -> Tensors:
    """Each tensor whole on every rank, from the blocks of tensors of one dtype sharded on dim 0, in one
    all-gather for all of them; unsharded tensors as they are. Each rank sends its blocks padded to FSDP2's
    block of ceil(rows / world_size) rows (torch.chunk's, as newton_schulz.row_blocks), so all ranks send
    as much, and a whole tensor is the first rows of its gathered blocks (only the last ranks' are short)."""
    group = shard_group(tensors)
    if group is None:
        return list(tensors)
    world_size, blocks = dist.get_world_size(group), local(tensors)
    padded = [_block_rows(t.shape[0], world_size) * math.prod(t.shape[1:]) for t in tensors]  # elements per rank
    flat = torch.zeros(sum(padded), dtype=blocks[0].dtype, device=blocks[0].device)
    for part, block in zip(flat.split(padded), blocks):
        part[: block.numel()] = block.reshape(-1)
    gathered = torch.empty(world_size * flat.numel(), dtype=flat.dtype, device=flat.device)
    dist.all_gather_single(gathered, flat, group=group)
    from_ranks = [part.split(padded) for part in gathered.chunk(world_size)]
    return [torch.cat([parts[i] for parts in from_ranks]).view(-1, *t.shape[1:])[: t.shape[0]]
            for i, t in enumerate(tensors)]


def local_rows(tensor: torch.Tensor) -> slice:
    """The rows of the whole tensor that this rank holds (all of them when it is not sharded)."""
    if not isinstance(tensor, DTensor):
        return slice(None)
    rows, mesh = tensor.shape[0], tensor.device_mesh
    start = min(mesh.get_local_rank() * _block_rows(rows, mesh.size()), rows)
    return slice(start, start + tensor.to_local().shape[0])


def _block_rows(rows: int, world_size: int) -> int:
    return -(-rows // world_size)
