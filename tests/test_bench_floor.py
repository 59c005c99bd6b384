"""
The matrix optimizers' floor in the benchmarks (issue 61): bench.optimizer_step.measure_floors (the FLOPs and the
time of the matrix products a step declares), the owner plan of Newton-Schulz across ranks, and the floor rows
that `python -m bench.optimizer_step` and `python -m bench.gpu --cpu-smoke` print. Nothing here asserts a timing
(CPU): counts, sums, and that the printed ratios are those of the printed times.
"""

import dataclasses
import os
import statistics
import subprocess

import pytest
import torch

import bench.optimizer_step as optimizer_step
import conftest
from bench.gpu import FLOOR_HEADER, TABLE_HEADER
from bench.optimizer_step import (
    PLAN_WORLD_SIZES, SMOKE_MODEL, RecordedProducts, matrix_shapes, measure_floors, owner_plan, print_owner_plans,
    recorded_products, recording_steps,
)
from config.models import PRESETS
from model import GPT, GPTConfig
from optim import OPTIMIZERS, build_optimizer, load_config
from optim.contract import MatrixProducts
from optim.muon import Muon
from optim.newton_schulz import _compiled_ns5_iterations, _ns5_iterations, ns5_flops
from optim.sharding import balanced_owners

# NS5 of a 48 x 32 and two 32 x 96 matrices, 5 iterations of 4 n^2 m + 2 n^3 FLOPs each (n = 32 the short side)
SHAPES = [(48, 32), (32, 96), (32, 96)]
HAND_COUNT = 5 * ((4 * 32**2 * 48 + 2 * 32**3) + 2 * (4 * 32**2 * 96 + 2 * 32**3))  # 5,898,240


def matrix_optimizer(cfg_args: list[str], model_args: dict) -> torch.optim.Optimizer:
    """The optimizer of a config (load_config's arguments) built on a GPT of model_args on the meta device (its
    products need shapes only)."""
    with torch.device("meta"):
        model = GPT(GPTConfig(**model_args))
    return build_optimizer(model, load_config([*cfg_args, "--lr_schedule=constant", "--compile=False"]), "cpu")


def recorded_muon_products() -> dict:
    """The products two Muon steps over SHAPES dispatch, per step (NS5 in float32 on the CPU, uncompiled)."""
    params = [torch.nn.Parameter(torch.randn(shape)) for shape in SHAPES]
    muon = Muon([dict(params=params, use_muon=True)], compiled=False)

    def run():
        for _ in range(2):
            for p in params:
                p.grad = torch.randn_like(p)
            muon.step()

    recorded = recorded_products(muon, run)
    assert "step" not in vars(muon)  # (the class's step again)
    return recorded


class PretendProduct:
    """A product op on a pretend device, where it takes its FLOPs / RATE seconds: it advances the clock and counts
    its calls."""

    def __init__(self, call, rate: float, now: list, calls: list):
        self.overloadpacket, self.call, self.rate, self.now, self.calls = call.op.overloadpacket, call, rate, now, calls

    def __call__(self, *args, **kwargs):
        self.calls.append(self.call)
        self.now[0] += self.call.flops() / self.rate


