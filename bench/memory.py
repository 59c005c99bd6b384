"""
Memory per GPU of a training run, part by part, and its communication per step: a model computed from
the config (nothing is measured; no GPU needed), for DDP and FSDP, with and without activation
checkpointing.

    python -m bench.memory config/gpt2_xl_mars.py --is_approx=False --data_parallel=fsdp \
        --activation_checkpointing=True --world_size 8
    python -m bench.memory config/gpt2_small_adamw.py --world_size 8     # DDP
    python -m bench.memory --readme                                       # docs/memory.md's two tables

The config and its --key=value overrides are train.py's; --world_size is the GPU count. The model is of a
CUDA run (dtype auto: bf16 autocast) unless the config says --device=cpu (fp32, or CPU bf16 autocast, as
the tests run). It counts rank 0's memory (under FSDP the most any rank holds), each part at its largest
during a step, and adds them: an upper bound of the peak. The last line is `total per GPU: X GB`, with
GB = 1e9 bytes.

  parameters   fp32 weights: DDP the whole model; FSDP each tensor's block of ceil(rows / N) rows (FSDP2 pads
               every rank's block to that). FSDP: the gathered weights in the compute dtype, of the root
               (embeddings and tied head, kept from the forward through the backward: parallel.py) and of two
               blocks (the one computing and the one prefetched). DDP under autocast: the bf16 copy of each
               matrix, which autocast caches until the forward ends and the backward keeps until that
               product's backward (checkpointed blocks drop theirs and remake one block's).
  gradients    fp32, as the optimizer receives them: DDP the whole model, and DDP's bucket copy of it
               (gradient_as_bucket_view is off). FSDP the padded shards; with gradient accumulation the whole
               model's unsharded fp32 gradients instead, which FSDP2 accumulates across micro-steps without sync
               (parallel.gradient_sync) until the last micro-step's backward reduce-scatters them block by
               block; and one block's gradient (compute dtype) and fp32 reduce-scatter input.
  optimizer    what the config's optimizer really keeps: a one-block model of the same recipe takes two steps
  state        through train.StepContext, and its state is counted before each step (the larger: MARS-exact
               then holds its stash beside g_prev) per element of each kind of parameter (attention, mlp,
               embeddings, 1-D) and per tensor (step counts). A kept gradient (MARS's g_prev, MARS-exact's
               stash) is laid out as the gradients: under FSDP a view that keeps its unit's whole padded
               reduce-scatter output; other state as its parameter's rows. State sized by a parameter's
               sides (SOAP's statistics and bases, Kron's preconditioners: state_layout) is taken at the
               real widths instead, from one step on a one-block model on the meta device (side_state).
  activations  what the backward needs, as eager autograd saves it (flash SDPA; torch.compile, which the paper
               configs use, recomputes cheap element-wise outputs and saves less: this is an upper bound for
               it). Per token of the micro-batch (B x T tokens; C = n_embd, h heads, a = 2 bytes of the
               matrix products' inputs and outputs under autocast, else 4), per block: LayerNorm's fp32 inputs
               (autocast runs LayerNorm in fp32: DDP's fp32 residual stream itself, FSDP's bf16 one cast up)
               and statistics, 8C + 16; c_attn's input C a; q, k, v 3C a; the attention output, which c_proj
               reads in place, C a, and its logsumexp 4h; c_fc's input C a; c_fc's output (GELU's input)
               4C a; GELU's output 4C a. Under activation checkpointing a block keeps only its input (fp32
               under DDP, bf16 under FSDP). Besides: token ids, targets and positions; ln_f's input and
               statistics and lm_head's input. A Llama block instead (measured against eager autograd,
               tests/test_memory.py): each RMSNorm's input, 1/rms and normalised input, 8C + 4, twice; c_attn's
               input and output 4C a, the rotated queries and keys 2C a, the attention output C a and its
               logsumexp 4h; the SwiGLU's input, cast apart for w1 and w2 under autocast (2C a, else C a), and
               four H-wide tensors (w1's and w2's outputs, silu's, their product), 4H a; the rotary tables
               (fp32 cos and sin, each layer's own) instead of positions; ln_f's three saved tensors.
  logits       B x T x vocab. train.py binds only the loss: the logits go when the forward ends, and the
               loss's graph keeps only log-softmax's fp32 output. In the cross-entropy's forward: the logits,
               their fp32 cast (under autocast) and log-softmax's output, a + 4 bytes per logit, + 4 under
               autocast (then the activations also count ln_f's fp32 output, 4C per token, which GPT.forward
               holds until it returns; lm_head's input is its cast). In the loss's backward: log-softmax's
               output and the fp32 gradients of it and of its input, 12 bytes per logit. None in a block's
               backward.
  workspace    a stated constant on CUDA, WORKSPACE_BYTES: the CUDA context (~0.5 GB, outside torch's
               allocator), cuBLAS and flash-attention workspaces, NCCL's buffers. Not modelled: the caching
               allocator's fragmentation, and the optimizer step's temporaries (none in fused AdamW and the
               compiled MARS rules; Muon's Nesterov direction and Newton-Schulz buffers, which live when the
               activations and logits do not, and are smaller; SOAP's and Kron's whole-parameter work on
               each owner rank).

Activations, logits and autocast's copies are taken at the largest of three moments: the forward's end
(autocast's cache full; the cross-entropy's forward), the loss's backward (the logits' gradients) and a
block's backward (that block recomputed under checkpointing; the residual stream's gradient and one more
MLP-wide gradient flowing, a weight's gradient, and the tied embedding's gradient from the head, held until
the embedding's is added).

Communication per step, bytes a rank receives (ring collectives; the busiest rank's where they differ):
DDP all-reduces the fp32 gradients once per forward-backward pass (MARS-exact: two); FSDP all-gathers each
block in the compute dtype twice per micro-step (forward, and backward: blocks reshard after the forward)
and the root once, and reduce-scatters the fp32 gradients once per pass; the matrix optimizers send each
matrix to an owner rank for Newton-Schulz and back (optim/newton_schulz.py), bf16 on CUDA. The global
gradient norm and MARS's clip of c add one small all-reduce each.

tests/test_memory.py checks the model against what CPU ranks hold under gloo, and against the measured
peak of a forward-backward pass.
"""

