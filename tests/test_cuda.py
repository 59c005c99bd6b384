"""
CUDA: the compiled optimizer rules against eager ones, bf16 Newton-Schulz against a float64
reference, train.py in bf16 with compile=True (learning, bit-exact resume, MARS-exact, HellaSwag in
the loop), torchrun with NCCL, and bench/gpu.py. Every test but the CPU smoke run of bench/gpu.py
needs a CUDA device and skips without one.
"""

import inspect
import json
import os
import signal
import subprocess
import sys

import pytest
import torch

import optim.rules
import test_train
import train
from bench.gpu import TABLE_HEADER, VARIANTS
from config import TrainConfig
from conftest import PYTHON, REPO, cut_back, relative_difference, run_train, step_weights, tiny_run_args, torchrun
from model import GPT, GPTConfig
from optim import MARS, OPTIMIZERS, build_optimizer
from optim.muon import NS5_EPS
from optim.newton_schulz import muon_scale, newton_schulz5_across_ranks, newton_schulz5_batched
from test_optim import (
    MARS_DEFAULTS, STEPS, TINY, gradient_stream, make_groups, make_params, reference_ns5, run_optimizer,
    run_reference_mars, tiny_config,
)
from test_fsdp import sharded_dtypes
from test_model import bf16_errors, fused_and_logits_models
from test_resume_matrix import EXTRA_ARGS
from test_train import load_weights, read_metrics

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
RULE_KERNELS = (optim.rules.ADAMW, optim.rules.UNCORRECTED_EPS_ADAMW, optim.rules.MARS_ADAMW, optim.rules.MARS_LION)


def cuda_run_args(data_dir: str, out_dir: str, **overrides) -> list[str]:
    """conftest.tiny_run_args on the GPU, in bf16, with the model and the optimizer rules compiled, and GPT-2's
    vocabulary (cheap on a GPU; the 'it learns' bounds below were measured on an H100 with it: the loss starts
    at ln 50304 = 10.83)."""
    return tiny_run_args(data_dir, out_dir, **{"device": "cuda", "dtype": "bfloat16", "compile": True,
                                               "vocab_size": 50304, **overrides})


def on_cuda(stream: list) -> list:
    """A gradient stream of tests/test_optim.py (per step, per parameter: (g, next-batch g)) on the GPU."""
    return [[tuple(g.cuda() for g in pair) for pair in step] for step in stream]


# ----------------------------------------------------------------------------- bench/gpu.py, on CPU


def table_rows(output: str) -> list[dict[str, str]]:
    """bench.gpu's table rows (the tiny model's), each by its column's name."""
    names = [cell.strip() for cell in TABLE_HEADER.strip("|").split("|")]
    return [dict(zip(names, (cell.strip() for cell in line.strip("|").split("|")))) for line in output.splitlines()
            if line.startswith("| tiny |")]