@pytest.mark.quick
def test_the_floor_counts_ns5s_flops_as_by_hand_and_sums_each_product_per_step(monkeypatch):
    """The products a Muon step dispatches, recorded as it ran them (their ops, shapes and strides: X X^T's second
    operand a transposed view), are NS5's hand count; measure_floors on a device where a product takes FLOPs / RATE
    makes the floor the sum over products of its count per step x one call's time (so its rate is RATE), and times
    each distinct product once for all the optimizers that ran it."""
    recorded = recorded_muon_products()
    assert sum(count * call.flops() for call, count in recorded.items()) == HAND_COUNT
    assert any(operand.stride[-2] == 1 and operand.shape[-1] > 1 for call in recorded for operand in call.args
               if isinstance(operand, optimizer_step.Operand))  # (a transposed view, kept as one)
    rate, now, calls = 1e9, [0.0], []
    pretend = {call._replace(op=PretendProduct(call, rate, now, calls)): count for call, count in recorded.items()}
    halved = {call: count / 2 for call, count in pretend.items()}
    monkeypatch.setattr(optimizer_step.Clock, "mark", lambda self: now[0])
    floors = measure_floors({"ns5": pretend, "twice": {c: 2 * n for c, n in pretend.items()}, "halved": halved},
                            torch.device("cpu"), repeats=3, warmup=2)
    assert floors["ns5"].flops == HAND_COUNT
    assert floors["ns5"].ms == pytest.approx(1e3 * HAND_COUNT / rate, rel=1e-9)
    assert floors["ns5"].rate == pytest.approx(rate, rel=1e-9)
    assert floors["twice"].flops == 2 * HAND_COUNT and floors["twice"].ms == pytest.approx(2 * floors["ns5"].ms)
    assert floors["halved"].flops == HAND_COUNT / 2 and floors["halved"].ms == pytest.approx(floors["ns5"].ms / 2)
    assert len(calls) == len(recorded) * (2 + 3)  # each distinct product: warm-up + repeats, once for the three


@pytest.mark.quick
def test_the_floor_on_this_cpu_times_real_products():
    """Without pretending: a positive time for each product, the FLOPs the hand count, the rate FLOPs / floor."""
    floor = measure_floors({"ns5": recorded_muon_products()}, torch.device("cpu"), repeats=2)["ns5"]
    assert floor.flops == HAND_COUNT and floor.ms > 0
    assert floor.rate == pytest.approx(floor.flops / (floor.ms / 1e3))


def test_the_owner_plan_of_three_matrices_by_hand():
    """48 x 32 (1,310,720 FLOPs) and two 32 x 96 (2,293,760 each) over 2 ranks: the costliest first, each to the
    least-loaded rank: 32 x 96 -> 0, 32 x 96 -> 1, 48 x 32 -> 0. Under DDP the busiest receives the other's
    results, 32 x 96 in bf16; under FSDP, the two all-to-alls of bench.memory.ns5_exchange."""
    plan = owner_plan(SHAPES, 2)
    assert plan.loads == [2293760 + 1310720, 2293760] and sum(plan.loads) == HAND_COUNT
    assert plan.balance == pytest.approx(3604480 / 2949120) and plan.largest == 2293760
    assert plan.ddp_bytes == [2 * 32 * 96, 2 * (32 * 96 + 48 * 32)]  # each rank receives what the other owns
    # rank 0 owns the first 32 x 96 and the 48 x 32, receiving their other halves of rows: 16 x 96 + 24 x 32;
    # rank 1 its 32 x 96's other half; then each receives its rows of the other's results
    assert plan.fsdp_bytes == ([2 * (16 * 96 + 24 * 32), 2 * 16 * 96], [2 * 16 * 96, 2 * (16 * 96 + 24 * 32)])


