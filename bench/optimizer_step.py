"""
Optimizer step benchmark on a GPT-2-shaped set of tensors (124M parameters by default).

    python -m bench.optimizer_step                      # GPT-2 small, the element-wise optimizers
    python -m bench.optimizer_step --quick              # 2 layers, 3 repeats: GPT-2 small's widths
    python -m bench.optimizer_step --smoke              # bench.gpu's tiny model, eager, 3 repeats: checks the script
    python -m bench.optimizer_step --optimizers adamw-fused,muon,mars-m,moonlight   # the NS5 ones (slow on CPU)
    python -m bench.optimizer_step --plan               # Newton-Schulz's owner plan for 4 models (shapes only, CPU)

Every optimizer of the registry (optim.OPTIMIZERS) is here under its name, built as train.py builds
it (its hyperparameters' defaults, compiled rules), besides variants written out below. Prints, per
optimizer: the median time of one step (repeats interleaved across the optimizers, so that load on
the machine hits them alike; an optimizer with a periodic product, SOAP's refresh every 10 steps, the mean over a
whole number of its periods: its refreshes amortised, as its floor amortises them), its ratio to torch's fused
AdamW, the peak memory a step allocates beyond what it starts with, and the optimizer state it keeps.
"official-style MARS" re-implements the official code's loop (per parameter, a
host sync on each norm, out-of-place temporaries) for the record.

Then, for the matrix optimizers among them (optim.contract.MatrixProducts: Muon, Moonlight, MARS-M, MARS-Shampoo,
Scion, SOAP, Kron, Dion, ...), the floor of their step: the time of the matrix products its steps dispatch, each
measured alone here and now as the step ran it (recorded_products, then measure_floors: its op on random tensors of
its operands' shapes, strides and dtypes), beside the step (recorded over a whole number of refresh periods:
recording_steps). A row gives the step, its FLOPs, the device's rate on those shapes (FLOPs / floor), the floor,
step / floor (1.00x: nothing but the products), and the step against fused AdamW's. On a CPU these are numbers to
read, not targets (NS5 runs in fp32 there).

Last, the owner plan of Newton-Schulz under torch.distributed for this model (--plan: for GPT-2 small and
XL, llama-124m and llama-720m, without timing anything): over 2, 8 and 32 ranks, each rank's NS5 FLOPs
(the busiest's, the mean, and their ratio: the balance; whole matrices cannot balance better than the
largest's share), and the bytes the busiest rank receives per step in bf16, as on CUDA: under DDP the
owners' results, under FSDP the two all-to-alls (optim/sharding.py's on_owner_ranks); then each rank's share,
its FLOPs and the bytes it receives. Every 2-D parameter goes to Newton-Schulz, embeddings included, as in the
paper's Muon.
"""

if not __package__:  # run as a file: the repository's modules (model, data, ...) are not importable
    raise SystemExit("bench/optimizer_step.py is a module of the bench package: run it from the repository root as\n"
                     "    python -m bench.optimizer_step ...")

import argparse
import collections
import ctypes
import dataclasses
import math
import statistics
import sys
import time
from collections.abc import Callable
from typing import NamedTuple

import torch
from torch.distributed.tensor import DTensor
from torch.optim import Optimizer
from torch.utils._python_dispatch import TorchDispatchMode

import bench
from bench.memory import Tensor, ns5_costs, ns5_exchange
from config.models import PRESETS
from model import GPT, GPTConfig
from optim import MARS, OPTIMIZERS, build_optimizer, load_config
from optim.contract import MatrixProducts, Product
from optim.sharding import balanced_owners, received_bytes

# --smoke's model, and bench.gpu --cpu-smoke's: a 2-layer, 32-wide GPT of 32-token windows over a 256-token
# vocabulary (NS5 of a 50304-wide embedding would take most of a smoke run's time on CPU).
SMOKE_MODEL = dict(n_layer=2, n_head=2, n_embd=32, block_size=32, vocab_size=256)
# bench.gpu --cpu-smoke's paper settings scaled down with the model, for an optimizer that has them: Shampoo's blocks
# of 8192 would merge its 32 x 128 matrices into one 4096-long vector each, a 4096-sided factor that GPT-2 small
# (768 x 768 and up: never merged) does not have, and whose root inverses on CPU took most of a smoke run.
SMOKE_SETTINGS = {"max_preconditioner_dim": 1024}
# --plan's models, and the ranks each is shared out over.
PLAN_MODELS, PLAN_WORLD_SIZES = ("small", "xl", "llama-124m", "llama-720m"), (2, 8, 32)