def test_gpu_benchmark_smoke_run_on_cpu():
    """`python -m bench.gpu --cpu-smoke` runs every optimizer of the registry through the benchmark's
    code path (tiny model, 2 steps, CPU) and prints its table: memory-only rows with bench.memory's
    prediction beside the peak, for every optimizer (SOAP's and Kron's side-sized state too)."""
    proc = subprocess.run([PYTHON, "-m", "bench.gpu", "--cpu-smoke"], cwd=REPO, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert proc.stdout.startswith("$ python -m bench.gpu --cpu-smoke\n# ")  # the command and the machine
    assert TABLE_HEADER in proc.stdout
    rows = table_rows(proc.stdout)
    assert len(rows) == 2 * len(VARIANTS)  # timed, then memory only
    timed, memory_only = rows[: len(VARIANTS)], rows[len(VARIANTS):]
    assert {row["optimizer"] for row in timed} >= {"AdamW", "MARS-approx", "MARS-exact", "Muon", "Moonlight"}
    assert all(row["tokens/s"] != "-" and row["step ms"] != "-" and row["note"] == "" for row in timed), timed
    assert all(row["model GiB"] != "-" for row in memory_only), memory_only
    assert "optimizer step alone" in proc.stdout and "MARS-exact whole step" in proc.stdout


def test_the_gpu_benchmarks_marked_step_takes_what_train_py_passes():
    """bench.gpu times train.StepContext's step through a subclass: its forward_backward must take every argument
    the loop passes (Sophia's Hessian pass calls it with sampled_labels, every 10th step, past the smoke run)."""
    from bench.gpu import MarkedSteps

    assert (inspect.signature(MarkedSteps.forward_backward).parameters.keys()
            == inspect.signature(train.StepContext.forward_backward).parameters.keys())


def test_gpu_benchmark_shards_the_model_as_train_py_does():
    """Under torchrun, bench.gpu spreads the model as train.py does (parallel.parallelize): FSDP over 2 CPU
    ranks with activation checkpointing, AdamW and MARS-exact (its stash of the next batch's gradient on
    sharded parameters), one table from rank 0, and each timed row profiled (on CPU, by aten op)."""
    proc = subprocess.run(torchrun(2) + ["-m", "bench.gpu", "--cpu-smoke", "--optimizers", "adamw,mars-exact",
                                         "--data-parallel", "fsdp", "--activation-checkpointing",
                                         "--alone-repeats", "0", "--profile-steps", "1"],
                          cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "fsdp over 2 rank(s), activation checkpointing" in proc.stdout
    assert proc.stdout.count(TABLE_HEADER) == 1
    rows = table_rows(proc.stdout)
    assert [row["optimizer"] for row in rows] == ["AdamW", "MARS-exact"] * 2
    assert all(row["tokens/s"] != "-" for row in rows[:2]) and all(row["model GiB"] != "-" for row in rows[2:])
    profiles = [line for line in proc.stdout.splitlines() if line.startswith("where the time goes")]
    assert len(profiles) == 2 and all("matmul" in line and "idle" in line for line in profiles), profiles


# ----------------------------------------------------------------------------- optimizers on CUDA


# Every optimizer of the registry with compiled rules (AdamW is torch's fused one: none), plus variants.
RULE_VARIANTS = [dict(optimizer=name) for name in OPTIMIZERS if hasattr(build_optimizer(
    GPT(GPTConfig(**TINY)), tiny_config(optimizer=name, lr_schedule="constant"), "cpu"), "compiled")] + [
    variant for variant in (
        dict(optimizer="mars", is_approx=False), dict(optimizer="mars", mars_type="mars-lion"),
        dict(optimizer="mars", mars_type="mars-shampoo"), dict(optimizer="mars", amsgrad=True, optimize_1d=True),
        dict(optimizer="muon", muon_adamw="official"), dict(optimizer="mars-m", is_approx=False),
        dict(optimizer="mars-m", mars_m_efficient=True),
    ) if variant["optimizer"] in OPTIMIZERS
]


@needs_cuda
@pytest.mark.parametrize("overrides", RULE_VARIANTS, ids=lambda v: "-".join(f"{k}={v[k]}" for k in v))
def test_compiled_rules_equal_eager_on_cuda(overrides, monkeypatch):
    """The registry's optimizers on a tiny GPT's CUDA parameters: compile=True (the rules compiled on
    whole lists, CUDA's mode) gives the eager numbers, to fp32 rounding."""
    monkeypatch.setattr(torch._dynamo.config, "recompile_limit", 64)  # every variant's lists in one process
    for kernel in RULE_KERNELS:
        monkeypatch.setattr(kernel, "compile_failed", False)
    assert not optim.rules.compile_per_tensor(torch.device("cuda"))
    results = []
    for compiled in (False, True):
        torch.manual_seed(0)
        model = GPT(GPTConfig(**TINY)).cuda()
        params = list(model.parameters())
        opt = build_optimizer(model, tiny_config(compile=compiled, learning_rate=1e-2, **overrides), "cuda")
        assert opt.compiled is compiled
        torch.manual_seed(1)
        stream = [[tuple(torch.randn_like(p) * (2.5 if step % 3 == 0 else 0.4) / p.numel() ** 0.5 for _ in range(2))
                   for p in params] for step in range(5)]  # norms about 2.5 or 0.4: MARS's clip acts on some steps
        run_optimizer(opt, params, stream)
        results.append(params)
    assert not [kernel.rule.__name__ for kernel in RULE_KERNELS if kernel.compile_failed]  # no silent eager fallback
    for eager, compiled in zip(*results):
        torch.testing.assert_close(compiled, eager, rtol=1e-5, atol=1e-6)


@needs_cuda
@pytest.mark.parametrize("mars_type", ["mars-adamw", "mars-lion"])
def test_compiled_mars_rules_on_gpt2_small_parameters(mars_type, monkeypatch):
    """The rules compiled on GPT-2 small's own parameter list, whose 38.6M-element embedding's norm is a
    split reduction on CUDA (torch 2.11's loop reordering asserted on it, and every MARS run fell back to
    eager): compiled, no fallback, the eager numbers."""
    monkeypatch.setattr(torch._dynamo.config, "recompile_limit", 64)
    for kernel in RULE_KERNELS:
        monkeypatch.setattr(kernel, "compile_failed", False)
    results = []
    for compiled in (False, True):
        torch.manual_seed(0)
        model = GPT(GPTConfig(bias=False)).cuda()
        params = list(model.parameters())
        opt = build_optimizer(model, tiny_config(compile=compiled, optimizer="mars", mars_type=mars_type), "cuda")
        torch.manual_seed(1)
        stream = [[tuple(torch.randn_like(p) * 1e-3 for _ in range(2)) for p in params] for _ in range(2)]
        run_optimizer(opt, params, stream)
        results.append([p.detach().clone() for p in params])
        del model, params, opt, stream
    assert not [kernel.rule.__name__ for kernel in RULE_KERNELS if kernel.compile_failed]
    for eager, compiled in zip(*results):
        torch.testing.assert_close(compiled, eager, rtol=1e-5, atol=1e-6)


# Tall, wide and square, down to GPT-2's own shapes (attention, MLP, the token embedding both ways).
NS5_SHAPES = [(24, 16), (16, 40), (64, 64), (768, 768), (768, 2304), (3072, 768), (50304, 768), (768, 50304)]


@needs_cuda
@pytest.mark.parametrize("shape", NS5_SHAPES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_bf16_newton_schulz_on_cuda_matches_float64_reference(shape):
    """Muon's and MARS-Shampoo's orthogonalised update, NS5 in bf16 on CUDA, against tests/test_optim.py's
    float64 NS5. bf16 rounding inside the iteration costs 2-3% in relative Frobenius error on random
    matrices (measured with a bf16 emulation on CPU); a wrong coefficient or orientation costs O(1)."""
    matrix = torch.randn(shape, generator=torch.Generator().manual_seed(0)).cuda()
    scale = max(1.0, shape[0] / shape[1]) ** 0.5
    updates = {name: (newton_schulz5_across_ranks([matrix], 5, eps)[0] * muon_scale(*shape), eps)
               for name, eps in (("muon", NS5_EPS), ("mars-shampoo", MARS_DEFAULTS["eps"]))}
    for name, (update, eps) in updates.items():
        expected = reference_ns5(matrix.double(), eps) * scale
        assert update.dtype == torch.float32, name  # the parameters' dtype
        error = ((update.double() - expected).norm() / expected.norm()).item()
        assert error < 6e-2, f"{name}: relative error {error:.3e}"


@needs_cuda
def test_batched_bf16_newton_schulz_on_cuda_equals_each_matrix_alone():
    """GPT-2 small's shape groups batched as Muon runs them on CUDA (one compiled bf16 graph per shape group):
    every matrix within bf16 rounding of the float64 reference, as alone, and each result the same whatever
    else is in its batch, to bf16 rounding (cuBLAS may pick another kernel for another batch size)."""
    gen = torch.Generator().manual_seed(0)
    shapes = [(2304, 768)] * 3 + [(768, 768)] * 4 + [(768, 3072), (3072, 768)] * 2 + [(1024, 768)]
    matrices = [torch.randn(s, generator=gen).cuda() for s in shapes]
    batched = newton_schulz5_batched(matrices)
    for i, (matrix, result) in enumerate(zip(matrices, batched)):
        assert result.dtype == torch.bfloat16 and result.shape == matrix.shape
        expected = reference_ns5(matrix.double(), 1e-7)
        error = ((result.double() - expected).norm() / expected.norm()).item()
        assert error < 6e-2, (shapes[i], error)
        alone = newton_schulz5_batched([matrix])[0]
        assert ((alone.double() - result.double()).norm() / expected.norm()).item() < 1e-2, shapes[i]


@needs_cuda
@pytest.mark.parametrize("is_approx", [True, False], ids=["approx", "exact"])
def test_mars_shampoo_on_cuda_matches_float64_reference(is_approx, monkeypatch):
    """MARS-Shampoo on CUDA (bf16 NS5, compiled AdamW rule for the 1-D parameters), 20 steps, against
    tests/test_optim.py's float64 reference: each parameter's displacement within 5% (bf16 NS5 emulated
    on CPU: 1-2%; without the variance reduction, gamma=0: 40-90%)."""
    monkeypatch.setattr(torch._dynamo.config, "recompile_limit", 64)  # the compiled AdamW rule, as above
    hp = {**MARS_DEFAULTS, "mars_type": "mars-shampoo", "is_approx": is_approx}
    stream = gradient_stream(STEPS)
    params = [torch.nn.Parameter(p.detach().cuda()) for p in make_params()]
    run_optimizer(MARS(make_groups(params), **hp), params, on_cuda(stream))
    for actual, expected, start in zip(params, run_reference_mars(hp, stream), make_params()):
        moved = (expected - start.double()).norm()
        error = ((actual.detach().cpu().double() - expected).norm() / moved).item()
        assert error < 5e-2, f"shape {tuple(start.shape)}: displacement error {error:.3e}"


@needs_cuda
def test_fused_cross_entropy_on_cuda_is_as_close_to_fp32_as_the_logits_path(monkeypatch):
    """model.LinearCrossEntropy on GPT-2's vocabulary, compiled, in bf16 autocast over several chunks (with
    ignored targets): its loss and gradients within twice the logits path's distance from an fp32 run's."""
    monkeypatch.setattr("model.CROSS_ENTROPY_CHUNK_ROWS", 96)  # 4 chunks, the last one short
    logits_path, fused = (model.cuda() for model in fused_and_logits_models(
        GPTConfig(n_layer=2, n_head=2, n_embd=64, block_size=128, vocab_size=50304)))
    x, y = torch.randint(0, 50257, (2, 2, 160), device="cuda").unbind(0)
    x, y = x[:, :128], y[:, :128].clone()
    y[0, :7] = -1
    errors = bf16_errors(logits_path, fused, x, y, compiled=True)
    assert errors["fused"][0] <= 2 * errors["logits"][0] + 1e-3, errors
    assert errors["fused"][1] <= 2 * errors["logits"][1] and errors["fused"][1] < 2e-2, errors


# ----------------------------------------------------------------------------- train.py on CUDA


MODELS = ["small", "llama-124m"]  # GPT-2 and the Llama, at conftest's tiny shape


@needs_cuda
@pytest.mark.parametrize("model", MODELS)
def test_bf16_compiled_training_lowers_the_loss_and_resumes_bit_exact(model, tiny_dataset, tmp_path):
    straight, halves = str(tmp_path / "straight"), str(tmp_path / "halves")
    # the schedule must not depend on max_iters; dropout: the CUDA generator state must resume too
    # deterministic: compiled embedding and flash-attention backwards use atomics otherwise
    common = dict(lr_decay_iters=30, eval_interval=10, dropout=0.1, deterministic=True, model=model)
    run_train(cuda_run_args(tiny_dataset, straight, max_iters=30, **common))
    val = read_metrics(straight, "val")
    assert [r["step"] for r in val] == [0, 10, 20, 30]
    assert val[-1]["val_loss"] < val[0]["val_loss"] - 1.0, val  # CPU (bf16 autocast): 10.83 -> 8.23
    info = json.load(open(os.path.join(straight, "config.json")))
    assert info["config"]["dtype"] == "bfloat16" and info["config"]["compile"] is True
    if train.peak_flops(TrainConfig(), torch.device("cuda")):  # a GPU whose peak train.py knows: MFU logged
        assert "mfu" in read_metrics(straight, "train")[0]
    # the window's peak memory, allocated and reserved: a tiny model's, under a GiB, and more reserved than allocated
    rows = read_metrics(straight, "train")
    assert all(0 < row["peak_memory_gib"] <= row["reserved_memory_gib"] < 1 for row in rows), rows

    run_train(cuda_run_args(tiny_dataset, halves, max_iters=15, **common))
    run_train(cuda_run_args(tiny_dataset, halves, max_iters=30, init_from="resume", **common))
    a, b = load_weights(straight), load_weights(halves)
    assert all(torch.equal(a[k], b[k]) for k in a)
    sa, sb = (torch.load(os.path.join(out, "ckpt.pt"), weights_only=True)["optimizer"]["state"]
              for out in (straight, halves))
    assert sa.keys() == sb.keys()
    assert all(torch.equal(sa[i][key], sb[i][key]) for i in sa for key in sa[i])


@needs_cuda
def test_sigterm_preemption_of_a_compiled_bf16_run_resumes_bit_exact(tiny_dataset, tmp_path):
    """The preemption drill: a compiled bf16 run stopped by a real SIGTERM mid-run, then resumed, ends
    with the weights and optimizer state of an uninterrupted run, bit for bit."""
    straight, preempted = str(tmp_path / "straight"), str(tmp_path / "preempted")
    common = dict(max_iters=30, lr_decay_iters=30, eval_interval=100000, dropout=0.1, deterministic=True)
    run_train(cuda_run_args(tiny_dataset, straight, **common))
    args = cuda_run_args(tiny_dataset, preempted, log_interval=1, **common)
    proc = subprocess.Popen([sys.executable, str(REPO / "train.py")] + args, cwd=REPO, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=dict(os.environ, PYTHONUNBUFFERED="1"))
    for line in proc.stdout:  # compiled and training: the signal lands mid-run
        if line.startswith("step 8/"):
            break
    proc.send_signal(signal.SIGTERM)
    output, _ = proc.communicate(timeout=300)
    assert proc.returncode == 128 + signal.SIGTERM, output
    stopped_at = torch.load(os.path.join(preempted, "ckpt.pt"), weights_only=True, mmap=True)["step"]
    assert 8 <= stopped_at < 30, stopped_at
    run_train(cuda_run_args(tiny_dataset, preempted, init_from="resume", **common))
    a, b = load_weights(straight), load_weights(preempted)
    assert all(torch.equal(a[k], b[k]) for k in a)
    sa, sb = (torch.load(os.path.join(out, "ckpt.pt"), weights_only=True)["optimizer"]["state"]
              for out in (straight, preempted))
    assert all(torch.equal(sa[i][key], sb[i][key]) for i in sa for key in sa[i])


@needs_cuda
def test_mars_exact_on_cuda_lowers_the_loss(tiny_dataset, tmp_path):
    out = str(tmp_path / "run")
    # config/mini_mars.py's settings; on CPU (bf16 autocast) the validation loss goes 10.83 -> 7.80
    run_train(cuda_run_args(tiny_dataset, out, max_iters=12, optimizer="mars", is_approx=False, learning_rate=1.2e-2,
                            lr_1d=6e-3, beta1=0.95, beta2=0.99, weight_decay=1e-2))
    val = read_metrics(out, "val")
    assert val[-1]["val_loss"] < val[0]["val_loss"] - 1.0, val
    assert json.load(open(os.path.join(out, "config.json")))["config"]["is_approx"] is False


@needs_cuda
@pytest.mark.parametrize("model", MODELS)
def test_hellaswag_in_the_loop_with_a_compiled_model(model, tiny_dataset, tmp_path, monkeypatch):
    """tests/test_train.py's HellaSwag-in-the-loop run, on the GPU with the model compiled."""
    monkeypatch.setattr(test_train, "tiny_run_args", cuda_run_args)
    test_train.test_hellaswag_in_the_loop(tiny_dataset, tmp_path, model)


# ----------------------------------------------------------------------------- torchrun with NCCL


@needs_cuda
def test_torchrun_with_nccl_on_one_gpu(tiny_dataset, tmp_path, monkeypatch):
    """torchrun --nproc_per_node=1: the process group (NCCL), DDP and the collectives of the loop."""
    monkeypatch.setenv("NCCL_DEBUG", "INFO")  # NCCL says it is there
    out = str(tmp_path / "run")
    proc = run_train(cuda_run_args(tiny_dataset, out, max_iters=12), nproc=1)
    assert "NCCL" in proc.stdout + proc.stderr
    assert json.load(open(os.path.join(out, "config.json")))["world_size"] == 1
    val = read_metrics(out, "val")
    assert val[-1]["val_loss"] < val[0]["val_loss"] - 0.3, val  # CPU: 10.83 -> 10.15 in 10 steps


@needs_cuda
@pytest.mark.parametrize("model", MODELS)
def test_fsdp_on_one_gpu_bf16_compiled_per_block(model, tiny_dataset, tmp_path):
    """data_parallel=fsdp under torchrun on one GPU: the bf16/fp32 mixed-precision policy, NCCL, each
    block compiled, activation checkpointing; the loss goes down and a sharded checkpoint is written."""
    out = str(tmp_path / "run")
    run_train(cuda_run_args(tiny_dataset, out, max_iters=12, data_parallel="fsdp", activation_checkpointing=True,
                            optimizer="mars", model=model), nproc=1)
    val = read_metrics(out, "val")
    assert val[-1]["val_loss"] < val[0]["val_loss"] - 0.3, val
    assert os.path.exists(os.path.join(out, "ckpt_0000012", "manifest.json"))


@needs_cuda
def test_fsdp_gathers_bf16_weights_onto_fp32_master_weights_and_gradients(monkeypatch):
    """data_parallel=fsdp on CUDA in bf16 (torchtitan's policy): a block computes with bf16 weights,
    the sharded parameters (master weights) and their reduced gradients stay fp32."""
    dtypes = sharded_dtypes("cuda", monkeypatch)
    assert dtypes == dict(compute=(torch.bfloat16, torch.bfloat16), parameters={torch.float32},
                          gradients={torch.float32})


# The optimizers whose state a sharded save or load once lost (MARS-exact's kept gradient, MARS-M-exact's,
# Schedule-Free's weight sums and step counters): the registry's recipe for each.
SHARDED_RESUME_RECIPES = {"mars_exact": ["config/mini_mars.py", "--is_approx=False"],
                          "mars_m_exact": ["config/mini_mars_m.py", "--is_approx=False"],
                          "schedule_free_adamw": ["config/mini_schedule_free_adamw.py"],
                          "mars_exact@llama": ["config/mini_mars.py", "--is_approx=False", "--model=llama-124m"],
                          # Prodigy's one step size over the shards; Sophia's Hessian pass (labels drawn in the
                          # compiled fused cross-entropy) every other step; each with the CPU matrix's settings
                          "prodigy": ["config/mini_prodigy.py", *EXTRA_ARGS["prodigy"]],
                          "sophia": ["config/mini_sophia.py", *EXTRA_ARGS["sophia"], "--fused_cross_entropy=True"],
                          # the baselines with sharded machinery of their own: Adam-mini's blocks made whole by an
                          # all-reduce, Scion's Newton-Schulz on owner ranks, Cautious AdamW's kept fraction
                          "adam_mini": ["config/mini_adam_mini.py"], "scion": ["config/mini_scion.py"],
                          # preconditioner stacks sharded over blocks: merged, the tiny model's matrices are many
                          "kron": ["config/mini_kron.py", "--kron_merge_small_dims=True"],
                          "cautious_adamw": ["config/mini_cautious_adamw.py", *EXTRA_ARGS["cautious-adamw"]],
                          # the two element-wise ones, so that each benchmark baseline resumes once on the GPU
                          "adopt": ["config/mini_adopt.py"], "signum": ["config/mini_signum.py"]}


@needs_cuda
@pytest.mark.parametrize("variant", SHARDED_RESUME_RECIPES)
def test_sharded_checkpoints_resume_on_cuda(variant, tiny_dataset, tmp_path):
    """tests/test_resume_matrix.py's transitions from a sharded checkpoint, on the GPU: bf16, NCCL on one rank,
    each block compiled, deterministic kernels. FSDP -> FSDP ends bit for bit where the uninterrupted run ends.
    FSDP -> DDP and FSDP -> one process change the rounding (FSDP computes a block in bf16 throughout, DDP's
    autocast keeps LayerNorm, softmax and the residual stream in fp32), which Adam-type rules amplify where
    gradients are small: on an H100 the last four steps under DDP ended 0.13 (MARS-exact), 0.29 (Schedule-Free)
    of those steps' move from the uninterrupted run's weights; the bound is half that move, and half of the
    validation loss's fall over those steps. Sophia's bounds are the whole move and the whole fall: its Hessian
    pass draws labels from the model's own softmax with fixed draws, so a rounding change near a row's boundary
    draws another label, and its clipped update does not shrink the difference (on an H200, 0.56 of the move
    under DDP).
    (The CPU matrix holds these transitions to 1e-6 in fp32.)"""
    straight = str(tmp_path / "straight")
    common = dict(max_iters=8, ckpt_interval=4, ckpt_keep=10, eval_interval=4, deterministic=True, vocab_size=128)
    config_file, *recipe_overrides = SHARDED_RESUME_RECIPES[variant]

    def args(out_dir: str, **settings) -> list[str]:  # the recipe's own overrides last: Prodigy's lr of 1.0
        return [config_file, *cuda_run_args(tiny_dataset, out_dir, **common, **settings), *recipe_overrides]

    run_train(args(straight, data_parallel="fsdp"), nproc=1)
    end, middle = step_weights(straight, 8), step_weights(straight, 4)
    moved = relative_difference(middle, end)
    straight_val = {r["step"]: r["val_loss"] for r in read_metrics(straight, "val")}
    for parallelism, nproc in (("fsdp", 1), ("ddp", 1), ("ddp", 0)):
        name = f"{parallelism}{nproc}"
        resumed = cut_back(straight, 4, str(tmp_path / name))
        run_train(args(resumed, data_parallel=parallelism, init_from="resume"), nproc=nproc)
        difference = relative_difference(step_weights(resumed, 8), end)  # (one process: a single file)
        val = read_metrics(resumed, "val")[-1]
        assert val["step"] == 8
        if parallelism == "fsdp":
            assert difference == 0.0 and val["val_loss"] == straight_val[8], (variant, name, difference, val)
        else:
            share = 1.0 if variant == "sophia" else 0.5
            assert difference < share * moved, (variant, name, difference, moved)
            fall = straight_val[4] - straight_val[8]
            assert abs(val["val_loss"] - straight_val[8]) < share * fall, (variant, name, val, straight_val)


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 CUDA devices")
def test_torchrun_with_nccl_on_two_gpus_matches_one_process(tiny_dataset, tmp_path, monkeypatch):
    """tests/test_train.py's two-process DDP test (gloo on CPU there), on two GPUs with NCCL, bf16, compiled."""
    monkeypatch.setattr(test_train, "tiny_run_args", cuda_run_args)
    # bf16 rounds a 4-sequence and two 2-sequence micro-batches differently (bf16 has 8 bits of mantissa:
    # ~0.4% per rounding); a wrong all-reduce or data split costs far more than 2%.
    test_train.test_two_process_ddp_matches_one_process(tiny_dataset, tmp_path, rel=2e-2)
