"""
GPU benchmark of training steps: per model size and optimizer, tokens/s, MFU, peak memory, and
each step split into forward-backward and optimizer time, with train.py's own step.

    python -m bench.gpu                                   # small, medium: every optimizer; large, xl: memory only
    python -m bench.gpu --models small --optimizers adamw,mars-exact --steps 20 --memory-only ""
    python -m bench.gpu --data-dir data/stdlib            # real tokens (python -m data.quickstart), not random ones
    python -m bench.gpu --cpu-smoke                       # no GPU needed: a tiny model through the same code path
    python -m bench.gpu --models small --optimizers adamw --memory-only "" --micro-batch 32 --profile-steps 3
                                                          # where a step's time goes, by kind of kernel

A row's config is the paper config of its model and optimizer (its cell in config/cells.py,
through optim.load_config, so the registry builds the optimizer as train.py does) with bf16,
compile=True (the model and the optimizers' element-wise rules) and one micro-batch of the config's
micro_batch_size per step (--micro-batch, --grad-accum change that). Each row runs --warmup steps
(compilation, optimizer state), then --steps measured steps, each train.StepContext.optimizer_step as
train.py calls it: CUDA events around every forward-backward pass and optimizer.step (MarkedSteps), read after one
synchronize at the end of the measured steps and none inside them. "other" is the rest of a step
(clipping, MARS-exact's stash, zero_grad, the learning-rate update). tokens/s counts each step's batch
once, as train.py logs it (MARS-exact's second forward-backward adds time, not tokens); MFU is
model.estimate_mfu of it against the device's dense bf16 peak (train.peak_flops: from the GPU's name,
or --peak-flops). Peak memory is torch.cuda.max_memory_allocated over the measured steps: ordinary
steps in the timed rows; in the memory-only rows a log step (with the config's log_diagnostics, which
copy the weights), which is where a run peaks.

--profile-steps N runs N more steps of each timed row under torch.profiler and prints its kernels' time
by kind (matrix products, attention, cross-entropy, ...; KERNEL_KINDS) and the rest of the step ("idle":
launch gaps), --trace-dir writes their Chrome traces; --sdpa picks the attention kernel and --compile-mode
torch.compile's mode, to measure the alternatives.

After the table: the matrix optimizers' timed rows against their floor (Muon, Moonlight, MARS-M, Scion,
SOAP, Kron: whatever declares optim.contract.MatrixProducts): the optimizer step inside the training step,
the FLOPs of the matrix products its steps dispatch (recorded over as many optimizer steps again, alone on random
gradients, uncompiled: its own ops and layouts), the device's rate on those products and their time (the floor),
each product timed alone as the step ran it, after the rows (bench.optimizer_step.measure_floors, the same function
as bench.optimizer_step's floor rows), step / floor, and the whole training step against AdamW's on the same
model. Then torch's fused AdamW against MARS-AdamW, the optimizer step alone on GPT-2-small
tensors (bench.optimizer_step's optimizers; target <= 1.5x, memory-traffic floor 1.43x), by the
kernels' own time and by the span between events, and MARS-exact's whole step against AdamW's
(target <= 2.05x). bench/gpu_round.sh runs the GPU issue's measurements in stages sized to one call of
a lent GPU.

Without a CUDA device it says so and exits 0; --cpu-smoke then runs a tiny model for 2 steps per
optimizer on CPU (eager, fp32), which checks the script's logic and measures nothing of interest.
"""

if not __package__:  # run as a file: the repository's modules (model, data, ...) are not importable
    raise SystemExit("bench/gpu.py is a module of the bench package: run it from the repository root as\n"
                     "    python -m bench.gpu ...")

import argparse
import contextlib
import dataclasses
import gc
import math
import os
import statistics
import sys
import tempfile
import time
import traceback

import numpy as np
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

import train
from bench import print_header
from bench.memory import allocated_prediction
from bench.optimizer_step import (
    FLOOR_COLUMNS, SMOKE_MODEL, SMOKE_SETTINGS, Clock, PeakMemory, floor_cells, make_optimizers, matrix_products,
    measure_floors, recorded_products, recording_steps, steps_on_random_gradients,
)
from bench.recipes import VARIANTS, paper_config_args
from config import CHOICES, TrainConfig, read_config_file
from data.shards import write_shard
from config.models import PRESETS
from model import GPT, GPTConfig
from optim import OPTIMIZERS, build_optimizer, load_config
from optim.contract import Product
from optim.routing import parameter_kinds
from optim.rules import ADAMW, MARS_ADAMW, MARS_LION, UNCORRECTED_EPS_ADAMW
from optim.schedule import set_learning_rates
from parallel import check_parallelism, parallelize
from errors import InputError
from runtime import Runtime, autocast_context, close_runtime, configure_device, init_runtime

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

