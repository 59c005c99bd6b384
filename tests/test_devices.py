"""
Device placement, tested on a CPU-only machine: every place where a checkpoint or a batch crosses
between host and device, exercised with a device that is not the CPU (PyTorch's `meta` device: a
meta tensor handed to a CPU-only API such as torch.set_rng_state fails as a CUDA one does), and
train.py with torch.compile and bf16 autocast on CPU, resumed bit-exact, and resumed under
torchrun with rank 0 verifying the checkpoint for both ranks.
"""

import os
import subprocess
import sys

import pytest
import torch

import train
from config import ConfigError
from checkpoint import ShardedCheckpoints, load_model, save_checkpoint, step_path
from optim import load_config
from parallel import ddp_bucket_mb
from conftest import PYTHON, REPO, cut_back, flip_middle_byte, run_train, scenario_result, tiny_run_args
from data.loader import to_device
from model import GPT, GPTConfig
from optim import build_optimizer
from runlog import RunLog
from runtime import Runtime
from test_train import load_weights, read_metrics

META = torch.device("meta")


def test_resume_onto_a_device_that_is_not_the_cpu(tiny_dataset, tmp_path):
    """A checkpoint resumed onto another device (meta here, CUDA for users): the model and the
    optimizer state arrive on that device, the RNG states stay on the CPU where torch.set_rng_state
    and torch.cuda.set_rng_state want them (resume and eval_only crashed on every GPU with them moved)."""
    out = str(tmp_path / "run")
    args = tiny_run_args(tiny_dataset, out, max_iters=4, eval_interval=4, optimizer="mars")
    run_train(args)
    cfg = load_config(args + ["--init_from=resume"])
    rt = Runtime(rank=0, local_rank=0, world_size=1, device=META)
    with META:  # (.to("meta") would untie the head from the embedding; .to("cuda") keeps the tie)
        model = GPT(GPTConfig(**cfg.model_args()))
    optimizer = build_optimizer(model, cfg, META.type)
    scaler = torch.amp.GradScaler("cpu", enabled=False)
    fingerprint = train.load_data(cfg, rt).fingerprint
    run = train.resume_run(cfg, rt, model, optimizer, scaler, fingerprint, RunLog(enabled=False))
    assert run.step == 4
    saved = torch.load(os.path.join(out, "ckpt.pt"), weights_only=True)
    assert torch.equal(torch.get_rng_state(), saved["rng"][0]["cpu"])
    assert all(p.device == META for p in model.parameters())
    moments = [v for state in optimizer.state.values() for k, v in state.items() if k != "step"]
    assert moments and all(v.device == META for v in moments)


def test_eval_sample_and_export_load_only_the_model_onto_the_device(tmp_path):
    """load_model (eval/, sample.py, export) on a device that is not the CPU: the weights go there,
    tied, and the optimizer state is never read."""
    ckpt_path = write_checkpoint_with_optimizer_state(str(tmp_path), GPTConfig(
        block_size=16, vocab_size=64, n_layer=1, n_head=2, n_embd=8), state_copies=3)
    model, _ = load_model(ckpt_path, META)
    assert all(p.device == META for p in model.parameters()) and not model.training
    cpu_model, _ = load_model(ckpt_path)
    assert cpu_model.lm_head.weight is cpu_model.transformer.wte.weight  # still tied after assign-loading
    saved = torch.load(ckpt_path, weights_only=True)["model"]
    assert all(torch.equal(cpu_model.state_dict()[k], v) for k, v in saved.items())


def write_checkpoint_with_optimizer_state(out_dir: str, config: GPTConfig, state_copies: int) -> str:
    """A checkpoint of a fresh model, with state_copies model-sized optimizer tensors (as MARS has 3)."""
    torch.manual_seed(0)
    model = GPT(config)
    optimizer_state = {i: {f"moment{j}": torch.randn_like(p) for j in range(state_copies)}
                       for i, p in enumerate(model.parameters())}
    state = dict(model=model.state_dict(), optimizer=dict(state=optimizer_state, param_groups=[]),
                 model_args=vars(config), step=1, config={"tokenizer": "gpt2"})
    return save_checkpoint(out_dir, state, keep=1)


def test_loading_a_model_takes_host_memory_for_the_model_not_the_checkpoint(tmp_path):
    """A 64 MB model with 3 copies of optimizer state (a 256 MB checkpoint, as MARS's): loading the model
    for evaluation grows the process's peak memory by the model at most (memory-mapped weights, read
    once to verify their checksums, no copy; the optimizer state never read). Loading the whole
    checkpoint took all of it."""
    ckpt_path = write_checkpoint_with_optimizer_state(str(tmp_path), PROBED, state_copies=3)
    model_bytes = 4 * GPT(PROBED).num_params()
    assert os.path.getsize(ckpt_path) > 3.5 * model_bytes
    peak_growth = peak_growth_of_load_model(ckpt_path)
    assert peak_growth < 1.1 * model_bytes, (peak_growth, model_bytes)


