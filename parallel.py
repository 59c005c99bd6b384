"""
Data parallelism, in one place: how train.py's model is spread over its ranks.

  ddp   every rank holds the whole model, its gradients and the optimizer state; gradients are
        all-reduced (DistributedDataParallel), and the model is compiled whole.
  fsdp  FSDP2 (torch.distributed.fsdp.fully_shard), as torchtitan applies it: each transformer block
        is sharded on its own and the root (embeddings, final LayerNorm, tied head) on the model, so
        each rank keeps 1/world_size of the parameters, gradients and optimizer state, and gathers a
        block's weights only while it computes. Parameters are DTensors sharded on dim 0; the
        optimizers update their local shards (optim/sharding.py). On CUDA the weights are gathered and
        used in bf16 and the gradients reduced in fp32 onto fp32 master weights; on CPU everything is
        fp32. With compile, each block is compiled on its own (the FSDP hooks stay outside the graphs).
Either way, activation_checkpointing recomputes each block's activations in the backward pass instead
of keeping them: a block's input is all a layer keeps.
"""

import functools
from contextlib import contextmanager
from typing import Iterator

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.fsdp import FSDPModule, MixedPrecisionPolicy, fully_shard
from torch.distributed.tensor import init_device_mesh
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.checkpoint import checkpoint

from config import ConfigError, TrainConfig
from model import GPT
from optim.sharding import local, shard_group, squared_norms
from runtime import Runtime


def check_parallelism(cfg: TrainConfig, rt: Runtime) -> None:
    """Refuse, before any work, a data_parallel setting this launch cannot run."""
    if cfg.data_parallel == "fsdp" and not rt.distributed:
        raise ConfigError("data_parallel='fsdp' shards the model across the ranks of torchrun; launch with "
                          "torchrun (torchrun --standalone --nproc_per_node=1 train.py ... for one GPU), or use "
                          "data_parallel='ddp'")


def parallelize(model: GPT, cfg: TrainConfig, rt: Runtime) -> nn.Module:
    """model spread over the ranks as cfg.data_parallel says; returns what runs the forward pass (for
    fsdp, model itself, sharded in place: build the optimizer after this)."""
    if cfg.activation_checkpointing:
        for block in model.transformer.h:
            block.forward = functools.partial(checkpoint, block.forward, use_reentrant=False)
    if cfg.data_parallel == "fsdp":
        return shard(model, cfg, rt)
    compiled = torch.compile(model, mode=cfg.compile_mode) if cfg.compile else model
    if not rt.distributed:
        return compiled
    # The model's only buffers are those an optimizer adds (MuonClip's max-logit records), each rank's own: not broadcast.
    return DDP(compiled, device_ids=[rt.local_rank] if rt.device.type == "cuda" else None,
               bucket_cap_mb=ddp_bucket_mb(cfg, model), broadcast_buffers=False)


def shard(model: GPT, cfg: TrainConfig, rt: Runtime) -> GPT:
    """FSDP2 over every rank: each block, then the root."""
    mesh = init_device_mesh(rt.device.type, (rt.world_size,))
    bf16 = rt.device.type == "cuda" and cfg.dtype in ("auto", "bfloat16")
    policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32) if bf16 else \
        MixedPrecisionPolicy()
    for block in model.transformer.h:
        if cfg.compile:
            block.compile(mode=cfg.compile_mode)
        fully_shard(block, mesh=mesh, mp_policy=policy)
    # the root's weights (embeddings, tied head) are needed again right after the forward: keep them
    fully_shard(model, mesh=mesh, mp_policy=policy, reshard_after_forward=False)
    return model


def ddp_bucket_mb(cfg: TrainConfig, model: GPT) -> float:
    """DDP's gradient bucket size: the config's, else one transformer block's fp32 gradients. Compiled,
    DDP splits the graph at every bucket boundary (to overlap the all-reduce with the backward), so
    torch's default of 25 MB cut GPT-2 XL's graph ~250 times; a block per bucket cuts it n_layer times."""
    if cfg.ddp_bucket_mb:
        return cfg.ddp_bucket_mb
    # No smaller than DDP's first bucket (1 MiB): compiled DDP refuses a bucket cap below it (a tiny model's block).
    block_bytes = 4 * sum(p.numel() for p in model.transformer.h[0].parameters())
    return max(block_bytes, dist._DEFAULT_FIRST_BUCKET_BYTES) / 2**20


@contextmanager
def gradient_sync(model: nn.Module, sync: bool) -> Iterator[None]:
    """Inside, backward passes reduce gradients across ranks only if sync (gradient accumulation syncs
    on its last micro-step; without sync they accumulate locally)."""
    if sync or not isinstance(model, (DDP, FSDPModule)):
        yield
    elif isinstance(model, DDP):
        with model.no_sync():
            yield
    else:
        model.set_requires_gradient_sync(False)
        try:
            yield
        finally:
            model.set_requires_gradient_sync(True)


def clip_grad_norm_(params: list[torch.Tensor], max_norm: float) -> torch.Tensor:
    """The gradients' global norm (before clipping), a plain float32 tensor on every rank; scales them to
    max_norm when it is above (max_norm 0: never), with torch's clip coefficient max_norm / (norm + 1e-6).
    The squares accumulate in float64, sharded or not (one all-reduce over shards), so the norm is the same
    number on any parallelism and thread count: torch's float32 norm on CPU is off by ~1e-4 on a million
    elements (on GPU by ~1e-7)."""
    grads = [p.grad for p in params]
    norm = squared_norms(grads, shard_group(grads)).sum().sqrt().float()
    if max_norm > 0:
        torch._foreach_mul_(local(grads), (max_norm / (norm + 1e-6)).clamp(max=1.0))
    return norm