RULE_KERNELS = (ADAMW, UNCORRECTED_EPS_ADAMW, MARS_ADAMW, MARS_LION)
MARS_ADAMW_TARGET, MARS_ADAMW_FLOOR, MARS_EXACT_TARGET = 1.5, 10 / 7, 2.05
SDPA_BACKENDS = {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION,
                 "efficient": SDPBackend.EFFICIENT_ATTENTION, "math": SDPBackend.MATH}


# ----------------------------------------------------------------------------- timing (Clock: bench.optimizer_step's)


@dataclasses.dataclass
class StepMarks:
    """Marks of one training step: its ends, and (start, end) of each forward-backward and optimizer step."""

    start: object
    end: object = None
    forward_backward: list = dataclasses.field(default_factory=list)
    optimizer: list = dataclasses.field(default_factory=list)


class MarkedSteps(train.StepContext):
    """train.py's step, with marks around every forward-backward pass and optimizer.step call (into the
    `marks` list's last entry, which the caller appends for each step)."""

    def __init__(self, *args, clock: Clock, marks: list[StepMarks]):
        super().__init__(*args)
        self.clock, self.marks = clock, marks
        # Hooks, not a wrapper: scaler.step calls optimizer.step. A subclass's step calling its base's runs
        # them twice, nested (MARSM.step -> Muon.step): the outer call counts.
        self.starts: list = []
        self.optimizer.register_step_pre_hook(self._optimizer_started)
        self.optimizer.register_step_post_hook(self._optimizer_ended)

    def forward_backward(self, batch_step: int, sampled_labels: bool = False) -> torch.Tensor:
        start = self.clock.mark()  # (Sophia's Hessian pass, on sampled labels, is a forward-backward too)
        loss = super().forward_backward(batch_step, sampled_labels)
        if self.marks:
            self.marks[-1].forward_backward.append((start, self.clock.mark()))
        return loss

    def _optimizer_started(self, *_) -> None:
        self.starts.append(self.clock.mark())

    def _optimizer_ended(self, *_) -> None:
        start = self.starts.pop()
        if not self.starts and self.marks:
            self.marks[-1].optimizer.append((start, self.clock.mark()))


# ----------------------------------------------------------------------------- where a step's time goes


# Kinds of kernel, by what their names contain (the first kind that matches): cuBLAS/CUTLASS and
# inductor's matrix templates, the attention kernels of each SDPA backend, inductor's fused kernels
# named after the ops they hold, and on CPU (--cpu-smoke) the aten ops themselves.
KERNEL_KINDS = [
    ("attention", ("flash", "fmha", "attention", "sdpa", "cudnn")),
    ("matmul", ("gemm", "nvjet", "cutlass", "xmma", "cublas", "triton_tem_", "aten::mm", "aten::addmm", "aten::bmm")),
    ("cross-entropy", ("log_softmax", "nll_loss", "cross_entropy")),
    ("layernorm", ("layer_norm",)),
    ("optimizer and clipping", ("multi_tensor", "adam", "_foreach_", "lerp", "addcdiv", "addcmul")),
    ("copies and fills", ("memcpy", "memset", "copy_", "fill")),
    ("communication", ("nccl", "gloo", "all_reduce", "reduce_scatter", "all_gather")),
    ("other inductor kernels", ("triton_",)),
]


def kernel_kind(name: str) -> str:
    lowered = name.lower()
    return next((kind for kind, parts in KERNEL_KINDS if any(part in lowered for part in parts)), "other")


def device_profile(device: torch.device):
    """torch.profiler over the host's ops and, on CUDA, the device's kernels."""
    from torch.profiler import ProfilerActivity, profile

    return profile(activities=[ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else []))


def profile_breakdown(events, steps: int, wall_ms: float, device: torch.device) -> tuple[dict[str, float], list]:
    """ms per step of each kind of kernel (on CPU, of each aten op's own time), their sum ("busy") and the
    rest of the wall time ("idle": launch gaps, host waits), and the ten costliest kernels."""
    on_gpu = device.type == "cuda"
    kernels = {}
    for event in events:
        if getattr(event, "is_user_annotation", False):  # a region's span (Optimizer.step#...), not a kernel
            continue
        if on_gpu and event.device_type != torch.autograd.DeviceType.CUDA:
            continue
        if not on_gpu and not event.key.startswith("aten::"):
            continue
        us = event.self_device_time_total if on_gpu else event.self_cpu_time_total
        kernels[event.key] = kernels.get(event.key, 0.0) + us / 1000 / steps
    kinds = {kind: 0.0 for kind, _ in KERNEL_KINDS} | {"other": 0.0}
    for name, ms in kernels.items():
        kinds[kernel_kind(name)] += ms
    busy = sum(kinds.values())
    kinds = {k: v for k, v in kinds.items() if v > 0} | {"busy": busy, "idle": max(0.0, wall_ms / steps - busy)}
    return kinds, sorted(kernels.items(), key=lambda item: -item[1])[:10]