PROBED = GPTConfig(block_size=64, n_layer=2, n_head=4, n_embd=256)  # 64 MB, the embedding 50304 x 256


def peak_growth_of_load_model(path: str) -> int:
    """Bytes by which load_model(path) grows the peak resident set (VmHWM) of a fresh process, reset
    (clear_refs 5) just before the load; a first tiny model built on the meta device beforehand loads
    the meta machinery (75 MB of code, once)."""
    probe = ("import sys, torch; from checkpoint import load_model; from model import GPT, GPTConfig\n"
             "def kb(key): return int(next(l for l in open('/proc/self/status') if l.startswith(key)).split()[1])\n"
             "with torch.device('meta'): GPT(GPTConfig(block_size=8, vocab_size=8, n_layer=1, n_head=1, n_embd=8))\n"
             "open('/proc/self/clear_refs', 'w').write('5'); before = kb('VmRSS:')\n"
             "model = load_model(sys.argv[1])\n"
             "print(1024 * (kb('VmHWM:') - before))")
    proc = subprocess.run([sys.executable, "-c", probe, path], capture_output=True, text=True, cwd=REPO,
                          check=True, env={**os.environ, "PYTHONPATH": str(REPO)})
    return int(proc.stdout.split()[-1])


def test_a_sharded_checkpoint_loads_only_its_model_onto_the_device(tmp_path):
    """A sharded checkpoint (ckpt_<step>/, written here by one process): load_model puts the weights on the
    device asked for (meta here), tied, equal to the saved ones; and it takes host memory for the model
    and one tensor in flight (DCP reads each into a buffer, then copies it), never the optimizer's files.
    The head and the embedding were allocated apart before, one of them spare (1.5x this bound)."""
    torch.manual_seed(0)
    model = GPT(PROBED)
    optimizer = torch.optim.AdamW(model.parameters())
    for p in model.parameters():
        p.grad = torch.randn_like(p)
    optimizer.step()
    meta = dict(model_args=vars(PROBED), step=1, config={"tokenizer": "gpt2"})
    path = ShardedCheckpoints(str(tmp_path), keep=1, keep_best=False, asynchronous=False).save(
        model, optimizer, meta, best=False)
    on_meta, _ = load_model(path, META)
    assert all(p.device == META for p in on_meta.parameters()) and not on_meta.training
    loaded, _ = load_model(path)
    assert loaded.lm_head.weight is loaded.transformer.wte.weight
    assert all(torch.equal(loaded.state_dict()[k], v) for k, v in model.state_dict().items())
    largest = max(4 * p.numel() for p in model.parameters())
    peak_growth = peak_growth_of_load_model(path)
    assert peak_growth < 1.1 * (4 * model.num_params() + largest), (peak_growth, 4 * model.num_params(), largest)


def test_batches_move_from_host_memory_to_any_device():
    """The loader's batches are host tensors; to_device pins them only for CUDA (pinning a device tensor,
    as bench/train_step.py did with batches made on the GPU, raises)."""
    x = torch.arange(6).view(2, 3)
    assert to_device(x, META).device == META and to_device(x, torch.device("cpu")) is x


def test_compiled_bf16_training_resumes_bit_exact(tiny_dataset, tmp_path):
    """train.py with compile=True and bf16 autocast (inductor's CPU backend): it learns, and a run preempted
    after its step-4 checkpoint (a copy of the run cut back to it) resumes to the uninterrupted run's weights,
    bit for bit. Two compiled runs: the first compiles the model and MARS-exact's kernels (cold: 23 kernels, each
    a C++ compile of 1-2 s; one layer, as two compile the same kernels), the resumed one loads them from the
    suite's compile cache."""
    common = dict(compile=True, dtype="bfloat16", max_iters=8, lr_decay_iters=8, eval_interval=4, dropout=0.1,
                  optimizer="mars", is_approx=False, n_layer=1)
    straight, resumed = str(tmp_path / "straight"), str(tmp_path / "resumed")
    run_train(tiny_run_args(tiny_dataset, straight, **common), timeout=600)
    cut_back(straight, 4, resumed)
    log = run_train(tiny_run_args(tiny_dataset, resumed, init_from="resume", **common), timeout=600).stdout
    assert "at step 4" in log, log[-2000:]
    a, b = load_weights(straight), load_weights(resumed)
    assert all(torch.equal(a[k], b[k]) for k in a)
    val = read_metrics(straight, "val")
    assert val[-1]["val_loss"] < val[0]["val_loss"] - 0.1, val  # (4.85 -> 4.69 in 8 steps; ln 128 = 4.85)


