"""
bench/memory.py's model of memory per GPU against what is really held, on CPU:
  - under torchrun on gloo (2 and 4 ranks, DDP and FSDP, AdamW, MARS-approx, MARS-exact, Muon, Kron, SOAP, Shampoo),
    the bytes each rank holds in parameters, gradients and optimizer state (their tensors' storages, each counted
    once) during real training steps through train.StepContext, with gradient accumulation;
  - the peak of the tensors a forward-backward pass makes (activations and logits), fp32 and bf16 autocast,
    with and without activation checkpointing;
  - the command's last line for the issue's target (GPT-2 XL, MARS-exact, FSDP over 8 with activation
    checkpointing: at most 24 GB), and docs/memory.md's tables as the command prints them.
The file is also the torchrun script: its __main__ measures every variant and rank 0 saves them.
"""

import gc
import os
import re
import subprocess
import sys
import warnings
from contextlib import nullcontext

import pytest
import torch
import torch.distributed as dist
from torch.distributed.tensor import DTensor
from torch.multiprocessing.reductions import StorageWeakRef
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

import train
from bench.memory import (
    RandomBatches, Run, memory, model_tensors, moment_items, paper_config, print_readme_tables, print_run,
)
from conftest import PYTHON, REPO, torchrun
from model import GPT, GPTConfig
from optim import OPTIMIZERS, build_optimizer, load_config
from config.cells import mini_recipes
from parallel import parallelize
from runtime import Runtime, autocast_context, close_runtime, join_process_group

# (Kron, SOAP and Shampoo: state sized by each side of a parameter, Kron's sharded over its blocks, SOAP's and
# Shampoo's whole on every rank)
RECIPES = {name: mini_recipes()[name].args.split() for name in ("adamw", "mars_approx", "mars_exact", "muon", "kron",
                                                                 "soap", "shampoo")}
# Rows that split unevenly over 4 ranks (c_attn 102, the vocabulary 90, positions 30, biases and LayerNorms 34),
# so FSDP2's padded blocks differ from the rows a rank holds; two micro-steps per pass.
SHAPE = ["--n_layer=2", "--n_head=2", "--n_embd=34", "--block_size=30", "--vocab_size=90", "--bias=True",
         "--micro_batch_size=2", "--compile=False", "--device=cpu"]
GRAD_ACCUM, STEPS = 2, 2  # the second step's state holds what the first made (g_prev)
# ranks: the data_parallel settings measured (what DDP holds does not depend on the rank count; FSDP's
# padding differs between 2 and 4 ranks)
RANKS = {2: "ddp,fsdp", 4: "fsdp"}
TOLERANCE = 0.05  # the bound; the model is exact here, so any term it gets wrong shows


def variant_config(name: str, data_parallel: str, world_size: int):
    return load_config([*RECIPES[name], *SHAPE, f"--data_parallel={data_parallel}",
                        f"--total_batch_size={2 * 30 * world_size * GRAD_ACCUM}"])


def storage_bytes(tensors) -> dict[int, int]:
    """{storage address: bytes} of the tensors (a DTensor's local block)."""
    out = {}
    for t in tensors:
        if t is not None:
            storage = (t.to_local() if isinstance(t, DTensor) else t).untyped_storage()
            out[storage.data_ptr()] = storage.nbytes()
    return out