# ----------------------------------------------------------------------------- one row


@dataclasses.dataclass
class Row:
    model: str
    optimizer: str
    micro_batch: int
    grad_accum: int
    memory_only: bool
    note: str = ""
    step_ms: float | None = None
    forward_backward_ms: float | None = None
    optimizer_ms: float | None = None
    tokens_per_s: float | None = None
    mfu: float | None = None
    peak_bytes: int | None = None
    reserved_bytes: int | None = None  # the caching allocator's peak reservation (CUDA)
    predicted_bytes: float | None = None  # bench.memory's model of what max_memory_allocated sees
    failed: bool = False
    products: list[Product] | None = None  # the matrix products its optimizer's step declares (timed rows)
    recorded: dict | None = None  # the products its steps dispatched, per step (bench.optimizer_step.recorded_products)
    profile: dict[str, float] | None = None  # ms per step by kind of kernel (--profile-steps)
    top_kernels: list[tuple[str, float]] | None = None


def row_config(model: str, variant: str, args: argparse.Namespace, data_dir: str, device: str,
               micro_batch: int = 0, world_size: int = 1) -> tuple[TrainConfig, str]:
    """The paper config of model and variant, set up for the benchmark (micro_batch 0: the config's);
    a note when there is none (that model's AdamW config then, with the optimizer switched)."""
    paths, note = paper_config_args("small" if model == "tiny" else model, variant)
    system = [f"--data_dir={data_dir}", f"--device={device}", f"--peak_flops={args.peak_flops}"]
    if args.cpu_smoke:
        system += ["--dtype=float32", "--compile=False"] + [f"--{k}={v}" for k, v in SMOKE_MODEL.items()]
    else:
        system += ["--dtype=bfloat16", "--compile=True"]
    system += [f"--fused_cross_entropy={args.fused_cross_entropy}", f"--data_parallel={args.data_parallel}",
               f"--activation_checkpointing={args.activation_checkpointing}", f"--compile_mode={args.compile_mode}"]
    if micro_batch:
        system.append(f"--micro_batch_size={micro_batch}")
    # one step is grad_accum micro-batches (the config's micro-batch unless micro_batch sets one)
    files = {k: v for path in paths if not path.startswith("--") for k, v in read_config_file(path).items()}
    micro = micro_batch or files.get("micro_batch_size", TrainConfig.micro_batch_size)
    block_size = SMOKE_MODEL["block_size"] if args.cpu_smoke else files.get("block_size", TrainConfig.block_size)
    system.append(f"--total_batch_size={micro * block_size * args.grad_accum * world_size}")
    cfg = load_config([*paths, *system])
    if args.cpu_smoke and (scaled_down := [f"--{k}={v}" for k, v in SMOKE_SETTINGS.items()
                                           if hasattr(cfg.hyperparameters, k)]):
        cfg = load_config([*paths, *system, *scaled_down])
    return cfg, note