class OfficialStyleMARS(Optimizer):
    """MARS-AdamW (approx) in the official code's style: a Python loop over
    parameters, `if norm > 1` on the host, a fresh tensor for every intermediate."""

    def __init__(self, params, lr=3e-3, betas=(0.95, 0.99), eps=1e-8, weight_decay=0.0, gamma=0.025):
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, gamma=gamma))

    @torch.no_grad()
    def step(self):
        for group in self.param_groups:
            beta1, beta2 = group["betas"]
            for p in group["params"]:
                state = self.state[p]
                if not state:
                    state.update(step=0, exp_avg=torch.zeros_like(p), exp_avg_sq=torch.zeros_like(p),
                                 last_grad=torch.zeros_like(p))
                state["step"] += 1
                g, m, v = p.grad, state["exp_avg"], state["exp_avg_sq"]
                c = (g - state["last_grad"]).mul(group["gamma"] * beta1 / (1 - beta1)).add(g)
                norm = torch.norm(c)
                if norm > 1:  # host sync
                    c = c / norm
                m.mul_(beta1).add_(c, alpha=1 - beta1)
                v.mul_(beta2).addcmul_(c, c, value=1 - beta2)
                bias_correction1, bias_correction2 = 1 - beta1 ** state["step"], 1 - beta2 ** state["step"]
                denom = v.sqrt().mul(1 / math.sqrt(bias_correction2)).add(group["eps"]).mul(bias_correction1)
                p.add_(-group["lr"] * torch.mul(p, group["weight_decay"]).add(m.div(denom)))
                state["last_grad"] = g


def make_optimizers(model: torch.nn.Module, device: torch.device,
                    compiled: bool = True) -> dict[str, Callable[[], Optimizer]]:
    """Every registry optimizer by name, built from its defaults (a constant schedule, which every one
    accepts; its rules compiled unless compiled is False), and the variants of interest."""
    params = list(model.parameters())
    fused_ok = device.type in ("cpu", "cuda")

    def registry(name: str, *overrides: str) -> Callable[[], Optimizer]:
        cfg = load_config([f"--optimizer={name}", "--lr_schedule=constant", f"--compile={compiled}",
                           *overrides])
        return lambda: build_optimizer(model, cfg, device.type)

    return {name: registry(name) for name in OPTIMIZERS} | {
        "adamw-fused": lambda: torch.optim.AdamW(params, lr=6e-4, weight_decay=0.1, fused=fused_ok),
        "adamw-foreach": lambda: torch.optim.AdamW(params, lr=6e-4, weight_decay=0.1, foreach=True),
        "mars-adamw": lambda: MARS(params, weight_decay=0.1),
        "mars-lion": lambda: MARS(params, weight_decay=0.1, mars_type="mars-lion"),
        "mars-adamw-eager": lambda: MARS(params, weight_decay=0.1, compiled=False),
        "mars-lion-eager": lambda: MARS(params, weight_decay=0.1, mars_type="mars-lion", compiled=False),
        "official-style-mars": lambda: OfficialStyleMARS(params, weight_decay=0.1),
        "mars-shampoo": registry("mars", "--mars_type=mars-shampoo"),
        "mars-m-efficient": registry("mars-m", "--mars_m_efficient=True"),
    }


ELEMENTWISE = ("adamw-fused,adamw-foreach,mars-adamw,mars-lion,mars-adamw-eager,mars-lion-eager,official-style-mars,"
               "lion,nadamw,ademamix,schedule-free-adamw")


