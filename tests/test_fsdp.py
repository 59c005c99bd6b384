"""
Sharded training (data_parallel=fsdp, parallel.py) in this process: DDP and FSDP on a one-rank gloo group
step as one process does, and the CPU's dtype policy (tests/test_cuda.py checks CUDA's with sharded_dtypes).
That every variant of the registry, sharded over 2 and 4 ranks, ends where DDP and one process end (weights
and diagnostics) is asserted of the resume matrix's straight runs (tests/test_resume_matrix.py).
"""

from contextlib import nullcontext

import pytest
import torch
import torch.distributed as dist

import train
from conftest import free_port
from model import GPT, GPTConfig
from optim import build_optimizer, load_config
from config.cells import mini_recipes
from optim.schedule import set_learning_rates
from parallel import parallelize
from runtime import Runtime

# A model whose matrices split unevenly over 2 and 4 ranks (c_attn: 102 rows, the position table: 30; FSDP2's
# blocks of ceil(rows / ranks)); grad_multiplier 10: MARS's clip of c divides 40% of the tensors and grad_clip 5
# clips the gradients (the sharded norms are in play).
SHAPE = ["--n_layer=2", "--n_head=2", "--n_embd=34", "--block_size=30", "--vocab_size=128", "--total_batch_size=240",
         "--warmup_iters=2", "--max_iters=6", "--dropout=0.0", "--grad_clip=5.0", "--grad_multiplier=10"]
STEPS = 6


def train_variant(args: list[str], data_dir: str, micro_batch: int, data_parallel: str, rt: Runtime) -> dict:
    """STEPS steps of a variant through train.StepContext; the whole weights."""
    cfg = load_config([*args, *SHAPE, f"--micro_batch_size={micro_batch}", f"--data_dir={data_dir}",
                       f"--data_parallel={data_parallel}", "--compile=False"])
    data = train.load_data(cfg, rt)
    torch.manual_seed(cfg.seed)
    raw_model = GPT(GPTConfig(**cfg.model_args()))
    model = parallelize(raw_model, cfg, rt)
    optimizer = build_optimizer(raw_model, cfg, "cpu")
    scaler = torch.amp.GradScaler("cpu", enabled=False)
    steps = train.StepContext(model, list(raw_model.parameters()), optimizer, scaler, data.train_batches, cfg, rt,
                              nullcontext())
    for step in range(STEPS):
        set_learning_rates(optimizer, step, cfg, cfg.total_iters())
        steps.optimizer_step(step)
    return whole_weights(raw_model)


def whole_weights(model: torch.nn.Module) -> dict:
    return {k: (v.full_tensor() if hasattr(v, "full_tensor") else v).detach().clone()
            for k, v in model.state_dict().items()}


def sharded_dtypes(device: str, monkeypatch) -> dict:
    """parallel.shard of a tiny GPT on `device` (a one-rank process group in this process, gloo or NCCL,
    dtype auto: bf16 on CUDA), one forward-backward: the dtype a block's matmul saw its weight in and
    computed in, and the dtypes of the sharded parameters and their gradients."""
    monkeypatch.setenv("MASTER_ADDR", "localhost")
    monkeypatch.setenv("MASTER_PORT", str(free_port()))
    dist.init_process_group("nccl" if device == "cuda" else "gloo", rank=0, world_size=1)
    try:
        cfg = load_config([*SHAPE, "--micro_batch_size=2", "--data_parallel=fsdp", f"--device={device}"])
        model = GPT(GPTConfig(**cfg.model_args())).to(device)
        parallelize(model, cfg, Runtime(0, 0, 1, torch.device(device)))
        seen = []
        model.transformer.h[0].attn.c_attn.register_forward_hook(
            lambda module, args, out: seen.append((module.weight.dtype, out.dtype)))
        tokens = torch.randint(0, cfg.vocab_size, (2, cfg.block_size), device=device)
        model(tokens, tokens)[1].backward()
        return dict(compute=seen[0], parameters={p.dtype for p in model.parameters()},
                    gradients={p.grad.dtype for p in model.parameters()})
    finally:
        dist.destroy_process_group()


@pytest.mark.quick
def test_ddp_and_fsdp_on_one_rank_step_as_one_process(tiny_dataset, monkeypatch):
    """The quick tier's DDP and FSDP steps: STEPS steps of MARS under DDP and under FSDP on a one-rank gloo
    group in this process end bit for bit where the same steps without a process group end."""
    variant, micro_batch = mini_recipes()["mars_approx"].args.split(), 8
    monkeypatch.setenv("MASTER_ADDR", "localhost")
    monkeypatch.setenv("MASTER_PORT", str(free_port()))
    dist.init_process_group("gloo", rank=0, world_size=1)
    try:
        wrapped = {data_parallel: train_variant(variant, tiny_dataset, micro_batch, data_parallel,
                                                Runtime(0, 0, 1, torch.device("cpu")))
                   for data_parallel in ("ddp", "fsdp")}
    finally:
        dist.destroy_process_group()
    plain = train_variant(variant, tiny_dataset, micro_batch, "ddp", Runtime(0, 0, 1, torch.device("cpu")))
    for data_parallel, weights in wrapped.items():
        assert all(torch.equal(weights[k], plain[k]) for k in plain), data_parallel


@pytest.mark.quick
def test_sharded_parameters_and_gradients_are_fp32_on_cpu(monkeypatch):
    """On CPU the policy is fp32 throughout (tests/test_cuda.py checks CUDA's bf16 compute)."""
    dtypes = sharded_dtypes("cpu", monkeypatch)
    assert dtypes == dict(compute=(torch.float32, torch.float32), parameters={torch.float32},
                          gradients={torch.float32})