def run_row(row: Row, cfg: TrainConfig, model: torch.nn.Module, raw_model: GPT, rt: Runtime, data: train.Data,
            warmup: int, steps: int, memory: PeakMemory, profile_steps: int = 0, trace: str = "") -> None:
    """Train `warmup` then `steps` steps of cfg's optimizer on model, filling in row's measurements; then
    profile_steps more under torch.profiler (its breakdown into the row; its Chrome trace to `trace`)."""
    autocast = autocast_context(rt.device, cfg.dtype)
    scaler = torch.amp.GradScaler(rt.device.type, enabled=cfg.dtype == "float16")
    optimizer = build_optimizer(raw_model, cfg, rt.device.type)
    row.products = None if row.memory_only else matrix_products(optimizer)
    steps = recording_steps(row.products or [], steps)  # (whole refresh periods: SOAP's refresh every 10 steps)
    params, total_iters, clock = list(raw_model.parameters()), cfg.total_iters(), Clock(rt.device)
    # train.py's log steps add the diagnostics; memory-only rows measure one such step
    log_step_kinds = parameter_kinds(raw_model) if row.memory_only and cfg.log_diagnostics else None

    marks: list[StepMarks] = []  # empty during warmup: no marks kept
    stepper = MarkedSteps(model, params, optimizer, scaler, data.train_batches, cfg, rt, autocast, clock=clock,
                          marks=marks)

    def step(i: int) -> torch.Tensor:
        set_learning_rates(optimizer, i, cfg, total_iters)
        return stepper.optimizer_step(i, log_step_kinds if i >= warmup else None)[0]

    try:
        for i in range(warmup):
            step(i)
        memory.start()  # synchronizes: the measured steps start on an idle device
        for i in range(warmup, warmup + steps):
            marks.append(StepMarks(clock.mark()))
            loss = step(i)
            marks[-1].end = clock.mark()
        clock.synchronize()
        row.peak_bytes = memory.base + memory.peak_extra()
        row.reserved_bytes = memory.peak_reserved()
        if not math.isfinite(loss.item()):
            row.note, row.failed = f"loss {loss.item()}", True
        failed_rules = [k.rule.__name__ for k in RULE_KERNELS if k.compile_failed]
        if cfg.compile and failed_rules:
            row.note = "; ".join(filter(None, [row.note, f"compile failed, eager: {', '.join(failed_rules)}"]))
        if row.memory_only:
            return
        total_ms = clock.ms(marks[0].start, marks[-1].end)
        row.step_ms = total_ms / steps
        row.forward_backward_ms = sum(clock.ms(*pair) for m in marks for pair in m.forward_backward) / steps
        row.optimizer_ms = sum(clock.ms(*pair) for m in marks for pair in m.optimizer) / steps
        row.tokens_per_s = cfg.total_batch_size * steps / (total_ms / 1000)
        flops = train.peak_flops(cfg, rt.device)
        passes = cfg.hyperparameters.gradients_per_step()
        row.mfu = raw_model.estimate_mfu(row.tokens_per_s / rt.world_size, flops, passes) if flops else None
        if profile_steps:
            first = warmup + steps
            with device_profile(rt.device) as profiler:
                start = clock.mark()
                for i in range(first, first + profile_steps):
                    step(i)
                end = clock.mark()
                clock.synchronize()
            row.profile, row.top_kernels = profile_breakdown(profiler.key_averages(), profile_steps,
                                                             clock.ms(start, end), rt.device)
            if trace:
                profiler.export_chrome_trace(trace)
        if row.products:  # the products its steps dispatch (their floor), over as many steps alone, uncompiled
            try:
                row.recorded = recorded_products(optimizer, lambda: steps_on_random_gradients(optimizer, params, steps))
            except RuntimeError as e:  # (products on DTensors: no floor for the row, whose times stand)
                row.note = "; ".join(filter(None, [row.note, f"no floor: {e}"]))
    finally:  # free the state now, even if a traceback keeps this frame alive (bench_model collects)
        optimizer.zero_grad(set_to_none=True)
        optimizer.state.clear()


def synthetic_shards(folder: str, block_size: int, vocab_size: int) -> str:
    """A train and a val shard of uniformly random token ids (below GPT-2's 50257) in folder; returns folder."""
    rng = np.random.default_rng(0)
    for name, count in (("random_train_000001.bin", 1 << 21), ("random_val_000000.bin", 8 * (block_size + 1))):
        write_shard(os.path.join(folder, name), rng.integers(0, min(vocab_size, 50257), count).astype(np.uint16))
    return folder