def live_gradients() -> dict[int, int]:
    """{storage address: bytes} of every gradient a live tensor holds: FSDP2's unsharded ones too (the .grad
    of its own unsharded parameters, which no module names between micro-steps)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return storage_bytes(o.grad for o in gc.get_objects()
                             if isinstance(o, torch.Tensor) and o.is_leaf and o.grad is not None)


def measure(name: str, data_parallel: str, rt: Runtime) -> dict[str, int]:
    """What this rank holds while STEPS steps of a variant run: at each optimizer step (the largest), its
    weights, gradients and optimizer state; at the first pass's last micro-step, the gradients accumulated
    so far; DDP's buckets of the last pass."""
    cfg = variant_config(name, data_parallel, rt.world_size)
    torch.manual_seed(cfg.seed)
    raw_model = GPT(GPTConfig(**cfg.model_args()))
    model = parallelize(raw_model, cfg, rt)
    optimizer = build_optimizer(raw_model, cfg, "cpu")
    params = list(raw_model.parameters())
    steps = train.StepContext(model, params, optimizer, torch.amp.GradScaler("cpu", enabled=False),
                              RandomBatches(cfg.vocab_size, cfg.block_size), cfg, rt, nullcontext())
    held = dict(weights=0, gradients=0, state=0, accumulated=0, buckets=0)

    def at_step(*_) -> None:
        grads = storage_bytes(p.grad for p in params)
        state = storage_bytes(t for s in optimizer.state.values() for t in tree_leaves(s) if torch.is_tensor(t))
        held["weights"] = max(held["weights"], sum(storage_bytes(params).values()))
        held["gradients"] = max(held["gradients"], sum(grads.values()))
        held["state"] = max(held["state"], sum(v for k, v in state.items() if k not in grads))

    micro_steps, buckets = [0], {}

    def at_micro_step(*_) -> None:
        micro_steps[0] += 1
        if micro_steps[0] == GRAD_ACCUM:  # the first pass's last micro-step: the others' gradients are held
            held["accumulated"] = sum(live_gradients().values())
        if micro_steps[0] % GRAD_ACCUM == 0:
            buckets.clear()  # (DDP rebuilds its buckets after the first pass: count one pass's)

    optimizer.register_step_pre_hook(at_step)
    raw_model.register_forward_pre_hook(at_micro_step)
    if data_parallel == "ddp":
        from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook

        def recorded_allreduce(state, bucket):
            buckets.update(storage_bytes([bucket.buffer()]))
            return allreduce_hook(state, bucket)

        model.register_comm_hook(None, recorded_allreduce)
    for step in range(STEPS):
        steps.optimizer_step(step)
    if data_parallel == "ddp":
        held["buckets"] = sum(buckets.values())
    return held