class PeakMemory:
    """Peak bytes allocated during a step beyond those live at its start.
    CUDA: the caching allocator's counters. CPU (Linux): the process's resident
    high-water mark, with glibc set to return every large block at free."""

    def __init__(self, device: torch.device):
        self.device = device
        if device.type == "cpu":
            ctypes.CDLL("libc.so.6").mallopt(-3, 1 << 16)  # M_MMAP_THRESHOLD: large blocks mmapped, freed at once

    def start(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)
            self.base = torch.cuda.memory_allocated(self.device)
        else:
            with open("/proc/self/clear_refs", "w") as f:
                f.write("5")  # resets VmHWM to the current resident size
            self.base = self._status_kb("VmRSS") * 1024

    def peak_extra(self) -> int:
        if self.device.type == "cuda":
            return torch.cuda.max_memory_allocated(self.device) - self.base
        return max(0, self._status_kb("VmHWM") * 1024 - self.base)

    def peak_reserved(self) -> int | None:
        """The caching allocator's largest reservation since start (CUDA; None on CPU)."""
        return torch.cuda.max_memory_reserved(self.device) if self.device.type == "cuda" else None

    @staticmethod
    def _status_kb(key: str) -> int:
        with open("/proc/self/status") as f:
            return next(int(line.split()[1]) for line in f if line.startswith(key + ":"))


class Clock:
    """Marks on the device's timeline: CUDA events, read after one synchronize (on CPU, where every
    op is synchronous, perf_counter readings)."""

    def __init__(self, device: torch.device):
        self.cuda = device.type == "cuda"

    def mark(self):
        if not self.cuda:
            return time.perf_counter()
        event = torch.cuda.Event(enable_timing=True)
        event.record()
        return event

    def synchronize(self) -> None:
        if self.cuda:
            torch.cuda.synchronize()

    def ms(self, start, end) -> float:
        return start.elapsed_time(end) if self.cuda else 1000 * (end - start)


# ----------------------------------------------------------------------------- the floor of a matrix optimizer


def matrix_products(optimizer: Optimizer) -> list[Product]:
    """The matrix products an optimizer's step declares (optim.contract.MatrixProducts); none for the others."""
    return optimizer.products() if isinstance(optimizer, MatrixProducts) else []


ATEN = torch.ops.aten
# The ops a floor counts as matrix products, each with where its two multiplied operands are among its arguments (an
# accumulating form's first argument is the addend); a triangular solve counts as a product of its size (twice its
# own FLOPs), as the declared lists count it (optim/kron.py, optim/dion.py).
PRODUCT_OPERANDS = {ATEN.mm: 0, ATEN.bmm: 0, ATEN.addmm: 1, ATEN.addmm_: 1, ATEN.baddbmm: 1, ATEN.baddbmm_: 1,
                    ATEN.mv: 0, ATEN.addmv: 1, ATEN.addmv_: 1, ATEN.dot: 0, ATEN.linalg_solve_triangular: 0}


class Operand(NamedTuple):
    shape: tuple[int, ...]
    stride: tuple[int, ...]
    dtype: torch.dtype


class ProductCall(NamedTuple):
    """One matrix product as a step dispatched it: its op, and its arguments, each tensor by its shape, strides (a
    transposed view's) and dtype, the others as they were (alpha, beta, upper, left, ...)."""

    op: object  # an aten OpOverload
    args: tuple
    kwargs: tuple  # (name, value) pairs

    def flops(self) -> float:
        first = PRODUCT_OPERANDS[self.op.overloadpacket]
        a, b = self.args[first], self.args[first + 1]
        if self.op.overloadpacket is ATEN.linalg_solve_triangular:  # (A X = B or X A = B: n^2 per column of B)
            return 2.0 * math.prod(b.shape) * a.shape[-1]
        return 2.0 * math.prod(a.shape) * (b.shape[-1] if len(b.shape) > 1 else 1)  # (mv, dot: b a vector)

    def operands(self, device: torch.device) -> tuple[tuple, dict]:
        """Arguments to run it with: random tensors of its operands' shapes, strides and dtypes."""
        def made(x):
            if not isinstance(x, Operand):
                return x
            size = 1 + sum((n - 1) * st for n, st in zip(x.shape, x.stride) if n)  # (the storage the view spans)
            return torch.randn(size, dtype=x.dtype, device=device).mul_(0.01).as_strided(x.shape, x.stride)
        return tuple(made(x) for x in self.args), {k: made(v) for k, v in self.kwargs}