def bench_model(model_name: str, variants: list[str], args: argparse.Namespace, rt: Runtime, data_dir: str,
                memory_only: bool, memory: PeakMemory) -> list[Row]:
    """One row per variant on one model, spread as train.py spreads it (parallel.parallelize: compiled, and
    under torchrun DDP-wrapped or FSDP-sharded), compiled once (as a fresh process would) and reset to its
    initial weights before each variant (under FSDP, which shards a model in place, a fresh one each time)."""
    rows, model, raw_model, initial, data = [], None, None, None, None
    for variant in variants:
        # memory-only rows: the run scripts' micro-batch, the config's
        micro_batch = args.micro_batch if not memory_only or args.cpu_smoke else 0
        cfg, note = row_config(model_name, variant, args, data_dir, str(rt.device), micro_batch, rt.world_size)
        row = Row(model_name, cfg.hyperparameters.display_name(), cfg.micro_batch_size, args.grad_accum, memory_only, note)
        print(f"[bench.gpu] {model_name}, {row.optimizer}: running", file=sys.stderr, flush=True)
        try:
            if raw_model is None or cfg.data_parallel == "fsdp":
                if cfg.compile and raw_model is None:
                    import torch._dynamo as dynamo

                    dynamo.reset()  # each model compiles as in its own run (static shapes, fresh limits)
                    gc.collect()  # the previous model, which dynamo's caches held, before memory is measured
                    torch.cuda.empty_cache()
                data = data or train.load_data(cfg, rt)
                model = raw_model = None  # (the previous variant's sharded model, before the next one is made)
                gc.collect()
                torch.manual_seed(cfg.seed)
                raw_model = GPT(GPTConfig(**cfg.model_args()), cfg.fused_cross_entropy).to(rt.device)
                if cfg.data_parallel != "fsdp":  # (the next variants reuse this model, from these weights)
                    initial = {k: v.detach().to("cpu", copy=True) for k, v in raw_model.state_dict().items()}
                model = parallelize(raw_model, cfg, rt)
            else:  # the previous variant's model, back to its initial weights
                assert raw_model.config == GPTConfig(**cfg.model_args()), "variants of one model must share its shape"
                raw_model.load_state_dict(initial)
            trace = os.path.join(args.trace_dir, f"trace_{model_name}_{variant}_{cfg.micro_batch_size}.json") \
                if args.trace_dir else ""
            run_row(row, cfg, model, raw_model, rt, data, 2 if memory_only else args.warmup,
                    1 if memory_only else args.steps, memory, 0 if memory_only else args.profile_steps, trace)
            if memory_only:
                try:
                    row.predicted_bytes = allocated_prediction(cfg, rt.world_size, ddp_wrapped=rt.distributed)
                except InputError as e:  # state bench.memory cannot lay out (side_state_sharded undeclared)
                    row.note = "; ".join(filter(None, [row.note, f"no memory model: {str(e)[:60]}"]))
        except torch.OutOfMemoryError:
            row.note = "; ".join(filter(None, [row.note, "out of memory"]))
        except Exception as e:  # a failed row is reported, and the others still run
            traceback.print_exc()
            row.note, row.failed = f"failed: {type(e).__name__}: {str(e)[:80]}", True
        for p in raw_model.parameters() if raw_model is not None else ():
            p.grad = None
        gc.collect()  # what a failed step left behind
        if rt.device.type == "cuda":
            torch.cuda.empty_cache()
        rows.append(row)
        print(f"[bench.gpu] {format_row(row)}", file=sys.stderr, flush=True)
    return rows


# ----------------------------------------------------------------------------- the optimizer step alone


def optimizer_alone_ms(config: GPTConfig, device: torch.device, repeats: int, compiled: bool,
                       warmup_s: float = 3.0) -> dict[str, tuple[float, float]]:
    """For torch's fused AdamW and MARS-AdamW (approx, compiled or eager rules) on the parameters of a GPT of
    this config: time_optimizer_steps's (median ms between events, kernels' ms) of each."""
    with torch.device(device):
        model = GPT(config)
    params = list(model.parameters())
    gradient_sets = [[torch.randn_like(p) * 1e-3 for p in params] for _ in range(2)]
    factories = make_optimizers(model, device)
    names = ["adamw-fused", "mars-adamw" if compiled else "mars-adamw-eager"]
    return time_optimizer_steps(params, {name: factories[name]() for name in names},
                                {name: gradient_sets for name in names}, device, repeats, warmup_s)


def time_optimizer_steps(params: list[torch.Tensor], optimizers: dict[str, torch.optim.Optimizer],
                         gradient_sets: dict[str, list[list[torch.Tensor]]], device: torch.device, repeats: int,
                         warmup_s: float = 3.0) -> dict[str, tuple[float, float]]:
    """Per optimizer over params (each stepping with its own list of gradient sets, in turn): (the median ms
    of one step between two events, the ms of the kernels a step runs). Steps are interleaved, as
    bench.optimizer_step times them. The steps before the timed ones run for warmup_s seconds (at least two
    each: state allocation, compilation): an idle GPU clocks down (an H100's SM clock idles at 345 MHz). The
    events' span also holds whatever time the GPU waits for the host to launch the step's kernels (grouping
    the tensors, the rule's guards: a host's speed and load, and it varies from run to run); the kernels'
    time, summed by torch.profiler over `repeats` more steps of each optimizer on its own, is the step's own
    work on the device, the figure the memory-traffic floor compares with. (On CPU: the aten ops' own time.)"""
    names = list(optimizers)
    clock, marks, steps_taken = Clock(device), {name: [] for name in names}, {name: 0 for name in names}

    def step(name: str) -> None:
        # each optimizer's next gradient set is never the one it stepped with last (MARS keeps that one)
        sets = gradient_sets[name]
        for p, g in zip(params, sets[steps_taken[name] % len(sets)]):
            p.grad = g
        optimizers[name].step()
        steps_taken[name] += 1

    def step_each(timed: bool) -> None:
        for name in names:
            start = clock.mark()
            step(name)
            if timed:
                marks[name].append((start, clock.mark()))

    warm_until, repeat = time.perf_counter() + warmup_s, 0
    while repeat < 2 or time.perf_counter() < warm_until:
        step_each(timed=False)
        clock.synchronize()
        repeat += 1
    kernel_ms = {}
    for name in names:  # each on its own, so that the kernels are that optimizer's
        with device_profile(device) as profiler:
            for _ in range(repeats):
                step(name)
            clock.synchronize()
        kernel_ms[name] = profile_breakdown(profiler.key_averages(), repeats, 0.0, device)[0]["busy"]
    for _ in range(repeats):
        step_each(timed=True)
    clock.synchronize()
    return {name: (statistics.median(clock.ms(*pair) for pair in marks[name]), kernel_ms[name]) for name in names}