@pytest.mark.quick
@pytest.mark.parametrize("model", ["small", "llama-124m"])
def test_the_owner_plan_shares_out_muons_products_as_balanced_owners_does(model, capsys):
    """On a real model's shapes: every rank's NS5 FLOPs sum to what Muon's products() declares for one process
    (every 2-D parameter, embeddings included: the paper's Muon), the balance is balanced_owners' on NS5's FLOPs,
    and print_owner_plans prints those numbers."""
    config = GPTConfig(**PRESETS[model])
    muon = matrix_optimizer(["--optimizer=muon"], PRESETS[model])
    one_process = sum(p.flops() for p in muon.products())
    shapes = matrix_shapes(config)
    assert sum(p.batch for p in muon.products()) == 3 * len(shapes)  # (3 products per matrix per iteration)
    print_owner_plans({model: config})
    out = capsys.readouterr().out.splitlines()
    rows = [line.split() for line in out if line.startswith(model + " ") and " over " not in line]
    assert [int(row[3]) for row in rows] == list(PLAN_WORLD_SIZES)
    for world_size, row in zip(PLAN_WORLD_SIZES, rows):
        plan = owner_plan(shapes, world_size)
        assert len(plan.loads) == world_size and sum(plan.loads) == pytest.approx(one_process, rel=1e-12)
        loads = balanced_owners([ns5_flops(*shape) for shape in shapes], world_size)[1]
        assert plan.balance == pytest.approx(max(loads) / statistics.mean(loads), rel=1e-12)
        assert int(row[1]) == len(shapes) and float(row[2]) == pytest.approx(one_process / 1e12, rel=1e-3)
        assert float(row[4]) == pytest.approx(max(loads) / 1e12, rel=1e-3)
        assert row[6] == f"{plan.balance:.2f}x" and float(row[8]) == pytest.approx(max(plan.ddp_bytes) / 1e9, rel=1e-3)
        shares = out[out.index(f"{model} over {world_size}") + 1:][:3]  # each rank's TFLOP, DDP GB, FSDP GB
        assert [float(x) for x in shares[0].split()[1:]] == pytest.approx([load / 1e12 for load in loads], rel=5e-3)  # (3 digits)
        assert [float(x) for x in shares[1].split()[2:]] == pytest.approx([b / 1e9 for b in plan.ddp_bytes], rel=5e-3)
    # GPT-2 small over 8 ranks: the 768 x 50304 embedding alone is 28% of NS5's FLOPs, so its owner is the busiest
    if model == "small":
        assert owner_plan(shapes, 8).balance == pytest.approx(8 * ns5_flops(768, 50304) / one_process, rel=1e-12)