class RecordedProducts(TorchDispatchMode):
    """Every matrix product (PRODUCT_OPERANDS) dispatched while active, counted by ProductCall; one on DTensors
    (whose shapes are the whole tensors', and whose per-rank products this mode does not see) is kept apart, in
    unrecordable."""

    def __init__(self):
        super().__init__()
        self.calls: collections.Counter[ProductCall] = collections.Counter()
        self.unrecordable: set[str] = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func.overloadpacket in PRODUCT_OPERANDS and any(isinstance(t, DTensor) for t in (*args, *kwargs.values())):
            self.unrecordable.add(str(func))
        elif func.overloadpacket in PRODUCT_OPERANDS:
            def described(x):
                return Operand(tuple(x.shape), tuple(x.stride()), x.dtype) if isinstance(x, torch.Tensor) else x
            self.calls[ProductCall(func, tuple(map(described, args)),
                                   tuple(sorted((k, described(v)) for k, v in kwargs.items())))] += 1
        return func(*args, **kwargs)


def recorded_products(optimizer: Optimizer, run: Callable[[], None]) -> dict[ProductCall, float]:
    """The matrix products the optimizer's steps dispatch while run() runs (whole training steps, or its steps
    alone), each with its count per step: the products of the step's own ops and layouts, which its compiled form
    hands to the same BLAS calls. Its compiled element-wise rules run eager meanwhile (compiled=False: a fullgraph
    compile cannot run under a dispatch mode); a compiled Newton-Schulz (not fullgraph) runs eagerly under it by
    itself: dynamo skips a frame while a dispatch mode is on the stack."""
    recorder, steps, step = RecordedProducts(), 0, optimizer.step

    def recorded_step(*args, **kwargs):
        nonlocal steps
        steps += 1
        with recorder:
            return step(*args, **kwargs)

    own = optimizer.__dict__.get("step")  # (an instance's own step, if it has one, comes back after)
    compiled = getattr(optimizer, "compiled", False)
    optimizer.step, optimizer.compiled = recorded_step, False
    try:
        run()
    finally:
        optimizer.compiled = compiled
        if own is None:
            del optimizer.step
        else:
            optimizer.step = own
    if not steps:
        raise RuntimeError("recorded_products: run() took no step of the optimizer")
    if recorder.unrecordable:  # (their floor would be the whole tensors' on every rank)
        raise RuntimeError(f"recorded_products: {type(optimizer).__name__}'s step multiplies DTensors "
                           f"({', '.join(sorted(recorder.unrecordable))}), whose per-rank products cannot be recorded")
    return {call: count / steps for call, count in recorder.calls.items()}


def recording_steps(declared: list[Product], at_least: int) -> int:
    """The fewest steps, at least at_least, that hold a whole number of each declared product's periods (a product run
    every k steps declares per_step 1/k): recorded_products' counts per step are then the declared averages wherever
    in its refresh cycle the recording starts (SOAP's refresh every 10 steps is 1 in any 10 consecutive steps, and 1
    in 7 or 0 in 3 of them). Kron's random preconditioner updates (per_step its probability) stay a sample."""
    period = math.lcm(1, *(round(1 / p.per_step) for p in declared if 0 < p.per_step < 1))
    return period * math.ceil(at_least / period)


def steps_on_random_gradients(optimizer: Optimizer, params: list[torch.Tensor], steps: int) -> None:
    """`steps` optimizer steps alone, each on fresh random gradients (laid out as the parameters: DTensors under
    FSDP2), for recorded_products when the training steps' own would cost a forward and backward each."""
    for _ in range(steps):
        for p in params:
            p.grad = torch.randn_like(p).mul_(1e-3)
        optimizer.step()
    optimizer.zero_grad(set_to_none=True)


@dataclasses.dataclass(frozen=True)
class Floor:
    """A step's matrix products on this device: their FLOPs per step, and the time they take, each measured alone."""

    flops: float
    ms: float

    @property
    def rate(self) -> float:
        """FLOP/s the device reaches on these products."""
        return self.flops / (self.ms / 1e3)