@pytest.fixture(scope="module")
def measured(tmp_path_factory) -> dict:
    """{ranks: {(variant, data_parallel): [each rank's measurements]}}, from torchrun runs of this file."""
    results = {}
    for nproc, layouts in RANKS.items():
        out = tmp_path_factory.mktemp("memory") / f"ranks{nproc}.pt"
        subprocess.run([*torchrun(nproc), __file__, str(out), layouts], check=True, cwd=REPO, timeout=600,
                       env={**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"})
        results[nproc] = torch.load(out, weights_only=True)
    return results


# the model's item for each measurement (FSDP2 without sync accumulates unsharded gradients; DDP in p.grad)
COMPARED = {"weights": "weights", "gradients": "gradients", "state": "optimizer state", "accumulated": "accumulated",
            "buckets": "buckets"}


@pytest.mark.parametrize("nproc", list(RANKS))
def test_held_bytes_match_the_model(measured, nproc):
    """Each rank's weights, gradients (at the step, and accumulated over micro-steps), optimizer state and
    DDP buckets, within 5% of bench.memory's prediction for that rank."""
    for (name, data_parallel), ranks in measured[nproc].items():
        run = Run(variant_config(name, data_parallel, nproc), nproc)
        for rank, held in enumerate(ranks):
            predicted = {item.key: item.bytes for item in memory(run, rank)}
            predicted.setdefault("accumulated", predicted["gradients"])  # DDP accumulates in p.grad
            for measurement, key in COMPARED.items():
                if key not in predicted:
                    continue
                assert held[measurement] > 0, (name, data_parallel, rank, measurement)
                assert held[measurement] == pytest.approx(predicted[key], rel=TOLERANCE), \
                    (name, data_parallel, nproc, rank, measurement)


class LiveTensors(TorchDispatchMode):
    """The peak bytes of tensor storages made inside the mode and alive together (each storage once; those
    that existed before it, such as the weights, are left out)."""

    def __init__(self, existing: list[torch.Tensor]):
        super().__init__()
        self.existing = {t.untyped_storage().data_ptr() for t in existing}
        self.live: dict[int, tuple[StorageWeakRef, int]] = {}
        self.peak = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in tree_leaves(out):
            if isinstance(t, torch.Tensor) and t.untyped_storage().data_ptr() not in self.existing:
                storage = t.untyped_storage()
                self.live.setdefault(storage._cdata, (StorageWeakRef(storage), storage.nbytes()))
        self.live = {k: v for k, v in self.live.items() if not v[0].expired()}
        self.peak = max(self.peak, sum(size for _, size in self.live.values()))
        return out


class FixedBatch:
    """One micro-batch, handed out as fresh tensors (as train.py's copies to a GPU are)."""

    def __init__(self, vocab_size: int, block_size: int, micro_batch_size: int):
        self.batch = RandomBatches(vocab_size, block_size).micro_batch(0, 0, micro_batch_size, 0, 1)

    def micro_batch(self, *_) -> tuple[torch.Tensor, torch.Tensor]:
        return tuple(t.clone() for t in self.batch)


# A large vocabulary (the peak at the loss's backward, as in GPT-2; bf16 with checkpointing: the cross-entropy's
# forward, where the autocast copies are all alive) and a small one (at a block's backward).
ACTIVATION_SHAPES = {"vocab 512": ["--n_layer=3", "--n_head=2", "--n_embd=48", "--block_size=32", "--vocab_size=512"],
                     "vocab 32": ["--n_layer=3", "--n_head=2", "--n_embd=48", "--block_size=32", "--vocab_size=32"]}
ACTIVATION_TOLERANCE = 0.02
# The same shapes as a Llama (RMSNorm, rotary tables, SwiGLU of 256): exact but where its peak is at a block's
# backward under bf16 autocast (a small vocabulary), there within 5% (measured: 1.1% over, 4.9% over with
# checkpointing; GPT-2's vocabulary puts the peak at the loss's backward, exact).
LLAMA, LLAMA_BF16_SMALL_VOCAB_TOLERANCE = "llama-124m", 0.05


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("checkpointing", [False, True])
@pytest.mark.parametrize("shape", list(ACTIVATION_SHAPES))
@pytest.mark.parametrize("preset", ["small", LLAMA])
def test_activation_model_matches_the_measured_peak(preset, shape, checkpointing, dtype):
    """The peak of what one micro-step's forward-backward (train.StepContext.forward_backward, the gradients
    already allocated as on later micro-steps) makes: within 2% of bench.memory's activations, logits and
    autocast copies, fp32 and under CPU bf16 autocast (which casts and saves as CUDA's does)."""
    cfg = load_config([f"--model={preset}", *ACTIVATION_SHAPES[shape], "--micro_batch_size=4", "--total_batch_size=128",
                       "--device=cpu", f"--dtype={dtype}", f"--activation_checkpointing={checkpointing}", "--bias=False"])
    torch.manual_seed(0)
    raw_model = GPT(GPTConfig(**cfg.model_args()))
    model = parallelize(raw_model, cfg, Runtime(0, 0, 1, torch.device("cpu")))
    for p in raw_model.parameters():
        p.grad = torch.zeros_like(p)
    steps = train.StepContext(model, list(raw_model.parameters()), None, torch.amp.GradScaler("cpu", enabled=False),
                              FixedBatch(cfg.vocab_size, cfg.block_size, cfg.micro_batch_size), cfg,
                              Runtime(0, 0, 1, torch.device("cpu")), autocast_context("cpu", dtype))
    live = LiveTensors([*raw_model.parameters(), *(p.grad for p in raw_model.parameters())])
    with live:
        steps.forward_backward(0)
    items = moment_items(Run(cfg, 1), model_tensors(cfg))
    predicted = sum(item.bytes for item in items)
    tolerance = LLAMA_BF16_SMALL_VOCAB_TOLERANCE if (preset, shape, dtype) == (LLAMA, "vocab 32", "bfloat16") else \
        ACTIVATION_TOLERANCE
    assert live.peak == pytest.approx(predicted, rel=tolerance), [(i.key, i.bytes, i.what) for i in items]


def test_the_xl_target_and_the_last_line(capsys):
    """GPT-2 XL with MARS-exact, FSDP over 8 GPUs with activation checkpointing, the paper config's micro-batch:
    the command's last line says the total, within the issue's 24 GB."""
    print_run(Run(paper_config("xl", "mars-exact", "--data_parallel=fsdp", "--activation_checkpointing=True"), 8))
    last = capsys.readouterr().out.splitlines()[-1]
    match = re.fullmatch(r"total per GPU: (\d+\.\d\d) GB", last)
    assert match and float(match[1]) <= 24.0, last


@pytest.mark.quick
def test_readme_tables_are_the_commands(capsys):
    """Every row `python -m bench.memory --readme` prints stands in docs/memory.md, as printed."""
    print_readme_tables()
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| ") and " GB |" in line]
    readme = (REPO / "docs" / "memory.md").read_text()
    assert len(rows) == 16 + 12 + len(OPTIMIZERS) and [row for row in rows if row not in readme] == []


if __name__ == "__main__":  # torchrun: tests/test_memory.py OUT DATA_PARALLEL[,DATA_PARALLEL]
    out, layouts = sys.argv[1:]
    torch.set_num_threads(1)
    join_process_group("gloo")
    rt = Runtime(dist.get_rank(), dist.get_rank(), dist.get_world_size(), torch.device("cpu"))
    mine = {(name, data_parallel): measure(name, data_parallel, rt) for name in RECIPES
            for data_parallel in layouts.split(",")}
    everyone = [None] * rt.world_size
    dist.all_gather_object(everyone, mine)
    if rt.is_main:
        torch.save({key: [ranks[key] for ranks in everyone] for key in mine}, out)
    close_runtime()


def test_state_sized_by_sides_is_counted_at_the_real_widths():
    """SOAP's statistics and bases, Kron's preconditioners and Dion's low-rank Q are matrices sized by a parameter's
    sides, which the probe's small model cannot scale up: on GPT-2 small, bench.memory's state (a one-block model on
    the meta device, times its blocks) is, to the byte, what their rules make of each parameter."""
    from optim.dion import dion_rank
    from optim.kron import layout_of

    for name, depth in [("soap", []), ("kron", []), ("kron", ["--n_layer=24"]), ("dion", [])]:  # (a second depth)
        cfg = load_config(["config/gpt2_small.py", f"config/paper_{name}.py", *depth])
        hp, expected = cfg.hyperparameters, 0
        for t in model_tensors(cfg):
            if name == "dion":  # a matrix's momentum and its low-rank Q, min(m, n) x r; AdamW's m, v and step count
                on_dion = t.kind in ("attention", "mlp") and len(t.shape) == 2
                expected += (4 * t.numel + 4 * min(t.shape) * dion_rank(t.shape, hp.rank_fraction, hp.rank_multiple_of)
                             if on_dion else 8 * t.numel + 4)
                continue
            expected += 4 * t.numel * (2 if name == "soap" else 1)  # SOAP's m and v, Kron's m
            if name == "soap" and (len(t.shape) == 2 or hp.precondition_1d):
                expected += 4 * 2 * sum(n * n for n in t.shape if n <= hp.max_precond_dim)  # GG and Q per side
            elif name == "kron":
                layout = layout_of(t.shape, hp.kron_block_size, hp.kron_max_size_triangular, hp.kron_merge_small_dims)
                expected += 4 * layout.blocks * sum(side if diagonal else side * side
                                                    for side, diagonal in zip(layout.padded, layout.diagonal))
        predicted = next(item.bytes for item in memory(Run(cfg, 1)) if item.key == "optimizer state")
        assert predicted == expected, (name, depth)
