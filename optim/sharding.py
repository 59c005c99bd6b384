"""
Optimizers on sharded parameters. Under data_parallel=fsdp (parallel.py) every parameter, gradient and
optimizer state tensor is a DTensor sharded on dim 0: each rank holds a block of rows. Element-wise rules
run on those local blocks as they are (the compiled rules too, on plain local tensors: rules.RuleKernel);
what needs a whole tensor is gathered here, once per step for all tensors:
  - a per-tensor norm (MARS's clip of c, the diagnostics): each rank's squared norms of its blocks,
    summed by one all-reduce over the shard group;
  - a whole matrix (Newton-Schulz: optim/newton_schulz.py) goes to one owner rank and comes back.
Unsharded tensors pass through every function unchanged, with no communication.
"""

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