def measure_floors(products: dict[str, dict[ProductCall, float]], device: torch.device, repeats: int = 5,
                   warmup: int = 2) -> dict[str, Floor]:
    """Each optimizer's floor (by name, from the products its steps dispatched, with their counts per step:
    recorded_products): the sum over its products of count x the time of that product alone, measured here and now.
    Each distinct product is timed once for all as the step ran it: its op (mm, bmm, baddbmm, in place or not, a
    triangular solve) on random tensors of its operands' shapes, strides (a transposed view stays one) and dtypes,
    `warmup` calls (the BLAS's choice of kernel, the clocks), then `repeats` back to back between two marks, their
    mean (on CUDA events, the device's own time; the device held busy while the host queues them, so that no
    launch gap falls between two short products)."""
    clock, ms = Clock(device), {}
    for call in dict.fromkeys(call for calls in products.values() for call in calls):
        args, kwargs = call.operands(device)
        for _ in range(warmup):
            call.op(*args, **kwargs)
        if device.type == "cuda":
            torch.cuda._sleep(20_000_000)  # (about 10 ms of the device's clock: the host runs ahead meanwhile)
        start = clock.mark()
        for _ in range(repeats):
            call.op(*args, **kwargs)
        end = clock.mark()
        clock.synchronize()
        ms[call] = clock.ms(start, end) / repeats
        del args, kwargs  # (one product's operands at a time: an XL embedding's product takes 0.3 GB in bf16)
    return {name: Floor(sum(count * call.flops() for call, count in calls.items()),
                        sum(count * ms[call] for call, count in calls.items()))
            for name, calls in products.items()}


# The columns a floor row adds (bench.gpu prints them too), after the step's ms.
FLOOR_COLUMNS = ("GFLOP/step", "TFLOP/s at floor", "floor ms", "step/floor")


def floor_cells(step_ms: float, floor: Floor) -> list[str]:
    return [f"{floor.flops / 1e9:.5g}", f"{floor.rate / 1e12:.5g}", f"{floor.ms:.5g}", f"{step_ms / floor.ms:.2f}x"]


def print_floors(step_ms: dict[str, float], floors: dict[str, Floor], reference_ms: float | None) -> None:
    print("matrix optimizers against their floor, the matrix products their steps dispatched, each timed alone "
          "(the rate is FLOPs / floor; step/floor 1.00x: the step is nothing but its products):")
    print(f"{'optimizer':<22} {'step ms':>15} " + " ".join(f"{c:>16}" for c in FLOOR_COLUMNS)
          + f" {'vs fused AdamW':>15}")
    for name, floor in floors.items():
        ratio = f"{step_ms[name] / reference_ms:.2f}x" if reference_ms else "-"
        print(f"{name:<22} {step_ms[name]:>15.5g} " + " ".join(f"{c:>16}" for c in floor_cells(step_ms[name], floor))
              + f" {ratio:>15}")


# ----------------------------------------------------------------------------- Newton-Schulz across ranks


def matrix_shapes(config: GPTConfig) -> list[tuple[int, int]]:
    """The shapes of a GPT's 2-D parameters (every one goes to Newton-Schulz in the paper's Muon, embeddings
    included), from a model built on the meta device: no memory, fast at any size."""
    with torch.device("meta"):
        model = GPT(config)
    return [tuple(p.shape) for p in model.parameters() if p.ndim == 2]


@dataclasses.dataclass(frozen=True)
class OwnerPlan:
    """One step of Newton-Schulz shared out over ranks (optim.newton_schulz.newton_schulz5_across_ranks): each
    rank's NS5 FLOPs under the owner plan (optim.sharding.balanced_owners, by NS5's FLOPs), the largest matrix's
    (whole matrices: its owner carries at least that), and the bytes each rank receives."""

    loads: list[float]
    largest: float
    ddp_bytes: list[int]  # the owners' results, broadcast (optim.sharding.received_bytes)
    fsdp_bytes: tuple[list[int], list[int]]  # the two all-to-alls: row blocks to the owners, results back

    @property
    def balance(self) -> float:
        """The busiest rank's FLOPs over the mean: 1 is a perfect balance."""
        return max(self.loads) / statistics.mean(self.loads)


def owner_plan(shapes: list[tuple[int, int]], world_size: int, element_size: int = 2) -> OwnerPlan:
    """The owner plan of NS5 on matrices of these shapes over world_size ranks, its transfers in element_size
    bytes (2: bf16, what NS5 computes in on CUDA)."""
    matrices = [Tensor("matrix", shape, None) for shape in shapes]
    costs = ns5_costs(matrices)
    return OwnerPlan(balanced_owners(costs, world_size)[1], max(costs),
                     received_bytes([t.numel for t in matrices], costs, world_size, element_size),
                     ns5_exchange(matrices, world_size, element_size))