def run_module(*args: str) -> subprocess.CompletedProcess:
    proc = subprocess.run([conftest.PYTHON, "-m", *args], cwd=conftest.REPO, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc


def test_optimizer_step_prints_the_floor_rows_of_the_matrix_optimizers():
    """`python -m bench.optimizer_step --smoke --optimizers adamw-fused,muon,mars-m` (its --quick has GPT-2
    small's 50304-wide embedding, whose NS5 takes seconds a step on a CPU): a floor row for Muon and none for fused
    AdamW, with Muon's FLOPs as its products() count them, step / floor and the ratio to fused AdamW those of the
    printed times; then the owner plan of the run's model. MARS-M keeps the last gradient by reference: each of
    its steps must find a gradient other than its last (an odd count of timed steps, then recording, gave it the
    same one, and the run failed)."""
    proc = run_module("bench.optimizer_step", "--smoke", "--optimizers", "adamw-fused,muon,mars-m")
    lines = proc.stdout.splitlines()
    # its progress on stderr while it compiles and times (a --quick run takes minutes)
    assert "warming up (compiling) 2/3: muon" in proc.stderr and "timing: step 3/3" in proc.stderr, proc.stderr
    header = next(i for i, line in enumerate(lines) if line.split()[:2] == ["optimizer", "step"]
                  and "floor" in line)
    for column in ("step ms", "GFLOP/step", "TFLOP/s at floor", "floor ms", "step/floor", "vs fused AdamW"):
        assert column in lines[header]
    floor_rows = {line.split()[0]: line.split() for line in lines[header + 1:] if line and line.split()[0] in
                  ("muon", "adamw-fused")}
    assert list(floor_rows) == ["muon"]
    step_ms, gflop, rate, floor_ms, step_over_floor, vs_adamw = floor_rows["muon"][1:]
    flops = sum(p.flops() for p in matrix_optimizer(["--optimizer=muon"], PRESETS["small"] | SMOKE_MODEL).products())
    assert float(gflop) == pytest.approx(flops / 1e9, rel=1e-4)
    assert float(rate) == pytest.approx(float(gflop) / float(floor_ms), rel=1e-3)  # GFLOP / ms = TFLOP/s
    assert float(step_over_floor[:-1]) == pytest.approx(float(step_ms) / float(floor_ms), abs=0.01, rel=1e-3)
    step_table_row = next(line.split() for line in lines[:header] if line.startswith("muon "))
    assert vs_adamw == step_table_row[2]  # the same ratio as the step table's
    plan_rows = [line.split() for line in lines if line.startswith("smoke model ") and " over " not in line]
    assert [int(row[4]) for row in plan_rows] == list(PLAN_WORLD_SIZES)


def test_gpu_benchmark_smoke_run_prints_the_floor_rows():
    """`python -m bench.gpu --cpu-smoke` (tests/test_cuda.py runs every optimizer through it; here three, for the
    floor table): a floor row for each timed matrix optimizer, none for AdamW, the optimizer and whole step as
    the main table has them, Muon's FLOPs those its config's optimizer declares, and the whole step against
    AdamW's the ratio of the two rows' step ms."""
    out = run_module("bench.gpu", "--cpu-smoke", "--optimizers", "adamw,muon,scion", "--alone-repeats", "0").stdout

    def rows(header: str) -> list[dict[str, str]]:
        names = [cell.strip() for cell in header.strip("|").split("|")]
        lines = out.splitlines()[out.splitlines().index(header) + 2:]
        table = lines[: next((i for i, line in enumerate(lines) if not line.startswith("|")), len(lines))]
        return [dict(zip(names, (cell.strip() for cell in line.strip("|").split("|")))) for line in table]

    table = {row["optimizer"]: row for row in rows(TABLE_HEADER) if row["note"] != "memory only"}
    floors = {row["optimizer"]: row for row in rows(FLOOR_HEADER)}
    assert list(floors) == ["Muon", "Scion"]
    muon_config = [os.path.join(conftest.REPO, "config", "gpt2_small_muon.py"),
                   *[f"--{k}={v}" for k, v in SMOKE_MODEL.items()]]  # (bench.gpu.row_config's model)
    model_args = load_config(muon_config).model_args()
    flops = sum(p.flops() for p in matrix_optimizer(muon_config, model_args).products())
    assert float(floors["Muon"]["GFLOP/step"]) == pytest.approx(flops / 1e9, rel=1e-4)
    for name, row in floors.items():
        assert float(row["optimizer ms"]) == pytest.approx(float(table[name]["optimizer ms"]), abs=0.051)
        assert float(row["whole step ms"]) == pytest.approx(float(table[name]["step ms"]), abs=0.051)
        ratio = float(row["whole step ms"]) / float(table["AdamW"]["step ms"])
        assert float(row["whole step / AdamW's"][:-1]) == pytest.approx(ratio, rel=0.05, abs=0.01)
        step_over_floor = float(row["optimizer ms"]) / float(row["floor ms"])
        assert float(row["step/floor"][:-1]) == pytest.approx(step_over_floor, rel=1e-3, abs=0.01)


# ----------------------------------------------------------------------------- declared products = what a step runs


def step_flops(optimizer: torch.optim.Optimizer, run) -> float:
    """The matrix products' FLOPs the optimizer's steps dispatch while run() runs, per step, as the floor counts them
    (bench.optimizer_step.recorded_products)."""
    return sum(count * call.flops() for call, count in recorded_products(optimizer, run).items())


# The settings that make each periodic part of a step run at every step, so that one step's products are the
# declared average: the bases' and root inverses' refresh (SOAP, SOAP-Muon, Shampoo), Kron's preconditioner update;
# MARS declares products only as MARS-Shampoo.
EVERY_STEP = {"precondition_frequency": 1, "kron_update_prob_min": 1.0}
LOOP = {"schedule-free-adamw": dict(lr_schedule="constant", warmup_iters=0)}  # (what its config requires)


@pytest.mark.parametrize("name", OPTIMIZERS)
def test_each_optimizers_declared_products_are_the_products_its_step_runs(name):
    """products(), the declared work that bench.memory's plans and the docs count, is what a step runs: for every
    registry optimizer that declares it (and an element-wise one runs none), the FLOPs of the products a step
    dispatches as the floor records them (mm, bmm, addmm, baddbmm, in place too, and the triangular solves at a
    product's count) equal the declared ones, at the step after the first (which only starts some optimizers'
    statistics), on a tiny GPT with its four block shapes, tall, square and wide."""
    from test_optim import TINY, tiny_config

    fields = {f.name for f in dataclasses.fields(OPTIMIZERS[name].hyperparameters)}
    settings = {k: v for k, v in EVERY_STEP.items() if k in fields} | LOOP.get(name, {}) | (
        {"mars_type": "mars-shampoo"} if name == "mars" else {})
    torch.manual_seed(0)
    model = GPT(GPTConfig(**TINY))
    optimizer = build_optimizer(model, tiny_config(optimizer=name, compile=False, **settings), "cpu")

    def step():
        for p in model.parameters():
            p.grad = torch.randn_like(p) * 0.01
        optimizer.step()

    step()
    if not isinstance(optimizer, MatrixProducts):  # an element-wise step: it must run no product
        assert step_flops(optimizer, step) == 0
        return
    declared = sum(product.flops() for product in optimizer.products())
    assert declared > 0
    assert step_flops(optimizer, step) == pytest.approx(declared, rel=1e-12)


def test_recording_runs_a_compiled_optimizer_and_leaves_it_compiled():
    """A compiled optimizer (its AdamW side a fullgraph compile, which cannot run under a dispatch mode) is recorded
    with its rules eager, and given back compiled (bench.optimizer_step's compiled optimizers failed so before)."""
    params = [torch.nn.Parameter(torch.randn(8, 6)), torch.nn.Parameter(torch.randn(6))]
    muon = Muon([dict(params=params[:1], use_muon=True), dict(params=params[1:], use_muon=False)], compiled=True)

    def run():
        for p in params:
            p.grad = torch.randn_like(p)
        muon.step()

    recorded = recorded_products(muon, run)
    assert muon.compiled and "step" not in vars(muon) and recorded


def test_a_compiled_newton_schulz_is_recorded_as_its_eager_form_dispatches():
    """On CUDA Newton-Schulz runs compiled (torch.compile, not fullgraph: optim.newton_schulz): dynamo runs a frame
    eagerly while a dispatch mode is on the stack, so the recorder sees the same products the eager iteration
    dispatches, 3 per iteration, rather than nothing (a compiled graph's products would bypass it)."""
    x = torch.randn(2, 8, 12)
    recorded = []
    for iterate in (_ns5_iterations, _compiled_ns5_iterations()):
        with RecordedProducts() as recorder:
            iterate(x, 5, "quintic")
        recorded.append(recorder.calls)
    assert recorded[1] == recorded[0] and sum(recorded[0].values()) == 15


@pytest.mark.parametrize("name", ["soap", "soap-muon"])
def test_a_periodic_refresh_is_recorded_at_its_declared_rate_wherever_the_recording_starts(name):
    """SOAP refreshes its bases every precondition_frequency (10) steps: recorded over recording_steps' whole periods,
    from any phase of the cycle, the products per step are the declared average (over the benchmark's 3 or 7 steps
    alone, a refresh counted 1/3 of a step, 1/7, or not at all)."""
    from test_optim import TINY, tiny_config

    model = GPT(GPTConfig(**TINY))
    optimizer = build_optimizer(model, tiny_config(optimizer=name, compile=False, precondition_frequency=10), "cpu")
    declared = optimizer.products()
    assert recording_steps(declared, 3) == 10 and recording_steps(declared, 12) == 20
    assert recording_steps([p for p in declared if p.per_step >= 1], 3) == 3

    def steps(count: int):
        for _ in range(count):
            for p in model.parameters():
                p.grad = torch.randn_like(p) * 0.01
            optimizer.step()

    steps(1)
    for phase in (0, 4):
        steps(phase)
        recorded = step_flops(optimizer, lambda: steps(recording_steps(declared, 3)))
        assert recorded == pytest.approx(sum(p.flops() for p in declared), rel=1e-12)
