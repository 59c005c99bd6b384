"""
Optimizers on sharded parameters. Under data_parallel=fsdp (parallel.py) every parameter, gradient and
optimizer state tensor is a DTensor sharded on dim 0: each rank holds a block of rows. Element-wise rules
run on those local blocks as they are (the compiled rules too, on plain local tensors: rules.RuleKernel);
what needs a whole tensor is gathered here, once per step for all tensors:
  - a per-tensor norm (MARS's clip of c, the diagnostics): each rank's squared norms of its blocks,
    summed by one all-reduce over the shard group;
  - whole matrices go to one owner rank each (balanced by their work), which computes on all of its own in
    one call (batched: Newton-Schulz by shape, Kron's preconditioners by layout), and the results come back
    (on_owner_ranks); without sharding (DDP) the owner computes and broadcasts, so no rank repeats another's
    work;
  - whole matrices on every rank (SOAP's statistics: optim/soap.py), one all-gather for all of them,
    each rank then computing the rows of the results it holds (local_rows).
Unsharded tensors pass through every function unchanged, with no communication.
"""

import math
from collections.abc import Callable

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
    block of ceil(rows / world_size) rows (torch.chunk's, as row_blocks), so all ranks send
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


def with_local_blocks(tensors: Tensors, blocks: Tensors) -> Tensors:
    """New tensors laid out as `tensors` (DTensors sharded as they are, under FSDP2) holding these local blocks: the
    inverse of local() for a result computed on each rank's blocks."""
    return [DTensor.from_local(b, t.device_mesh, t.placements, run_check=False, shape=t.shape, stride=t.stride())
            if isinstance(t, DTensor) else b for t, b in zip(tensors, blocks)]


def row_zeros_like(tensor: torch.Tensor) -> torch.Tensor:
    """A (rows, 1) column of zeros, one per row of the tensor, held as the tensor holds its rows (a DTensor sharded
    on dim 0 like it: each rank keeps the entries of its rows); a per-row statistic (NorMuon's)."""
    if not isinstance(tensor, DTensor):
        return tensor.new_zeros(tensor.shape[0], 1)
    block = tensor.to_local().new_zeros(tensor.to_local().shape[0], 1)
    return DTensor.from_local(block, tensor.device_mesh, tensor.placements, run_check=False,
                              shape=torch.Size((tensor.shape[0], 1)), stride=(1, 1))


def local_rows(tensor: torch.Tensor) -> slice:
    """The rows of the whole tensor that this rank holds (all of them when it is not sharded)."""
    if not isinstance(tensor, DTensor):
        return slice(None)
    rows, mesh = tensor.shape[0], tensor.device_mesh
    start = min(mesh.get_local_rank() * _block_rows(rows, mesh.size()), rows)
    return slice(start, start + tensor.to_local().shape[0])


def _block_rows(rows: int, world_size: int) -> int:
    return -(-rows // world_size)


def row_blocks(rows: int, world_size: int) -> list[int]:
    """Each rank's rows of a tensor sharded on dim 0 as FSDP2 shards it (torch.chunk: blocks of
    ceil(rows / world_size), the last ranks' smaller or empty)."""
    block = _block_rows(rows, world_size)
    return [max(0, min(block, rows - r * block)) for r in range(world_size)]


def balanced_owners(costs: list[float], world_size: int) -> tuple[list[int], list[float]]:
    """A rank for each unit of work: costliest first, each to the least-loaded rank (the same on every rank);
    and each rank's load, its units' total cost."""
    owners, loads = [0] * len(costs), [0] * world_size
    for i in sorted(range(len(costs)), key=lambda i: -costs[i]):
        owners[i] = loads.index(min(loads))
        loads[owners[i]] += costs[i]
    return owners, loads


def received_bytes(sizes: list[int], costs: list[float], world_size: int, element_size: int) -> list[int]:
    """Bytes each rank receives per on_owner_ranks call over plain tensors: the results of the units it does not
    own, for units of these sizes (elements) owned as balanced_owners places them by these costs."""
    owners, _ = balanced_owners(costs, world_size)
    held = [sum(size for size, owner in zip(sizes, owners) if owner == r) for r in range(world_size)]
    return [(sum(held) - held[r]) * element_size for r in range(world_size)]


# compute(indices, the whole tensors of those units) -> each unit's results: called once per rank with every
# unit it owns, so that it can batch them (Newton-Schulz by shape).
Compute = Callable[[list[int], list[Tensors]], list[Tensors]]


def on_owner_ranks(units: list[Tensors], compute: Compute, dtype: torch.dtype,
                   costs: list[float] | None = None, returned: int | None = None) -> list[Tensors]:
    """Tensors of the same shapes as each unit's, computed from the whole unit on one owner rank, for every unit,
    and returned to every rank laid out as its inputs. Owners are balanced by each unit's cost (its elements if
    none is given: give the work, FLOPs, where it grows otherwise), and each rank computes all the units it
    owns in one compute call. Sharded units (DTensors on dim 0 over one group: FSDP2) go to their owner by one
    all-to-all and come back as each rank's rows by another; plain ones (DDP: every rank holds them whole) are
    computed by their owner and broadcast. Everything travels in dtype (what compute returns, so the transfers
    are exact) and comes back in each input's dtype. Only the results of each unit's first `returned` tensors
    come back (all of them if None): the others are inputs that compute reads and this step does not change.
    Without torch.distributed, or on one rank, every unit is computed here, in one call."""
    if not units:
        return []
    costs = [sum(t.numel() for t in unit) for unit in units] if costs is None else costs
    if isinstance(units[0][0], DTensor):
        return _on_owners_of_shards(units, compute, dtype, costs, returned)
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return [[r.to(t.dtype) for r, t in zip(results[:returned], unit)]
                for results, unit in zip(compute(list(range(len(units))), units), units)]
    back = [unit[:returned] for unit in units]  # (the tensors whose results come back)
    sizes = [sum(t.numel() for t in unit) for unit in back]
    world_size, rank = dist.get_world_size(), dist.get_rank()
    owners, _ = balanced_owners(costs, world_size)
    held = [sum(size for size, owner in zip(sizes, owners) if owner == r) for r in range(world_size)]
    starts = [sum(held[:r]) for r in range(world_size)]
    flat = torch.empty(sum(held), dtype=dtype, device=units[0][0].device)
    offsets, filled = [], list(starts)
    for size, owner in zip(sizes, owners):
        offsets.append(filled[owner])
        filled[owner] += size
    mine = [i for i, owner in enumerate(owners) if owner == rank]
    if mine:
        flat[starts[rank] : starts[rank] + held[rank]] = torch.cat(
            [r.reshape(-1) for results in compute(mine, [units[i] for i in mine]) for r in results[:returned]])
    # One broadcast per rank of its segment, issued without waiting: an all-gather of unequal parts, which gloo
    # lacks (NCCL runs them one after another on its stream: world_size latencies, not more bytes). Padding every
    # part to the largest, for one all-gather, would move up to world_size x the largest owner's share: 2.5x the
    # bytes on GPT-2 small at 8 ranks, 10x at 32.
    works = [dist.broadcast(flat[starts[r] : starts[r] + held[r]], src=r, async_op=True)
             for r in range(world_size) if held[r]]
    for work in works:
        work.wait()
    results = []
    for unit, offset, size in zip(back, offsets, sizes):
        parts = flat[offset : offset + size].split([t.numel() for t in unit])
        results.append([part.view_as(t).to(t.dtype) for part, t in zip(parts, unit)])
    return results


def _on_owners_of_shards(units: list[list[DTensor]], compute: Compute, dtype: torch.dtype,
                         costs: list[float], returned: int | None) -> list[list[DTensor]]:
    """on_owner_ranks of sharded units: one all-to-all sends every owner the other ranks' row blocks of its
    units' tensors, the owner computes on the whole tensors, and a second all-to-all returns each rank its
    rows of the results (of each unit's first `returned` tensors). Every block travels at its own size, with
    no padding."""
    group = shard_group(units[0])
    world_size, rank = dist.get_world_size(group), dist.get_rank(group)
    device = units[0][0].device
    tensors = [t for unit in units for t in unit]
    unit_of = [i for i, unit in enumerate(units) for _ in unit]
    comes_back = [k < (returned or len(unit)) for unit in units for k in range(len(unit))]
    blocks = local(tensors)
    rows = [row_blocks(t.shape[0], world_size) for t in tensors]  # each rank's rows of each tensor
    sizes = [[r * math.prod(t.shape[1:]) for r in tensor_rows] for t, tensor_rows in zip(tensors, rows)]
    owners, _ = balanced_owners(costs, world_size)
    owned_by = [[j for j in range(len(tensors)) if owners[unit_of[j]] == r] for r in range(world_size)]
    # to each owner, this rank's blocks of its tensors; from each rank, its blocks of this rank's tensors
    send_sizes = [sum(sizes[j][rank] for j in owned_by[r]) for r in range(world_size)]
    receive_sizes = [sum(sizes[j][r] for j in owned_by[rank]) for r in range(world_size)]
    outgoing = [blocks[j].reshape(-1).to(dtype) for r in range(world_size) for j in owned_by[r]]
    incoming = _all_to_all(outgoing, send_sizes, receive_sizes, dtype, device, group)
    from_ranks = [part.split([sizes[j][r] for j in owned_by[rank]])
                  for r, part in enumerate(incoming.split(receive_sizes))]
    wholes = {j: torch.cat([from_ranks[r][k] for r in range(world_size)]).view(tensors[j].shape)
              for k, j in enumerate(owned_by[rank])}
    mine = [i for i in range(len(units)) if owners[i] == rank]
    members = [[j for j in range(len(tensors)) if unit_of[j] == i] for i in range(len(units))]
    cut = {}  # this rank's results, cut into each rank's rows
    for i, results in zip(mine, compute(mine, [[wholes[j] for j in members[i]] for i in mine]) if mine else []):
        for j, result in zip(members[i], results):
            if comes_back[j]:
                cut[j] = result.to(dtype).split(rows[j])
    # each rank its rows of the results that come back: from each owner, of the owner's tensors
    back_by = [[j for j in owned_by[r] if comes_back[j]] for r in range(world_size)]
    return_sizes = [sum(sizes[j][r] for j in back_by[rank]) for r in range(world_size)]
    back_sizes = [sum(sizes[j][rank] for j in back_by[r]) for r in range(world_size)]
    outgoing = [cut[j][r].reshape(-1) for r in range(world_size) for j in back_by[rank]]
    incoming = _all_to_all(outgoing, return_sizes, back_sizes, dtype, device, group)
    updates: dict[int, torch.Tensor] = {}
    for r, part in enumerate(incoming.split(back_sizes)):
        for j, rows_of_j in zip(back_by[r], part.split([sizes[j][rank] for j in back_by[r]])):
            updates[j] = rows_of_j.view(blocks[j].shape).to(tensors[j].dtype)
    results = dict(zip(updates, with_local_blocks([tensors[j] for j in updates], list(updates.values()))))
    return [[results[j] for j in members[i] if comes_back[j]] for i in range(len(units))]


def _all_to_all(parts: Tensors, send_sizes: list[int], receive_sizes: list[int], dtype: torch.dtype,
                device: torch.device, group: dist.ProcessGroup) -> torch.Tensor:
    """The flat parts (in rank order, send_sizes elements to each rank) exchanged; what each rank sent us."""
    outgoing = torch.cat(parts) if parts else torch.empty(0, dtype=dtype, device=device)
    incoming = torch.empty(sum(receive_sizes), dtype=dtype, device=device)
    dist.all_to_all_single(incoming, outgoing, receive_sizes, send_sizes, group=group)
    return incoming