def print_owner_plans(models: dict[str, GPTConfig], world_sizes: tuple[int, ...] = PLAN_WORLD_SIZES) -> None:
    print("Newton-Schulz on owner ranks, per step: every 2-D parameter (embeddings included, as the paper's Muon), "
          "owners balanced by NS5's FLOPs, results in bf16 as on CUDA; GB received by the busiest rank "
          "(FSDP: blocks to the owners + results back):")
    print(f"{'model':<26} {'matrices':>8} {'NS5 TFLOP':>10} {'ranks':>5} {'busiest TFLOP':>13} {'mean TFLOP':>10} "
          f"{'max/mean':>8} {'best':>6} {'DDP GB':>8} {'FSDP GB':>17}")
    shapes = {name: matrix_shapes(config) for name, config in models.items()}
    plans = {(name, world_size): owner_plan(shapes[name], world_size) for name in models for world_size in world_sizes}
    for (name, world_size), plan in plans.items():
        mean, (gather, back) = statistics.mean(plan.loads), plan.fsdp_bytes
        best = max(1.0, plan.largest / mean)  # no plan of whole matrices does better
        fsdp = f"{max(gather) / 1e9:.4g} + {max(back) / 1e9:.4g}"
        print(f"{name:<26} {len(shapes[name]):>8} {sum(plan.loads) / 1e12:>10.4g} {world_size:>5} "
              f"{max(plan.loads) / 1e12:>13.4g} {mean / 1e12:>10.4g} {plan.balance:>7.2f}x {best:>5.2f}x "
              f"{max(plan.ddp_bytes) / 1e9:>8.4g} {fsdp:>17}")
    print("\nEach rank's share, rank 0 first: NS5 TFLOP; GB received under DDP; under FSDP (blocks in + results back):")
    for (name, world_size), plan in plans.items():
        gather, back = plan.fsdp_bytes
        print(f"{name} over {world_size}")
        print("  TFLOP    " + " ".join(f"{load / 1e12:.3g}" for load in plan.loads))
        print("  DDP GB   " + " ".join(f"{b / 1e9:.3g}" for b in plan.ddp_bytes))
        print("  FSDP GB  " + " ".join(f"{(g + r) / 1e9:.3g}" for g, r in zip(gather, back)))