# ----------------------------------------------------------------------------- output


def cell(value, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


def format_row(row: Row) -> str:
    gib = None if row.peak_bytes is None else row.peak_bytes / 2**30
    reserved = None if row.reserved_bytes is None else row.reserved_bytes / 2**30
    predicted = None if row.predicted_bytes is None else row.predicted_bytes / 2**30
    other = None if row.step_ms is None else row.step_ms - row.forward_backward_ms - row.optimizer_ms
    return " | ".join([
        row.model, row.optimizer, f"{row.micro_batch} x {row.grad_accum}", cell(row.tokens_per_s, ",.0f"),
        cell(None if row.mfu is None else 100 * row.mfu, ".1f"), cell(gib, ".2f"), cell(reserved, ".2f"),
        cell(predicted, ".2f"), cell(row.step_ms, ".1f"),
        cell(row.forward_backward_ms, ".1f"), cell(row.optimizer_ms, ".1f"), cell(other, ".1f"),
        row.note or ("memory only" if row.memory_only else ""),
    ])


TABLE_HEADER = ("| model | optimizer | micro-batch x accum | tokens/s | MFU % | peak GiB | reserved GiB | model GiB "
                "| step ms | fwd-bwd ms | optimizer ms | other ms | note |")


def print_table(rows: list[Row]) -> None:
    print(TABLE_HEADER)
    print("|" + " --- |" * TABLE_HEADER.count(" |"))
    for row in rows:
        print(f"| {format_row(row)} |")


def print_profiles(rows: list[Row]) -> None:
    """Each profiled row's step by kind of kernel (ms and share of the step), then its costliest kernels."""
    for row in rows:
        if not row.profile:
            continue
        step = row.profile["busy"] + row.profile["idle"]
        kinds = ", ".join(f"{kind} {ms:.2f} ms ({100 * ms / step:.0f}%)" for kind, ms in row.profile.items()
                          if kind != "busy")
        print(f"where the time goes, {row.model} {row.optimizer} {row.micro_batch} x {row.grad_accum} "
              f"({step:.1f} ms per profiled step): {kinds}")
        for name, ms in row.top_kernels:
            print(f"    {ms:7.2f} ms  {kernel_kind(name):<24} {name[:110]}")


# (optimizer first: a row of this table is not one of the main table's, which start "| model |")
FLOOR_HEADER = ("| optimizer | model | optimizer ms | " + " | ".join(FLOOR_COLUMNS)
                + " | whole step ms | whole step / AdamW's |")


def print_floors(rows: list[Row], device: torch.device, repeats: int, warmup: int, world_size: int) -> None:
    """The timed rows of the matrix optimizers against their floor: the matrix products their steps dispatched on
    this rank, each timed alone on this device as the step ran it, after the rows (bench.optimizer_step.
    measure_floors, bench.optimizer_step's floor rows too); the optimizer step as the training step runs it
    (optimizer ms), and the whole step against AdamW's on the same model."""
    matrix_rows = [row for row in rows if row.recorded and row.optimizer_ms is not None]
    if not matrix_rows:
        return
    floors = measure_floors({str(i): row.recorded for i, row in enumerate(matrix_rows)}, device, repeats, warmup)
    print("matrix optimizers against their floor (the matrix products their steps dispatched, each timed alone here"
          + (f"; this rank's: each of the {world_size} ranks computes its owners' share" if world_size > 1
             else "") + "):")
    print(FLOOR_HEADER)
    print("|" + " --- |" * FLOOR_HEADER.count(" |"))
    for i, row in enumerate(matrix_rows):
        adamw = next((r.step_ms for r in rows if r.model == row.model and r.optimizer == "AdamW" and r.step_ms), None)
        cells = [row.optimizer, row.model, f"{row.optimizer_ms:.5g}", *floor_cells(row.optimizer_ms, floors[str(i)]),
                 f"{row.step_ms:.5g}", f"{row.step_ms / adamw:.2f}x" if adamw else "-"]
        print(f"| {' | '.join(cells)} |")
    print()


def whole_step_ratios(rows: list[Row]) -> list[str]:
    """MARS-exact's whole step against AdamW's, per model with both measured."""
    lines = []
    for model in dict.fromkeys(r.model for r in rows if not r.memory_only):
        step = {r.optimizer: r.step_ms for r in rows if r.model == model and not r.memory_only}
        if step.get("MARS-exact") and step.get("AdamW"):
            ratio = step["MARS-exact"] / step["AdamW"]
            verdict = "met" if ratio <= MARS_EXACT_TARGET else "missed"
            lines.append(f"MARS-exact whole step (two forward-backwards + step) / AdamW whole step, {model}: "
                         f"{ratio:.2f}x (target <= {MARS_EXACT_TARGET}x: {verdict})")
    return lines


# ----------------------------------------------------------------------------- main


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.gpu",
                                     description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default="small,medium", help="timed rows, from: " + ", ".join(PRESETS))
    parser.add_argument("--optimizers", default=",".join(VARIANTS), help="from: " + ", ".join(VARIANTS))
    parser.add_argument("--memory-only", default="large,xl", help="models with peak-memory rows only ('' for none)")
    parser.add_argument("--steps", type=int, default=20, help="measured steps per row")
    parser.add_argument("--warmup", type=int, default=3, help="steps before measuring (compilation, state)")
    parser.add_argument("--micro-batch", type=int, default=0,
                        help="sequences per micro-step of the timed rows (0: the config's)")
    parser.add_argument("--grad-accum", type=int, default=1, help="micro-steps per optimizer step")
    parser.add_argument("--peak-flops", type=float, default=0.0, help="the device's dense bf16 FLOP/s for MFU "
                        "(0: train.peak_flops' guess from the GPU's name; no MFU if it knows none)")
    parser.add_argument("--alone-repeats", type=int, default=20,
                        help="repeats of the optimizer-alone comparison (0: skip it)")
    parser.add_argument("--compile-mode", default="default", choices=CHOICES["compile_mode"],
                        help="torch.compile's mode for the model (the config key compile_mode)")
    parser.add_argument("--data-parallel", default="ddp", choices=CHOICES["data_parallel"],
                        help="the config key data_parallel: under torchrun, the model DDP-wrapped or FSDP-sharded as "
                        "train.py does (torchrun --standalone --nproc_per_node=1 -m bench.gpu ...; fsdp needs "
                        "torchrun)")
    parser.add_argument("--activation-checkpointing", action="store_true", help="the config key of that name")
    parser.add_argument("--sdpa", default="auto", choices=["auto", *SDPA_BACKENDS],
                        help="the attention kernel (auto: torch's choice; the others: that backend alone)")
    parser.add_argument("--fused-cross-entropy", action="store_true",
                        help="the config key fused_cross_entropy (model.LinearCrossEntropy: no whole logits)")
    parser.add_argument("--profile-steps", type=int, default=0, help="steps of each timed row to run under "
                        "torch.profiler after the measured ones: where a step's time goes, by kind of kernel")
    parser.add_argument("--trace-dir", default="", help="with --profile-steps: write each row's Chrome trace here")
    parser.add_argument("--data-dir", default="", help="token shards to read (default: random tokens)")
    parser.add_argument("--cpu-smoke", action="store_true", help="a tiny model on CPU, 2 steps: checks the script")
    args = parser.parse_args(argv)
    if args.steps < 1 or args.warmup < 0 or args.grad_accum < 1:
        parser.error("--steps and --grad-accum must be at least 1, --warmup at least 0")
    if args.cpu_smoke:
        args.models, args.memory_only, args.steps, args.warmup = "tiny", "tiny", 2, 1
        args.alone_repeats, args.micro_batch = min(args.alone_repeats, 2), args.micro_batch or 4
    for name in filter(None, args.optimizers.split(",")):
        if name not in VARIANTS:
            parser.error(f"unknown optimizer {name!r}; choose from {', '.join(VARIANTS)}")
    for name in filter(None, (args.models + "," + args.memory_only).split(",")):
        if name not in PRESETS and not (args.cpu_smoke and name == "tiny"):
            parser.error(f"unknown model {name!r}; choose from {', '.join(PRESETS)}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.cpu_smoke:
        torch.set_num_threads(1)  # tiny tensors: threads only wait on each other (and on a busy machine, long)
    print_header()
    if not torch.cuda.is_available() and not args.cpu_smoke:
        print("no CUDA device is present (torch.cuda.is_available() is False): nothing measured. "
              "`python -m bench.gpu --cpu-smoke` runs the script's code path on CPU.")
        return 0
    if args.trace_dir:
        os.makedirs(args.trace_dir, exist_ok=True)
    rt = init_runtime("cpu" if args.cpu_smoke else "cuda")
    if not rt.is_main:  # one table, rank 0's
        sys.stdout = open(os.devnull, "w")
    check_parallelism(row_config("tiny" if args.cpu_smoke else "small", "adamw", args, "", str(rt.device),
                                 world_size=rt.world_size)[0], rt)
    configure_device(rt.device)
    memory = PeakMemory(rt.device)
    variants = list(filter(None, args.optimizers.split(",")))
    if not args.cpu_smoke:
        import torch._dynamo as dynamo

        # A training run compiles each rule for one model; this process compiles them for several.
        dynamo.config.recompile_limit = max(dynamo.config.recompile_limit, 64)
    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as settings:
        if args.sdpa != "auto":
            settings.enter_context(sdpa_kernel([SDPA_BACKENDS[args.sdpa]]))
        shape = SMOKE_MODEL if args.cpu_smoke else dataclasses.asdict(GPTConfig())
        data_dir = args.data_dir or synthetic_shards(tmp, shape["block_size"], shape["vocab_size"])
        configs = {v: row_config("tiny" if args.cpu_smoke else "small", v, args, data_dir, str(rt.device),
                                 world_size=rt.world_size)[0] for v in VARIANTS}
        flops = train.peak_flops(configs["adamw"], rt.device)
        mode = "float32, eager (smoke run: not a measurement)" if args.cpu_smoke else \
            f"bf16 autocast, torch.compile (mode {args.compile_mode})"
        mode += f", attention: {args.sdpa if args.sdpa != 'auto' else 'torch picks'}; {args.data_parallel}" + \
            (f" over {rt.world_size} rank(s)" if rt.distributed else " (no torchrun: one process, unwrapped)") + \
            (", activation checkpointing" if args.activation_checkpointing else "")
        print(f"# {rt.device}, {mode}; data: {args.data_dir or 'random token ids'}; peak FLOP/s for MFU: "
              f"{f'{flops:.3g}' if flops else 'unknown (pass --peak-flops)'}; {args.warmup} warm-up + "
              f"{args.steps} measured steps per row", flush=True)
        covered = {cfg.optimizer for cfg in configs.values()}
        if set(OPTIMIZERS) - covered:
            print(f"# not benchmarked (no VARIANTS entry): {', '.join(sorted(set(OPTIMIZERS) - covered))}")
        rows = []
        for model_name in filter(None, args.models.split(",")):
            rows += bench_model(model_name, variants, args, rt, data_dir, False, memory)
        for model_name in filter(None, args.memory_only.split(",")):
            rows += bench_model(model_name, variants, args, rt, data_dir, True, memory)
    print()
    print_table(rows)
    print()
    print_profiles(rows)
    # (a CPU smoke run times each product once, without warm-up: it checks the script, not the floor)
    print_floors(rows, rt.device, *((1, 0) if args.cpu_smoke else (20, 2)), rt.world_size)
    if args.alone_repeats:
        config = GPTConfig(**{**PRESETS["small"], **(SMOKE_MODEL if args.cpu_smoke else {})})
        times = optimizer_alone_ms(config, rt.device, args.alone_repeats, compiled=not args.cpu_smoke,
                                   warmup_s=0.0 if args.cpu_smoke else 3.0)
        (adamw, adamw_kernels), (mars, mars_kernels) = times["adamw-fused"], times[
            "mars-adamw" if not args.cpu_smoke else "mars-adamw-eager"]
        print(f"optimizer step alone on {'tiny' if args.cpu_smoke else 'GPT-2 small'} tensors, {args.alone_repeats} "
              f"steps each: kernels per step: torch fused AdamW {adamw_kernels:.2f} ms, MARS-AdamW {mars_kernels:.2f} "
              f"ms: {mars_kernels / adamw_kernels:.2f}x (target <= {MARS_ADAMW_TARGET}x; memory-traffic floor "
              f"{MARS_ADAMW_FLOOR:.2f}x); between events (median), host launch gaps included: {adamw:.2f} ms and "
              f"{mars:.2f} ms: {mars / adamw:.2f}x")
    for line in whole_step_ratios(rows):
        print(line)
    if args.cpu_smoke:
        print("(a CPU smoke run of a tiny model: these numbers check the script, not the GPU targets)")
    close_runtime()
    return 1 if any(r.failed for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