from __future__ import annotations

if not __package__:  # run as a file: the repository's modules (model, data, ...) are not importable
    raise SystemExit("bench/memory.py is a module of the bench package: run it from the repository root as\n"
                     "    python -m bench.memory ...")

import argparse
import dataclasses
import functools
import math
import os
import sys
from contextlib import nullcontext
from dataclasses import dataclass

import torch
from torch.utils._pytree import tree_leaves

import bench
from bench.recipes import paper_config_args
import optim.newton_schulz
from optim.newton_schulz import ns5_flops
from config import TrainConfig
from config.models import OWN_COMPONENTS, components
from model import GPT, GPTConfig, mlp_hidden
from optim import OPTIMIZERS, load_config
from optim.sharding import balanced_owners, received_bytes, row_blocks
from optim.routing import parameter_kinds
from errors import InputError, exit_on_input_error
from runtime import Runtime, resolve_dtype

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GB = 1e9
WORKSPACE_BYTES = 1.0 * GB  # CUDA context ~0.5 GB, NCCL ~0.3 GB, cuBLAS and flash workspaces: a stated constant


# ----------------------------------------------------------------------------- the run's shapes


@dataclass(frozen=True)
class Tensor:
    """A parameter of the model: its kind (optim.routing.KINDS), shape, and its FSDP unit (a block's
    index, or None for the root: embeddings, tied head, final LayerNorm)."""

    kind: str
    shape: tuple[int, ...]
    block: int | None

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    def rows(self, world_size: int, rank: int) -> int:
        """Rows rank holds of this tensor sharded on dim 0 over world_size ranks (FSDP2's torch.chunk)."""
        return row_blocks(self.shape[0], world_size)[rank]

    def local(self, world_size: int, rank: int) -> int:
        """Elements rank holds (its rows)."""
        return self.rows(world_size, rank) * self.numel // self.shape[0]

    def padded(self, world_size: int) -> int:
        """Elements of every rank's block as FSDP2 stores it: ceil(rows / N) rows."""
        return -(-self.shape[0] // world_size) * self.numel // self.shape[0]


def model_tensors(cfg: TrainConfig) -> list[Tensor]:
    """The parameters of cfg's model, built on the meta device (no memory), by kind and FSDP unit."""
    return list(_model_tensors(tuple(sorted(cfg.model_args().items()))))


@functools.cache
def _model_tensors(model_args: tuple) -> tuple[Tensor, ...]:
    with torch.device("meta"):
        model = GPT(GPTConfig(**dict(model_args)))
    block_of = {id(p): i for i, block in enumerate(model.transformer.h) for p in block.parameters()}
    return tuple(Tensor(kind, tuple(p.shape), block_of.get(id(p)))
                 for kind, params in parameter_kinds(model).items() for p in params)


@dataclass(frozen=True)
class Run:
    """What decides a run's memory: its config, GPU count, and where it runs."""

    cfg: TrainConfig
    world_size: int

    @property
    def cuda(self) -> bool:
        return self.cfg.device != "cpu"

    @property
    def fsdp(self) -> bool:
        return self.cfg.data_parallel == "fsdp"

    @property
    def low_precision(self) -> bool:
        """bf16 (or fp16) autocast: the matrix products' inputs and outputs in 2 bytes."""
        return resolve_dtype(self.cfg.dtype, torch.device("cuda" if self.cuda else "cpu")) != "float32"

    @property
    def compute_bytes(self) -> int:
        """Bytes of an element of the matrix products' inputs and outputs (and of FSDP's gathered weights)."""
        return 2 if self.low_precision else 4

    @property
    def grad_accum(self) -> int:
        return self.cfg.grad_accum_steps(self.world_size)

    @property
    def passes(self) -> int:
        """Forward-backward passes per optimizer step (MARS-exact: 2)."""
        return self.cfg.hyperparameters.gradients_per_step()

    def shards(self) -> int:
        """The ranks each tensor is split over: the GPU count under FSDP, 1 (whole) under DDP."""
        return self.world_size if self.fsdp else 1


# ----------------------------------------------------------------------------- the optimizer's state


@dataclass(frozen=True)
class StateCost:
    """An optimizer's state for one kind of parameter, in bytes: per element of state it allocates (laid
    out as the parameter: under FSDP its rows), per element of gradients it keeps (laid out as the
    gradients: under FSDP padded blocks), per tensor (0-d step counts), and per row of the whole parameter
    (Adam-mini's v, one number per block of rows, whole on every rank)."""

    own: float
    kept_gradients: float
    per_tensor: float
    per_row: float = 0.0


@dataclass(frozen=True)
class OptimizerProfile:
    state: dict[str, StateCost]  # by parameter kind
    newton_schulz_kinds: frozenset[str]  # kinds whose matrices go through Newton-Schulz
    has_sides: bool = False  # whether it keeps "sides" state (state_layout), which side_state counts


# The probe's model: one block, every matrix a distinct shape (so a Newton-Schulz call names its kind).
PROBE_MODEL = dict(n_layer=1, n_head=2, n_embd=16, block_size=8, vocab_size=96, dropout=0.0)


class RandomBatches:
    """data.loader.TrainBatches' micro_batch, of random token ids: the probe needs shapes, not text."""

    def __init__(self, vocab_size: int, block_size: int):
        self.vocab_size, self.block_size = vocab_size, block_size

    def micro_batch(self, step: int, micro_step: int, micro_batch_size: int, rank: int, world_size: int
                    ) -> tuple[torch.Tensor, torch.Tensor]:
        generator = torch.Generator().manual_seed(1000 * step + 10 * micro_step + rank)
        tokens = torch.randint(0, self.vocab_size, (micro_batch_size, self.block_size + 1), generator=generator)
        return tokens[:, :-1], tokens[:, 1:]


_PROFILES: dict[str, OptimizerProfile] = {}


def state_key(cfg: TrainConfig, *shape) -> str:
    """What decides an optimizer's state: the optimizer, the settings that shape its state (the registry's
    state_keys), and what else shapes it (the model's)."""
    hp = cfg.hyperparameters
    return repr((cfg.optimizer, [getattr(hp, k) for k in hp.state_keys], cfg.weight_averaging, *shape))


def optimizer_profile(cfg: TrainConfig) -> OptimizerProfile:
    """The state cfg's optimizer keeps, by parameter kind, and which kinds it orthogonalises (taken once per
    state_key)."""
    key = state_key(cfg, cfg.bias)
    if key not in _PROFILES:
        _PROFILES[key] = take_profile(cfg)
    return _PROFILES[key]


def take_profile(cfg: TrainConfig) -> OptimizerProfile:
    """Two steps of cfg's optimizer on PROBE_MODEL through train.StepContext (CPU, fp32), counting its state
    before each step and the matrices it hands to Newton-Schulz."""
    import train  # (train imports the data pipeline: only when a profile is taken)
    from optim import build_optimizer

    cfg = dataclasses.replace(cfg, **PROBE_MODEL, device="cpu", dtype="float32", compile=False, micro_batch_size=2,
                              total_batch_size=2 * PROBE_MODEL["block_size"], data_parallel="ddp",
                              activation_checkpointing=False, async_checkpoint=False, hellaswag_interval=0)
    torch.manual_seed(0)
    model = GPT(GPTConfig(**cfg.model_args()))
    optimizer = build_optimizer(model, cfg, "cpu")
    steps = train.StepContext(model, list(model.parameters()), optimizer, torch.amp.GradScaler("cpu", enabled=False),
                              RandomBatches(cfg.vocab_size, cfg.block_size), cfg, Runtime(0, 0, 1, torch.device("cpu")),
                              nullcontext())
    kept = []  # every gradient made, kept alive: a state tensor sharing a storage with one is a kept gradient
    for p in model.parameters():
        p.register_post_accumulate_grad_hook(lambda p: kept.append(p.grad))
    counts: list[dict[str, StateCost]] = []
    optimizer.register_step_pre_hook(
        lambda *_: counts.append(_count_state(model, optimizer, {g.untyped_storage().data_ptr() for g in kept})))
    shapes = []
    original = optim.newton_schulz.newton_schulz5_batched

    def recorded(matrices: list[torch.Tensor], *args, **kwargs) -> list[torch.Tensor]:
        shapes.extend(tuple(matrix.shape) for matrix in matrices)
        return original(matrices, *args, **kwargs)

    optim.newton_schulz.newton_schulz5_batched = recorded
    try:
        for step in range(2):  # the second step holds what the first made: g_prev, MARS-exact's stash
            steps.optimizer_step(step)
    finally:
        optim.newton_schulz.newton_schulz5_batched = original
    kind_of_shape = {tuple(p.shape): kind for kind, params in parameter_kinds(model).items() for p in params}
    largest = max(counts, key=lambda c: sum(cost.own + cost.kept_gradients + cost.per_tensor + cost.per_row
                                            for cost in c.values()))
    has_sides = any(state_layout(v, p) == "sides" for p, state in optimizer.state.items() for v in state.values())
    return OptimizerProfile(largest, frozenset(kind_of_shape[s] for s in shapes), has_sides)


def state_layout(value, p: torch.Tensor) -> str | None:
    """How an optimizer's state entry for parameter p is laid out: "elements" (p's shape), "tensor" (one number),
    "rows" (a number per block of p's rows: Adam-mini's v), "sides" (matrices sized by p's sides, or a list of
    them: SOAP's statistics and bases, Kron's preconditioners); None: not a tensor."""
    if isinstance(value, (list, tuple)):
        return "sides" if any(torch.is_tensor(v) for v in value) else None
    if not torch.is_tensor(value):
        return None
    if value.shape == p.shape and value.numel() > 1:
        return "elements"
    if value.numel() == 1:
        return "tensor"
    if value.ndim == 1 and value.numel() <= p.shape[0]:
        return "rows"
    return "sides"


def _count_state(model: torch.nn.Module, optimizer: torch.optim.Optimizer, gradient_storages: set[int]
                 ) -> dict[str, StateCost]:
    """Bytes of state per element, per tensor and per row, by kind (each storage counted once); the "sides"
    state is side_state's, counted at the real model's size."""
    seen, costs = set(), {}
    for kind, params in parameter_kinds(model).items():
        own = kept = per_tensor = per_row = 0
        for p in params:
            for value in optimizer.state.get(p, {}).values():
                layout = state_layout(value, p)
                if layout in (None, "sides") or value.untyped_storage().data_ptr() in seen:
                    continue
                seen.add(value.untyped_storage().data_ptr())
                size = value.numel() * value.element_size()
                if layout == "elements" and value.untyped_storage().data_ptr() in gradient_storages:
                    kept += size
                elif layout == "elements":
                    own += size
                elif layout == "tensor":
                    per_tensor += size
                else:
                    per_row += size
        elements = sum(p.numel() for p in params)
        costs[kind] = StateCost(own / elements, kept / elements, per_tensor / len(params),
                                per_row / sum(p.shape[0] for p in params))
    return costs


@dataclass(frozen=True)
class SideState:
    """An optimizer's "sides" state (state_layout) at the real model's widths: each tensor's shape and element
    size, for the root's parameters (embeddings, head, final norm) and for one block's (every block's is the
    same); and whether FSDP shards the tensors on dim 0 (Kron's preconditioner stacks, over their blocks) or
    every rank holds them whole (SOAP's statistics and bases): the optimizer's side_state_sharded."""

    root: tuple[tuple[tuple[int, ...], int], ...]
    block: tuple[tuple[tuple[int, ...], int], ...]
    sharded: bool

    def held(self, n_layer: int, world_size: int, rank: int = 0) -> float:
        """Bytes rank holds of it for n_layer blocks, sharded over world_size ranks (1: whole): a sharded
        tensor's rows on that rank (torch.chunk's: the last ranks' fewer or none; rank 0 holds the most)."""

        def held_bytes(tensors: tuple[tuple[tuple[int, ...], int], ...]) -> int:
            rows = (lambda n: row_blocks(n, world_size)[rank]) if self.sharded else (lambda n: n)
            return sum(size * rows(shape[0]) * math.prod(shape[1:]) for shape, size in tensors)

        return held_bytes(self.root) + n_layer * held_bytes(self.block)


_SIDE_STATES: dict[str, SideState] = {}


def side_state(cfg: TrainConfig) -> SideState:
    """A step of cfg's optimizer on cfg's model with one block, built on the meta device (the real widths, no
    memory, no arithmetic): its "sides" state, which the probe's small shapes cannot scale up."""
    from optim import build_optimizer

    model_args = cfg.model_args() | dict(n_layer=1)
    key = state_key(cfg, sorted(model_args.items()))
    if key not in _SIDE_STATES:
        with torch.device("meta"):
            model = GPT(GPTConfig(**model_args))
        optimizer = build_optimizer(model, dataclasses.replace(cfg, device="cpu", compile=False), "cpu")
        for p in model.parameters():
            p.grad = torch.empty_like(p)
        optimizer.step()  # (SOAP and Kron make their statistics, bases and preconditioners in their first step)
        in_block = {id(p) for p in model.transformer.h.parameters()}
        root, block = [], []
        for p in model.parameters():
            for name, value in optimizer.state.get(p, {}).items():
                if state_layout(value, p) != "sides":
                    continue
                if not hasattr(optimizer, "side_state_sharded"):  # (how FSDP lays it out is the optimizer's to say)
                    raise InputError(f"bench.memory does not model {type(optimizer).__name__}'s state {name!r}: "
                                     "neither laid out as its parameter, one number, nor a number per block of rows; "
                                     "declare side_state_sharded on the optimizer (whether FSDP shards it on dim 0)")
                tensors = [t for t in tree_leaves(value) if torch.is_tensor(t)]
                (block if id(p) in in_block else root).extend((tuple(t.shape), t.element_size()) for t in tensors)
        _SIDE_STATES[key] = SideState(tuple(root), tuple(block), optimizer.side_state_sharded)
    return _SIDE_STATES[key]


# ----------------------------------------------------------------------------- memory


@dataclass
class Item:
    part: str  # parameters | gradients | optimizer state | activations | logits | workspace
    key: str  # what tests/test_memory.py compares with a measurement
    what: str
    bytes: float
    added: bool = True  # False: shown, but it does not coexist with what is added in its stead


def memory(run: Run, rank: int = 0) -> list[Item]:
    """The model of each part of the memory rank holds (see the module docstring)."""
    if run.cfg.fused_cross_entropy:
        raise InputError("bench.memory models the logits path of the loss, not fused_cross_entropy's chunks; "
                         "leave --fused_cross_entropy out")
    tensors, rank = model_tensors(run.cfg), rank if run.fsdp else 0  # (under DDP every rank holds the same)
    return (parameter_items(run, tensors, rank) + gradient_items(run, tensors, rank)
            + [state_item(run, tensors, rank)] + moment_items(run, tensors)
            + [Item("workspace", "workspace", "CUDA context, cuBLAS/flash workspaces, NCCL buffers (a constant)"
                    if run.cuda else "none on CPU", WORKSPACE_BYTES if run.cuda else 0.0)])


def total(items: list[Item]) -> float:
    return sum(item.bytes for item in items if item.added)


def allocated_prediction(cfg: TrainConfig, world_size: int, ddp_wrapped: bool) -> float:
    """The part of the model that torch.cuda.max_memory_allocated sees on rank 0: all but the workspace (the
    CUDA context and NCCL's buffers lie outside torch's allocator), and DDP's buckets only if DDP wraps the
    model (bench.gpu without torchrun does not)."""
    items = memory(Run(cfg, world_size))
    return sum(item.bytes for item in items if item.added and item.key != "workspace"
               and (ddp_wrapped or item.key != "buckets"))


def held_bytes(tensors: list[Tensor], n: int, rank: int, padded: bool, element_bytes: float = 4) -> float:
    """Bytes rank holds of tensors split over n ranks: its rows, or (padded) FSDP2's padded blocks."""
    return element_bytes * sum(t.padded(n) if padded else t.local(n, rank) for t in tensors)


def parameter_items(run: Run, tensors: list[Tensor], rank: int) -> list[Item]:
    n = run.shards()
    items = [Item("parameters", "weights", "fp32 weights" + (f", 1/{n} (padded blocks)" if run.fsdp else ""),
                  held_bytes(tensors, n, rank, padded=run.fsdp))]
    if run.fsdp:
        root = [t for t in tensors if t.block is None]
        block = [t for t in tensors if t.block == 0]
        gathered = held_bytes(root, n, rank, True, run.compute_bytes) * n
        gathered += 2 * held_bytes(block, n, rank, True, run.compute_bytes) * n
        items.append(Item("parameters", "gathered", f"gathered {'bf16' if run.low_precision else 'fp32'} weights: "
                          "the root (kept through the backward) and two blocks", gathered))
    return items


def gradient_items(run: Run, tensors: list[Tensor], rank: int) -> list[Item]:
    n = run.shards()
    if not run.fsdp:
        whole = held_bytes(tensors, 1, 0, padded=False)
        return [Item("gradients", "gradients", "fp32 gradients", whole),
                Item("gradients", "buckets", "DDP's gradient buckets (a second fp32 copy)", whole)]
    shards = held_bytes(tensors, n, rank, padded=True)
    block = [t for t in tensors if t.block == 0]
    # the block's gradient as autograd makes it (compute dtype), and the fp32 reduce-scatter input
    reduce_scatter = (run.compute_bytes + 4) * n * held_bytes(block, n, rank, True, 1)
    items = [Item("gradients", "gradients", f"fp32 gradient shards, 1/{n} (padded blocks)", shards),
             Item("gradients", "reduce-scatter", "one block's gradient and reduce-scatter input", reduce_scatter)]
    if run.grad_accum > 1:  # the whole model's gradients, which become the shards block by block
        items[0].added = False
        items.insert(1, Item("gradients", "accumulated", f"unsharded fp32 gradients accumulated over "
                             f"{run.grad_accum} micro-steps (FSDP2 without sync)", 4 * sum(t.numel for t in tensors)))
    return items


def state_item(run: Run, tensors: list[Tensor], rank: int) -> Item:
    profile = optimizer_profile(run.cfg)
    costs, n = profile.state, run.shards()
    state = sum(costs[t.kind].own * t.local(n, rank) + costs[t.kind].per_tensor + costs[t.kind].per_row * t.shape[0]
                for t in tensors)
    if profile.has_sides:
        state += side_state(run.cfg).held(run.cfg.model_args()["n_layer"], n, rank)
    if run.fsdp:
        # A kept gradient is a view of its FSDP unit's reduce-scatter output, which it keeps whole (the unit's
        # other gradients, 1-D ones too, and the padding)
        for unit in {t.block for t in tensors}:
            of_unit = [t for t in tensors if t.block == unit]
            state += max(costs[t.kind].kept_gradients for t in of_unit) * sum(t.padded(n) for t in of_unit)
    else:
        state += sum(costs[t.kind].kept_gradients * t.numel for t in tensors)
    per_weight = state / held_bytes(tensors, n, rank, padded=False)
    return Item("optimizer state", "optimizer state",
                f"{run.cfg.hyperparameters.display_name()}: {per_weight:.2f} x its fp32 weights", state)


def moment_items(run: Run, tensors: list[Tensor]) -> list[Item]:
    """Activations, logits and (DDP under autocast) the weights' bf16 copies of one micro-batch, at the
    moment of the step where their sum is largest (module docstring)."""
    cfg = run.cfg
    gpt = GPTConfig(**cfg.model_args())
    tokens, C, h, V = cfg.micro_batch_size * gpt.block_size, gpt.n_embd, gpt.n_head, gpt.vocab_size
    a = run.compute_bytes
    checkpointed = cfg.activation_checkpointing
    residual = 2 if run.fsdp and run.low_precision else 4  # FSDP's bf16 weights make a bf16 residual stream
    llama = gpt.architecture == "llama"
    if any(components(gpt)[k] != own for k, own in OWN_COMPONENTS[gpt.architecture].items()):
        raise InputError(f"bench.memory models GPT-2 and the Llama as they are; this model swaps in "
                         f"{components(gpt)}: measure it instead (torch.cuda.max_memory_allocated)")
    H = mlp_hidden(gpt)  # the MLP's hidden width
    if llama:  # (the module docstring's Llama terms)
        block = 16 * C + 8 + 4 * h + a * (7 * C + 4 * H) + (2 if a != 4 else 1) * a * C
    else:
        block = 8 * C + 14 * a * C + 16 + 4 * h
    if checkpointed:
        blocks = gpt.n_layer * residual * C
        recompute = block - (4 * C if residual == 4 else 0)  # LayerNorm saves an fp32 input itself, else a copy
    else:
        blocks, recompute = gpt.n_layer * block, 0
    # token ids and targets (int64); positions (int64), or a Llama's rotary tables (fp32 cos and sin), which each
    # attention layer makes and saves (under checkpointing, the one recomputed block's)
    rotary = 4 * gpt.block_size * (C // h) * (1 if checkpointed else gpt.n_layer)
    batch = 16 * tokens + (rotary if llama else 8 * gpt.block_size)
    # ln_f's input and statistics (a Llama's RMSNorm: its input, 1/rms and the normalised input), lm_head's input
    head = (8 * C + 4 if llama else 4 * C + 8) + a * C
    # In a block's backward, beyond its saved tensors: the residual stream's gradient (and its cast to the
    # compute dtype for the block's branch, where the two differ) and one more MLP-wide gradient (GELU's
    # output's, then its input's); an MLP weight's gradient in the compute dtype, before it is added to p.grad
    # (FSDP: the block's unsharded gradient, in "reduce-scatter"); and the head's gradient of the tied
    # embedding, held until the embedding's backward adds its own.
    # (A Llama's SwiGLU backward holds two H-wide gradients at once, the product's and one factor's, and no
    # weight gradient then: measured, tests/test_memory.py.)
    flowing = residual * C + (a * C if a != residual else 0) + (2 * a * H if llama else 4 * a * C)
    weight_gradient = 0 if run.fsdp or llama else 4 * C * C * a
    tied_gradient = (a if run.fsdp else 4) * V * C if gpt.tie_embeddings else 0  # (untied: the head's own .grad)
    # DDP under autocast: the bf16 copy of each matrix (the blocks' and the tied head's; the head's backward
    # comes first)
    copies = {"all": 0, "head": 0, "block": 0}
    if run.low_precision and not run.fsdp:
        matrices = [t for t in tensors if t.kind in ("attention", "mlp")]
        copies = {"all": 2 * (sum(t.numel for t in matrices) + V * C), "head": 2 * V * C,
                  "block": 2 * sum(t.numel for t in matrices if t.block == 0)}
    # The cross-entropy's forward: the logits, their fp32 cast under autocast (the logits themselves in fp32)
    # and log-softmax's fp32 output; and, under autocast, ln_f's fp32 output, which GPT.forward holds until it
    # returns (lm_head's saved input is its cast). The loss's backward: log-softmax's saved output, its gradient
    # (nll_loss's) and its input's. train.py binds only the loss, so none is left in a block's backward.
    cast = 4 if a != 4 else 0
    moments = {  # name: (activations, logits, copies, what the logits term is)
        "the forward's end": (tokens * (blocks + head + cast * C) + batch, tokens * (a + 4 + cast) * V,
                              copies["all"], f"{'bf16' if a == 2 else 'fp32'} logits"
                              + (", their fp32 cast" if cast else "") + " and fp32 log-softmax"),
        "the loss's backward": (tokens * (blocks + head) + batch, tokens * 12 * V,
                                copies["head"] if checkpointed else copies["all"],
                                "fp32 log-softmax and the gradients of it and of its input"),
        "a block's backward": (tokens * (blocks + recompute + flowing) + batch + weight_gradient + tied_gradient,
                               0, copies["block"] if checkpointed else copies["all"] - copies["head"],
                               "none (freed by the loss's backward)"),
    }
    moment = max(moments, key=lambda name: sum(moments[name][:3]))
    acts, logits, copied, logits_what = moments[moment]
    what = (f"micro-batch {cfg.micro_batch_size} x {gpt.block_size} tokens, "
            + ("each block's input + one block recomputed" if checkpointed else "every block") + f"; at {moment}")
    items = [Item("activations", "activations", what, acts),
             Item("logits", "logits", logits_what, logits)]
    if copied:
        items.insert(0, Item("parameters", "autocast copies", f"bf16 copies of the matrices (autocast), at {moment}",
                             copied))
    return items


# ----------------------------------------------------------------------------- communication


def communication(run: Run) -> dict[str, float]:
    """Bytes a rank receives per optimizer step, by collective (the busiest rank's where they differ)."""
    tensors, n, passes = model_tensors(run.cfg), run.world_size, run.passes
    if n == 1:
        return {}
    ring = (n - 1) / n
    profile = optimizer_profile(run.cfg)
    matrices = [t for t in tensors if t.kind in profile.newton_schulz_kinds]
    ns5_bytes = 2 if run.cuda else 4  # optim.newton_schulz.ns5_dtype
    out = {}
    if not run.fsdp:
        out["all-reduce (fp32 gradients)"] = passes * 2 * ring * 4 * sum(t.numel for t in tensors)
        if matrices:
            out["Newton-Schulz results"] = max(received_bytes([t.numel for t in matrices], ns5_costs(matrices), n,
                                                              ns5_bytes))
        return out
    whole = {unit: n * held_bytes([t for t in tensors if t.block == unit], n, 0, True, 1)
             for unit in {t.block for t in tensors}}
    blocks = sum(size for unit, size in whole.items() if unit is not None)
    micro_steps = passes * run.grad_accum
    out["all-gather (weights)"] = micro_steps * ring * run.compute_bytes * (2 * blocks + whole[None])
    out["reduce-scatter (fp32 gradients)"] = passes * ring * 4 * sum(whole.values())
    if matrices:
        gather, back = ns5_exchange(matrices, n, ns5_bytes)
        out["Newton-Schulz gather"], out["Newton-Schulz return"] = max(gather), max(back)
    return out


def ns5_costs(matrices: list[Tensor]) -> list[int]:
    """What the owner plan balances (optim.newton_schulz.newton_schulz5_across_ranks): each matrix's NS5 FLOPs."""
    return [ns5_flops(*t.shape) for t in matrices]


def ns5_exchange(matrices: list[Tensor], n: int, element_bytes: int) -> tuple[list[int], list[int]]:
    """Bytes each rank receives in optim.sharding.on_owner_ranks' two all-to-alls (Newton-Schulz's): the other
    ranks' rows of the matrices it owns, then its rows of the others' results."""
    owners, _ = balanced_owners(ns5_costs(matrices), n)
    gather = [sum(t.numel - t.local(n, r) for t, owner in zip(matrices, owners) if owner == r) for r in range(n)]
    back = [sum(t.local(n, r) for t, owner in zip(matrices, owners) if owner != r) for r in range(n)]
    return [element_bytes * b for b in gather], [element_bytes * b for b in back]


# ----------------------------------------------------------------------------- the command


def describe(run: Run) -> str:
    cfg, gpt = run.cfg, GPTConfig(**run.cfg.model_args())
    params = sum(t.numel for t in model_tensors(cfg))
    parallel = f"FSDP over {run.world_size}" if run.fsdp else f"DDP over {run.world_size}"
    return (f"{cfg.model} ({params / 1e6:.0f}M parameters, {gpt.n_layer} layers, n_embd {gpt.n_embd}), "
            f"{cfg.hyperparameters.display_name()}, {parallel}"
            + (" + activation checkpointing" if cfg.activation_checkpointing else "")
            + f", {'bf16 autocast' if run.low_precision else 'fp32'} on {'CUDA' if run.cuda else 'CPU'}; "
            f"micro-batch {cfg.micro_batch_size} x "
            f"{run.grad_accum} accumulation x {run.passes} pass(es) per step")


def print_run(run: Run) -> None:
    items = memory(run)
    print(f"# {describe(run)}")
    print("memory per GPU (rank 0), each part at its largest during a step:")
    for part in dict.fromkeys(item.part for item in items):
        of_part = [item for item in items if item.part == part]
        if len(of_part) == 1:
            print(f"  {part:<16} {total(of_part) / GB:8.2f} GB  {of_part[0].what}")
            continue
        print(f"  {part:<16} {total(of_part) / GB:8.2f} GB")
        for item in of_part:
            note = "" if item.added else "  (not added: the accumulated gradients become them, block by block)"
            print(f"    {item.bytes / GB:8.2f} GB  {item.what}{note}")
    comms = communication(run)
    if comms:
        print("communication per step, bytes each rank receives:")
        for name, size in comms.items():
            print(f"  {name:<32} {size / GB:8.2f} GB")
        print(f"  {'total':<32} {sum(comms.values()) / GB:8.2f} GB")
    print(f"total per GPU: {total(items) / GB:.2f} GB")


# docs/memory.md's tables (once README.md's, hence --readme): model sizes and optimizers (bench.gpu's variants: a paper config and its overrides)
SIZES = ("small", "medium", "large", "xl")
README_OPTIMIZERS = ("adamw", "mars-approx", "mars-exact", "muon")
LAYOUTS = (("--data_parallel=ddp",), ("--data_parallel=fsdp",),
           ("--data_parallel=fsdp", "--activation_checkpointing=True"))


def paper_config(size: str, variant: str, *overrides: str) -> TrainConfig:
    """The paper config of a model size and a benchmark variant (e.g. mars-exact), with overrides
    (bench.recipes)."""
    return load_config([*paper_config_args(size, variant)[0], *overrides])


def print_readme_tables(world_size: int = 8) -> None:
    n = world_size
    print(f"| model (micro-batch) | optimizer | DDP over {n} | FSDP over {n} | FSDP over {n} + AC |")
    print("| --- | --- | --- | --- | --- |")
    for size in SIZES:
        for variant in README_OPTIMIZERS:
            runs = [Run(paper_config(size, variant, *layout), n) for layout in LAYOUTS]
            cells = " | ".join(f"{total(memory(run)) / GB:.1f} GB" for run in runs)
            cfg = runs[0].cfg
            print(f"| {size} ({cfg.micro_batch_size}) | {cfg.hyperparameters.display_name()} | {cells} |")
    print()
    print("| model, ranks (accumulation) | optimizer | DDP all-reduce | DDP Newton-Schulz | FSDP all-gather "
          "| FSDP reduce-scatter | FSDP Newton-Schulz gather + return |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for size in ("small", "xl"):
        for n in (8, 32):
            for variant in ("adamw", "mars-exact", "muon"):  # (MARS-approx communicates as AdamW does)
                ddp, fsdp = (Run(paper_config(size, variant, *layout), n) for layout in LAYOUTS[:2])
                name = "AdamW, MARS-approx" if variant == "adamw" else ddp.cfg.hyperparameters.display_name()
                by_ddp, by_fsdp = communication(ddp), communication(fsdp)
                ns5 = by_fsdp.get("Newton-Schulz gather", 0) + by_fsdp.get("Newton-Schulz return", 0)
                print(f"| {size}, {n} ({ddp.grad_accum}) | {name} | "
                      f"{by_ddp['all-reduce (fp32 gradients)'] / GB:.2f} GB | "
                      f"{by_ddp.get('Newton-Schulz results', 0) / GB:.2f} GB | "
                      f"{by_fsdp['all-gather (weights)'] / GB:.2f} GB | "
                      f"{by_fsdp['reduce-scatter (fp32 gradients)'] / GB:.2f} GB | {ns5 / GB:.2f} GB |")


    print()
    print(f"| optimizer | state, x fp32 weights | XL, DDP over {world_size} | XL, FSDP over {world_size} + AC |")
    print("| --- | --- | --- | --- |")
    for name in OPTIMIZERS:  # every optimizer of the registry on GPT-2 XL's paper run (bench.recipes' table)
        runs = [Run(paper_config("xl", "mars-approx" if name == "mars" else name, *layout), world_size)
                for layout in (LAYOUTS[0], LAYOUTS[2])]
        items = [memory(run) for run in runs]
        state = next(item for item in items[0] if item.key == "optimizer state")
        ratio = state.bytes / held_bytes(model_tensors(runs[0].cfg), 1, 0, padded=False)
        cells = " | ".join(f"{total(of_run) / GB:.1f} GB" for of_run in items)
        print(f"| {runs[0].cfg.hyperparameters.display_name()} | {ratio:.2f} | {cells} |")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.memory",
                                     description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
                                     allow_abbrev=False)
    parser.add_argument("--world_size", type=int, default=1, help="GPUs the run is spread over")
    parser.add_argument("--readme", action="store_true", help="print docs/memory.md's tables")
    args, config_args = parser.parse_known_args(argv)
    bench.print_header()
    if args.readme:
        print_readme_tables()
        return
    if args.world_size < 1:
        parser.error("--world_size must be at least 1")
    if not config_args:
        parser.error("give a config: python -m bench.memory CONFIG [--key=value ...] --world_size N")
    with exit_on_input_error():  # a config error (e.g. a batch the GPU count does not divide): one line
        run = Run(load_config(config_args), args.world_size)
        run.cfg.grad_accum_steps(run.world_size)
        print_run(run)


if __name__ == "__main__":
    sys.exit(main())