def test_deterministic_reaches_inductor_even_when_its_config_was_imported_first():
    """deterministic=True sets inductor's flag however the process started: inductor reads its environment
    variable only when its config is first imported, which torch._dynamo's import (an optimizer's first
    construction, or the tests' preloaded python3) may have done already; torch.use_deterministic_algorithms
    sets the flag itself."""
    code = ("import torch._dynamo, torch._inductor.config as c, torch, runtime; "
            "runtime.configure_device(torch.device('cpu'), deterministic=True); "
            "print(c.deterministic, torch.are_deterministic_algorithms_enabled())")
    env = {k: v for k, v in os.environ.items() if k != "TORCHINDUCTOR_DETERMINISTIC"}
    proc = subprocess.run([PYTHON, "-c", code], capture_output=True, text=True, cwd=REPO, env=env, timeout=120)
    assert proc.stdout.split() == ["True", "True"], proc.stderr[-2000:]


def two_rank_scenarios(tiny_dataset: str, folder) -> list[tuple]:
    """For conftest.two_ranks, in order: test_two_ranks_resume_from_the_checkpoint_rank_0_verified's runs."""
    common = dict(micro_batch_size=2, max_iters=8, lr_decay_iters=8, eval_interval=2, ckpt_keep=3)
    straight, resumed = str(folder / "devices_straight"), str(folder / "devices_resumed")
    return [("devices_straight", "ranks:train", dict(args=tiny_run_args(tiny_dataset, straight, **common))),
            ("devices_first_6", "ranks:train", dict(args=tiny_run_args(tiny_dataset, resumed, **{**common, "max_iters": 6}))),
            ("devices_corrupt_6", "test_devices:corrupt_on_rank_0", dict(path=step_path(resumed, 6))),
            ("devices_resumed", "ranks:train", dict(args=tiny_run_args(tiny_dataset, resumed, init_from="resume", **common)))]


def corrupt_on_rank_0(rt, path: str) -> None:
    from ranks import on_main_rank

    on_main_rank(rt, lambda: flip_middle_byte(path))


def test_two_ranks_resume_from_the_checkpoint_rank_0_verified(two_ranks, two_ranks_folder):
    """2 ranks: the newest checkpoint is corrupt; rank 0 finds it (the only sha256 pass), both ranks resume
    from the older one, and the run equals an uninterrupted one bit for bit."""
    straight, resumed = str(two_ranks_folder / "devices_straight"), str(two_ranks_folder / "devices_resumed")
    assert scenario_result(two_ranks, "devices_straight")["status"] == 0
    assert scenario_result(two_ranks, "devices_first_6")["status"] == 0
    scenario_result(two_ranks, "devices_corrupt_6")
    resumed_run = scenario_result(two_ranks, "devices_resumed")
    log = resumed_run["output"]
    assert resumed_run["status"] == 0, log[-2000:]
    assert log.count("skipping checkpoint") == 1 and "resuming" in log and "at step 4" in log, log[-2000:]
    a, b = load_weights(straight), load_weights(resumed)
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_compiled_ddp_accepts_the_bucket_size_of_a_tiny_model():
    """Compiled DDP splits its graph at bucket boundaries (torch._dynamo's DDPOptimizer), which asserts that
    the bucket cap is at least DDP's first bucket (1 MiB). One block of a tiny model is far smaller: every
    compiled torchrun run of one failed on the GPU. The default is now at least that; a smaller
    ddp_bucket_mb is a named config error."""
    from torch._dynamo.backends.distributed import DDPOptimizer

    cfg = load_config(tiny_run_args("data", "out"))
    model = GPT(GPTConfig(**cfg.model_args()))
    assert 4 * sum(p.numel() for p in model.transformer.h[0].parameters()) < 2**20  # the case that failed
    DDPOptimizer(bucket_bytes_cap=int(ddp_bucket_mb(cfg, model) * 2**20), backend_compile_fn=None)
    with torch.device("meta"):  # GPT-2 small: one block's fp32 gradients, as before
        small = GPT(GPTConfig())
    assert ddp_bucket_mb(load_config([]), small) == 4 * sum(p.numel() for p in small.transformer.h[0].parameters()) / 2**20
    with pytest.raises(ConfigError, match="ddp_bucket_mb"):
        load_config(tiny_run_args("data", "out") + ["--ddp_bucket_mb=0.5"])