# ----------------------------------------------------------------------------- main


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.optimizer_step",
                                     description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="small", choices=list(PRESETS))
    parser.add_argument("--n_layer", type=int, default=0, help="override the preset's layer count")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--quick", action="store_true", help="2 layers, 3 repeats")
    parser.add_argument("--smoke", action="store_true", help="bench.gpu's tiny model (SMOKE_MODEL), eager rules, "
                        "3 repeats: checks the script in seconds")
    parser.add_argument("--plan", action="store_true", help="only Newton-Schulz's owner plan, for "
                        f"{', '.join(PLAN_MODELS)} (shapes only: no step runs)")
    parser.add_argument("--optimizers", default=ELEMENTWISE, help="comma-separated: a registry optimizer's name, "
                        "or adamw-fused, adamw-foreach, mars-adamw, mars-lion, mars-adamw-eager, mars-lion-eager, "
                        "official-style-mars, mars-shampoo, mars-m-efficient")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch's default)")
    args = parser.parse_args()
    if args.plan:
        bench.print_header()
        print_owner_plans({name: GPTConfig(**PRESETS[name]) for name in PLAN_MODELS})
        return
    if args.quick or args.smoke:
        args.n_layer, args.repeats = 2, 3
    if args.threads:
        torch.set_num_threads(args.threads)
    if not args.smoke:
        import torch._dynamo as dynamo

        # A run compiles each rule for one optimizer's lists of tensors; this process, for every optimizer it runs.
        dynamo.config.recompile_limit = max(dynamo.config.recompile_limit, 64)
    device = torch.device(args.device)

    config = GPTConfig(**{**PRESETS[args.model], **({"n_layer": args.n_layer} if args.n_layer else {}),
                          **(SMOKE_MODEL if args.smoke else {})})
    with torch.device(device):
        model = GPT(config)
    params = list(model.parameters())
    n_params = sum(p.numel() for p in params)
    # Two gradient sets, each optimizer alternating between them from one of its steps to the next, whatever
    # the phase (warm-up, timing, recording): fresh tensors each step, as with zero_grad(set_to_none=True), so
    # that an optimizer keeping the last gradient by reference (MARS) never finds it reused.
    gradient_sets = [[torch.randn_like(p) * 1e-3 for p in params] for _ in range(2)]
    factories = make_optimizers(model, device, compiled=not args.smoke)
    names = args.optimizers.split(",")
    for name in names:
        if name not in factories:
            parser.error(f"unknown optimizer {name!r}; choose from {', '.join(factories)}")
    optimizers = {name: factories[name]() for name in names}
    memory = PeakMemory(device)
    steps_taken = dict.fromkeys(names, 0)

    def timed_step(name: str) -> tuple[float, int]:
        for p, g in zip(params, gradient_sets[steps_taken[name] % 2]):
            p.grad = g
        steps_taken[name] += 1
        memory.start()
        t0 = time.perf_counter()
        optimizers[name].step()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        return time.perf_counter() - t0, memory.peak_extra()

    bench.print_header()
    print(f"{n_params / 1e6:.1f}M parameters in {len(params)} tensors, {device}, "
          f"{torch.get_num_threads()} threads, torch {torch.__version__}")
    for i, name in enumerate(names, start=1):  # warm-up: state allocation, compilation (most of a run's time)
        print(f"\rwarming up (compiling) {i}/{len(names)}: {name:<24}", end="", file=sys.stderr, flush=True)
        for _ in range(2):
            timed_step(name)
    # An optimizer with a periodic product (SOAP's refresh every 10 steps) takes a whole number of its periods of
    # steps, and its step is their mean (its refreshes amortised, as its floor amortises them); every other's step
    # is the median of args.repeats steps.
    declared = {name: matrix_products(optimizers[name]) for name in names}
    step_counts = {name: recording_steps(declared[name], args.repeats) for name in names}
    times: dict[str, list[float]] = {name: [] for name in names}
    peaks: dict[str, int] = {name: 0 for name in names}
    for repeat in range(max(step_counts.values())):
        print(f"\rtiming: step {repeat + 1}/{max(step_counts.values())}{'':<30}", end="", file=sys.stderr, flush=True)
        for name in (name for name in names if repeat < step_counts[name]):
            seconds, peak = timed_step(name)
            times[name].append(seconds)
            peaks[name] = max(peaks[name], peak)
    print(file=sys.stderr)
    periodic = {name for name in names if recording_steps(declared[name], 1) > 1}
    step_seconds = {name: (statistics.mean if name in periodic else statistics.median)(times[name]) for name in names}

    reference = step_seconds.get("adamw-fused")
    model_bytes = n_params * params[0].element_size()
    print(f"{'optimizer':<22} {'step':>12} {'vs fused AdamW':>15} {'peak extra memory':>24} {'state':>10}")
    for name in names:
        seconds = step_seconds[name]
        ratio = f"{seconds / reference:.2f}x" if reference else "-"
        extra = f"{peaks[name] / 2**20:.0f} MiB ({peaks[name] / model_bytes:.2f} model)"
        state = sum(t.numel() * t.element_size() for s in optimizers[name].state.values()
                    for t in state_tensors(list(s.values())) if t.numel() > 1)  # (not the 0-d step counts)
        print(f"{name:<22} {seconds * 1e3:>10.1f}ms {ratio:>15} {extra:>24} {state / model_bytes:>8.2f}x")

    products = {name: recorded_products(optimizers[name], lambda: [timed_step(name)  # (whole periods, as timed)
                                                                   for _ in range(step_counts[name])])
                for name in names if declared[name]}
    if products:
        print()
        floors = measure_floors(products, device, repeats=args.repeats)
        print_floors({name: 1e3 * step_seconds[name] for name in products}, floors,
                     reference and 1e3 * reference)
    print()
    label = "smoke model" if args.smoke else args.model + (f" ({args.n_layer} layers)" if args.n_layer else "")
    print_owner_plans({label: config})


def state_tensors(values: list) -> list[torch.Tensor]:
    """The tensors among optimizer state values, also inside lists (SOAP's statistics and bases)."""
    return [t for v in values for t in (state_tensors(v) if isinstance(v, (list, tuple)) else [v])
            if torch.is_tensor(t)]


if __name__ == "__main__":
    main()
