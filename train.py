"""
Train a GPT-2 on token shards: one CPU, one GPU, or N GPUs on one or many nodes.

    python train.py config/quickstart.py                      # CPU, minutes
    python train.py config/gpt2_small_mars.py --compile=True  # one GPU
    torchrun --standalone --nproc_per_node=8 train.py config/gpt2_small_mars.py

The config file sets values of config.TrainConfig; --key=value overrides
follow it (--help lists every key, with the values they set; --print_config prints the resolved
config and exits). Outputs in out_dir: config.json (resolved config, code version),
metrics.jsonl (one JSON row per log/eval step) and checkpoints (checkpoint/).

The file reads top to bottom: set-up helpers, the work of one step, then train(), which
joins and leaves the process group around train_on(), the loop, which calls them in order.
"""

if __name__ == "__main__":  # first: a stop or requeue signal during the imports below is kept, not fatal
    from stop_signals import keep_early_stop_signals

    keep_early_stop_signals()

import gc  # noqa: E402  (the imports after the signal handlers)
import json
import math
import os
import sys
import time
from contextlib import nullcontext
from dataclasses import dataclass
from typing import IO, ContextManager

import numpy as np
import torch
import torch.distributed as dist

from checkpoint import (
    CheckpointError, FileCheckpoints, RunState, ShardedCheckpoints, check_resumable, has_checkpoint, load_checkpoint,
    load_latest, restore_training_state, run_meta,
)
from config import (
    HELP_FLAGS, PRINT_CONFIG_FLAG, ConfigError, TrainConfig, help_text, hf_source, load_config, recorded_config,
)
from data.loader import TokenWindows, TrainBatches, to_device, validation_window_ids
from data.prepare import PrepareError, check_complete
from data.shards import ShardError
from errors import InputError, exit_on_input_error
from huggingface import hf_model_args, load_hf_weights
from model import GPT, GPTConfig
from optim import HYPERPARAMETERS, build_optimizer
from optim.contract import (
    EvaluationWeights, VarianceReduction, evaluation_weights, needs_hessian_estimate, needs_second_gradient,
)
from optim.diagnostics import update_and_weight_rms, weights_before_step
from optim.routing import parameter_kinds
from optim.schedule import set_learning_rates
from parallel import check_parallelism, clip_grad_norm_, gradient_sync, parallelize
from runlog import RunLog, lock_out_dir
from runtime import (
    Runtime, StopSignal, Watchdog, all_reduce_sum, autocast_context, broadcast_from_main, check_slurm_restarts,
    close_runtime, code_version, configure_device, init_runtime, requeue_slurm_job, resolve_dtype,
)
from stop_signals import keep_early_stop_signals

# Dense bf16 FLOP/s by a name in the device's (the first that matches: H100 PCIe and NVL before H100 SXM)
PEAK_BF16_FLOPS = {"A100": 312e12, "H100 PCIe": 756e12, "H100 NVL": 835e12, "H100": 989e12, "H200": 989e12}


# -----------------------------------------------------------------------------
# Set-up


@dataclass
class Data:
    train_batches: TrainBatches
    val_windows: TokenWindows
    val_ids: np.ndarray  # this rank's share of the fixed validation windows
    val_batches: int  # micro-batches of them per rank: the same on every rank (sharded forwards need it)
    fingerprint: list  # the training shards' names and sizes


def load_data(cfg: TrainConfig, rt: Runtime) -> Data:
    data_dir = cfg.data_path()
    train_windows = TokenWindows(data_dir, "train", cfg.block_size, cfg.vocab_size)
    val_windows = TokenWindows(data_dir, "val", cfg.block_size, cfg.vocab_size)
    train_batches = TrainBatches(train_windows, cfg.seed, cfg.total_batch_size // cfg.block_size)
    all_val_ids = validation_window_ids(val_windows, cfg.eval_sequences)
    val_batches = math.ceil(math.ceil(len(all_val_ids) / rt.world_size) / cfg.micro_batch_size)
    return Data(train_batches, val_windows, all_val_ids[rt.rank :: rt.world_size], val_batches,
                train_windows.fingerprint())


def check_out_dir(out_dir: str, resume: bool, eval_only: bool) -> None:
    """A resume needs a checkpoint; a fresh run must not overwrite one."""
    if resume and not has_checkpoint(out_dir):
        raise ConfigError(f"{'eval_only' if eval_only else 'init_from=resume'} needs a checkpoint, and there is "
                          f"none in {out_dir}; point out_dir at a run (or start one with --init_from=scratch)")
    if not resume and has_checkpoint(out_dir):
        raise ConfigError(f"{out_dir} already holds a checkpoint (ckpt.pt already exists): resume it with "
                          "--init_from=resume, or choose another out_dir (a new run would overwrite it)")


def claim_out_dir(out_dir: str, rt: Runtime) -> IO | None:
    """Rank 0 locks out_dir for this run (runlog.lock_out_dir); on a refusal every rank stops."""
    lock, error = None, None
    if rt.is_main:
        try:
            lock = lock_out_dir(out_dir)
        except InputError as e:
            error = str(e)
    error = broadcast_from_main(error)
    if error:
        raise InputError(error)
    return lock


def resume_run(cfg: TrainConfig, rt: Runtime, model: GPT, optimizer: torch.optim.Optimizer,
               scaler: torch.amp.GradScaler, fingerprint: list, log: RunLog) -> RunState:
    """Restore the newest usable checkpoint in out_dir, after checking it can continue this run.
    Rank 0 verifies the candidates (a sha256 pass each) and tells the others which one to load. Every
    rank loads it memory-mapped on the CPU: load_state_dict moves the tensors to the model's device,
    and the RNG states stay CPU tensors, as torch.set_rng_state and torch.cuda.set_rng_state need."""
    path, ckpt, error = None, None, None
    if rt.is_main:
        try:
            path, ckpt = load_latest(cfg.out_dir, log.print)
        except CheckpointError as e:
            error = str(e)
    path, error = broadcast_from_main((path, error))
    if error:
        raise CheckpointError(error)
    if ckpt is None:
        ckpt = load_checkpoint(path, verify=False)
    changed = check_resumable(ckpt, path, cfg.to_dict(), cfg.model_args(), fingerprint,
                              cfg.hyperparameters.state_keys)
    log.print(f"resuming {path} at step {ckpt['step']}" + (f"; config changes (old, new): {changed}" if changed else ""))
    run = restore_training_state(ckpt, model, optimizer, scaler)
    rng_states = ckpt["rng"]
    if len(rng_states) == rt.world_size:
        torch.set_rng_state(rng_states[rt.rank]["cpu"])
        if rt.device.type == "cuda" and rng_states[rt.rank]["cuda"] is not None:
            torch.cuda.set_rng_state(rng_states[rt.rank]["cuda"], rt.device)
    else:  # another world size: the data is the same, dropout masks cannot be
        torch.manual_seed(cfg.seed + 7919 * run.step + rt.rank)
    return run


def gather_rng_states(rt: Runtime) -> list[dict]:
    """Every rank's generator states (a collective), for a checkpoint."""
    rng = dict(cpu=torch.get_rng_state(),
               cuda=torch.cuda.get_rng_state(rt.device) if rt.device.type == "cuda" else None)
    if not rt.distributed:
        return [rng]
    states = [None] * rt.world_size
    dist.all_gather_object(states, rng)
    return states


def peak_flops(cfg: TrainConfig, device: torch.device) -> float:
    """The device's dense bf16 FLOP/s for MFU: the config's, else guessed from the GPU's name (0: no MFU)."""
    if cfg.peak_flops or device.type != "cuda":
        return cfg.peak_flops
    return next((v for k, v in PEAK_BF16_FLOPS.items() if k in torch.cuda.get_device_name(device)), 0.0)


# -----------------------------------------------------------------------------
# The work of one step


@dataclass
class StepContext:
    """What the work of every optimizer step uses, built once (by train() and the benchmarks, which
    subclass it to time its parts)."""

    model: torch.nn.Module  # what runs the forward pass (compiled, DDP-wrapped)
    params: list[torch.Tensor]
    optimizer: torch.optim.Optimizer
    scaler: torch.amp.GradScaler
    batches: TrainBatches
    cfg: TrainConfig
    rt: Runtime
    autocast: ContextManager

    def forward_backward(self, batch_step: int, sampled_labels: bool = False) -> torch.Tensor:
        """grad_multiplier x the mean gradient of the global batch of batch_step, in p.grad (DDP averages
        over ranks, on the last micro-step only); returns the batch's mean loss (on device). With
        sampled_labels, the loss is against labels drawn from the model's own predictions instead of the
        batch's next tokens (Sophia's Hessian estimate: TrainBatches.label_draws)."""
        cfg, rt = self.cfg, self.rt
        grad_accum = cfg.grad_accum_steps(rt.world_size)
        loss_total = torch.zeros((), device=rt.device)
        for micro_step in range(grad_accum):
            x, y = self.batches.micro_batch(batch_step, micro_step, cfg.micro_batch_size, rt.rank, rt.world_size)
            labels = (dict(label_draws=self.batches.label_draws(
                batch_step, micro_step, cfg.micro_batch_size, rt.rank, rt.world_size, rt.device))
                      if sampled_labels else dict(targets=to_device(y, rt.device)))
            last_micro_step = micro_step == grad_accum - 1
            with gradient_sync(self.model, last_micro_step):
                with self.autocast:
                    # only the loss is bound: the logits (B x T x vocab) go when the forward ends, not after
                    # the backward (the loss's graph keeps what its backward needs)
                    loss = self.model(to_device(x, rt.device), **labels)[1]
                    loss = loss / (grad_accum / cfg.grad_multiplier)
                self.scaler.scale(loss).backward()
            loss_total += loss.detach()
        return loss_total / cfg.grad_multiplier

    def clip_gradients(self) -> torch.Tensor:
        """Global gradient norm (before clipping), clipping to grad_clip when it is set."""
        self.scaler.unscale_(self.optimizer)
        return clip_grad_norm_([p for p in self.params if p.grad is not None], self.cfg.grad_clip)

    def optimizer_step(self, step: int, diagnosed_kinds: dict[str, list[torch.Tensor]] | None = None
                       ) -> tuple[torch.Tensor, torch.Tensor, dict[str, torch.Tensor]]:
        """One optimizer step on the batch of `step`; returns its loss, gradient norm and, given the
        parameters by kind, the optimizer diagnostics (optim/diagnostics.py), all on device."""
        optimizer, scaler = self.optimizer, self.scaler
        if needs_second_gradient(optimizer):  # MARS-exact: the gradient at these weights on the next batch
            self.forward_backward(step + 1)
            self.clip_gradients()
            optimizer.stash_grad_for_next_step()
            optimizer.zero_grad(set_to_none=True)
            scaler.update()
        loss = self.forward_backward(step)
        grad_norm = self.clip_gradients()
        diagnostics, weights_before = {}, None
        if diagnosed_kinds is not None:
            if isinstance(optimizer, VarianceReduction):
                diagnostics = optimizer.variance_reduction_stats()
            weights_before = weights_before_step(diagnosed_kinds)
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad(set_to_none=True)
        if weights_before is not None:
            diagnostics |= update_and_weight_rms(diagnosed_kinds, weights_before)
        if needs_hessian_estimate(optimizer, step):  # Sophia: the gradient on labels the model draws itself
            self.forward_backward(step, sampled_labels=True)
            if optimizer.clip_hessian_gradient:  # (the authors' loop clips it as the step's gradient)
                self.clip_gradients()
            else:
                scaler.unscale_(optimizer)
            optimizer.update_hessian()
            optimizer.zero_grad(set_to_none=True)
            scaler.update()
        return loss, grad_norm, diagnostics


@torch.no_grad()
def evaluate(model: GPT, windows: TokenWindows, window_ids: np.ndarray, batches: int, micro_batch_size: int,
             rt: Runtime, autocast: ContextManager) -> float:
    """Mean loss over the fixed validation windows (each rank scores its share in `batches` forward
    passes, the same count on every rank; a rank whose share has run out scores a window it ignores)."""
    model.eval()
    loss_sum = torch.zeros((), device=rt.device)
    for i in range(0, batches * micro_batch_size, micro_batch_size):
        ids = window_ids[i : i + micro_batch_size]
        x, y = windows.gather(ids if len(ids) else np.zeros(1, dtype=np.int64))
        with autocast:
            loss = model(to_device(x, rt.device), to_device(y, rt.device))[1]  # (the logits go now)
        if len(ids):
            loss_sum += loss * len(ids)
    model.train()
    totals = all_reduce_sum(torch.stack([loss_sum, torch.tensor(float(len(window_ids)), device=rt.device)]))
    return (totals[0] / totals[1]).item()


def clocks() -> dict[str, float]:
    """A metrics row's clocks: the wall clock, and this process's CPU time with its pid (its own core-seconds,
    however many other processes share the machine: what a CPU sweep's core-hours are counted from,
    experiments.tune.core_seconds; the pid tells a resumed run's new process from the old)."""
    return dict(time=time.time(), process_cpu_s=time.process_time(), pid=os.getpid())


class LogWindow:
    """Sums, on the device, of the steps since the last log: read (one host sync) at log steps."""

    def __init__(self, device: torch.device):
        self.loss_sum = torch.zeros((), device=device)
        self.clipped_steps = torch.zeros((), device=device)
        self.steps = 0
        self.start_time = time.time()

    def add(self, loss: torch.Tensor, grad_norm: torch.Tensor, grad_clip: float) -> None:
        self.loss_sum += loss
        if grad_clip > 0:
            self.clipped_steps += (grad_norm > grad_clip).float()
        self.steps += 1

    def mean_loss(self, rt: Runtime, step: int, out_dir: str) -> float:
        """Mean training loss of the window over all ranks (a collective); stops the run on NaN/inf."""
        mean = all_reduce_sum(self.loss_sum.clone()).item() / max(self.steps, 1) / rt.world_size
        if not math.isfinite(mean):
            fix = "Lower learning_rate, raise warmup_iters or set grad_clip, then"
            if has_checkpoint(out_dir):
                raise FloatingPointError(
                    f"training loss is {mean} at step {step}: stopping without saving, so "
                    f"{os.path.join(out_dir, 'ckpt.pt')} still holds the last good state. {fix} rerun with "
                    "--init_from=resume.")
            raise FloatingPointError(
                f"training loss is {mean} at step {step}, before the run's first checkpoint: stopping; {out_dir} "
                f"holds no checkpoint to resume. {fix} start again (--init_from=scratch).")
        return mean

    def train_row(self, loss: float, step: int, grad_norm: torch.Tensor, diagnostics: dict[str, torch.Tensor],
                  cfg: TrainConfig) -> dict:
        """The metrics row of the window, its device values read in one host sync; starts the next window."""
        grad_norm_value, clipped_steps, *diagnostic_values = torch.stack(
            [grad_norm.float(), self.clipped_steps, *(value.float() for value in diagnostics.values())]).tolist()
        elapsed = time.time() - self.start_time
        row = dict(type="train", step=step, tokens=step * cfg.total_batch_size, loss=loss,
                   grad_norm=grad_norm_value, clip_rate=clipped_steps / self.steps,
                   tokens_per_s=self.steps * cfg.total_batch_size / elapsed,
                   ms_per_step=1000 * elapsed / self.steps, **clocks(), **dict(zip(diagnostics, diagnostic_values)))
        self.loss_sum.zero_()
        self.clipped_steps.zero_()
        self.steps, self.start_time = 0, time.time()
        return row


def print_sample(model: GPT, tokenizer: str, tokens: int, seed: int, device: torch.device,
                 autocast: ContextManager, log: RunLog) -> None:
    from data.tokenizer import get_encoding

    enc = get_encoding(tokenizer)
    generator = torch.Generator(device=device).manual_seed(seed)
    with autocast:
        out = model.generate(torch.tensor([[enc.eot_token]], device=device), tokens, temperature=0.8, top_k=200,
                             generator=generator)
    log.print("---- sample ----\n" + enc.decode([t for t in out[0].tolist() if t < enc.n_vocab]))


# -----------------------------------------------------------------------------
# The loop


def train(cfg: TrainConfig) -> int:
    """Train (or, eval_only, score the checkpoint); returns the exit status (StopSignal.exit_status). The
    process groups are destroyed once nothing of the run holds them (runtime.py, Teardown): DDP's reducer,
    FSDP's modules and DTensors, async saves' group; only on success."""
    rt = init_runtime(cfg.device)
    status = train_on(cfg, rt)
    gc.collect()  # (the run's objects that form reference cycles, FSDP's hooks among them, freed now)
    close_runtime()
    return status


def train_on(cfg: TrainConfig, rt: Runtime) -> int:
    """The run on this runtime: train, or score the checkpoint; returns the exit status."""
    check_parallelism(cfg, rt)
    configure_device(rt.device, cfg.deterministic)
    dtype = resolve_dtype(cfg.dtype, rt.device)
    autocast = autocast_context(rt.device, dtype)
    scaler = torch.amp.GradScaler(rt.device.type, enabled=dtype == "float16")
    log = RunLog(enabled=rt.is_main)
    data = load_data(cfg, rt)
    total_iters = cfg.total_iters()
    # eval_only scores the run's checkpoint; auto resumes one if out_dir holds one (a save that never completed
    # is none), and a checkpoint it cannot use stops the run with its error, never a silent fresh start; so does
    # hf:<source>, which else starts from the Hugging Face checkpoint (the same command continues the run)
    resume = cfg.init_from == "resume" or cfg.eval_only or (cfg.init_from not in ("scratch", "resume")
                                                           and has_checkpoint(cfg.out_dir))
    out_dir_lock = None if cfg.eval_only else claim_out_dir(cfg.out_dir, rt)  # held while this process lives
    check_out_dir(cfg.out_dir, resume, cfg.eval_only)
    torch.manual_seed(cfg.seed)
    raw_model = GPT(GPTConfig(**cfg.model_args()), cfg.fused_cross_entropy).to(rt.device)
    if hf_source(cfg.init_from) and not resume:  # (before parallelize, which may shard raw_model)
        log.print(load_hf_weights(raw_model, hf_source(cfg.init_from), cfg.tokenizer))
    model = parallelize(raw_model, cfg, rt)  # (fsdp shards raw_model in place: the optimizer comes after)
    params = list(raw_model.parameters())
    optimizer = build_optimizer(raw_model, cfg, rt.device.type)
    if resume:
        run = resume_run(cfg, rt, raw_model, optimizer, scaler, data.fingerprint, log)
    else:
        run = RunState()
        torch.manual_seed(cfg.seed + rt.rank)  # per-rank dropout streams; init above was identical
    if cfg.eval_only:
        val_loss = evaluate(raw_model, data.val_windows, data.val_ids, data.val_batches, cfg.micro_batch_size, rt,
                                autocast)
        log.print(f"checkpoint of {cfg.out_dir} at step {run.step}: val loss {val_loss:.4f}")
        return 0
    if run.step > total_iters:  # the loop stops when run.step reaches total_iters: it never would
        length = f"max_tokens={cfg.max_tokens}" if cfg.max_tokens else f"max_iters={cfg.max_iters}"
        raise ConfigError(f"the checkpoint in {cfg.out_dir} is at step {run.step}, beyond this run's {total_iters} "
                          f"steps ({length}); raise {length.split('=')[0]} to continue the run (or score the "
                          "checkpoint with --eval_only=True)")
    if resume and run.step == total_iters:  # a requeued job, a resubmitted sweep task: said, not silent
        log.print(f"the run in {cfg.out_dir} is complete: its checkpoint is at step {run.step} of {total_iters}, "
                  "so nothing is left to do (to train on, raise max_iters; for a new run, use another out_dir)")
        return 0
    if resume and isinstance(optimizer, EvaluationWeights):
        optimizer.train_weights()  # its checkpoints hold the evaluation weights
    version = code_version()
    log.open(cfg.out_dir, dict(config=cfg.to_dict(), code_version=version, world_size=rt.world_size,
                               grad_accum_steps=cfg.grad_accum_steps(rt.world_size), total_iters=total_iters,
                               torch=torch.__version__, num_params=raw_model.num_params(), argv=sys.argv),
             resume, total_iters, run.step, cfg.wandb_project if cfg.wandb_log else "", cfg.wandb_run_name)
    hellaswag_examples = []
    if cfg.hellaswag_interval:
        from eval.hellaswag import evaluate_hellaswag, load_hellaswag

        hellaswag_examples = load_hellaswag(cfg.hellaswag_file or None)[: cfg.hellaswag_examples or None]
    flops, passes_per_step = peak_flops(cfg, rt.device), cfg.hyperparameters.gradients_per_step()
    kinds = parameter_kinds(raw_model) if cfg.log_diagnostics else None
    stop = StopSignal()
    watchdog = Watchdog(cfg.step_timeout if rt.distributed else 0, rt.rank)  # a frozen rank stops the run
    window = LogWindow(rt.device)
    checkpoints = (ShardedCheckpoints if cfg.data_parallel == "fsdp" else FileCheckpoints)(
        cfg.out_dir, cfg.ckpt_keep, cfg.ckpt_keep_best, cfg.async_checkpoint)
    steps = StepContext(model, params, optimizer, scaler, data.train_batches, cfg, rt, autocast)
    start_step, ckpt_interval = run.step, cfg.ckpt_interval or cfg.eval_interval

    # `run.step` counts completed optimizer steps. The checks that need the host (NaN/inf loss,
    # logging) run every log_interval steps and before a checkpoint; stop signals, every step without
    # one (StopSignal).
    while True:
        if run.step > start_step:  # from the second step on: compiling the first can take minutes
            watchdog.beat(run.step)
        pause_start = time.time()  # evaluation and checkpoints are left out of tokens/s
        last_step, new_best = run.step == total_iters, False
        evaluate_now = run.step > start_step or not resume  # a resumed step was evaluated before it was saved
        eval_due = evaluate_now and (run.step % cfg.eval_interval == 0 or last_step)
        hellaswag_due = evaluate_now and hellaswag_examples and (run.step % cfg.hellaswag_interval == 0 or last_step)
        stop_now = last_step or stop.requested
        save_due = run.step > start_step and (run.step % ckpt_interval == 0 or stop_now)
        # (Schedule-Free evaluates and saves other weights than it trains: optim/contract.py)
        with evaluation_weights(optimizer) if eval_due or hellaswag_due or save_due else nullcontext():
            if eval_due:
                val_loss = evaluate(raw_model, data.val_windows, data.val_ids, data.val_batches, cfg.micro_batch_size, rt,
                                autocast)
                if not math.isfinite(val_loss):
                    raise FloatingPointError(f"validation loss is {val_loss} at step {run.step}; the checkpoints in "
                                             f"{cfg.out_dir} are untouched")
                new_best, run.best_val_loss = val_loss < run.best_val_loss, min(run.best_val_loss, val_loss)
                log.print(f"step {run.step}: val loss {val_loss:.4f}")
                log.write(dict(type="val", step=run.step, tokens=run.step * cfg.total_batch_size, val_loss=val_loss,
                               **clocks()))
            if hellaswag_due:
                scores = evaluate_hellaswag(raw_model, hellaswag_examples, str(rt.device), autocast,
                                            cfg.micro_batch_size, rt.rank, rt.world_size, cfg.tokenizer)
                log.print(f"step {run.step}: hellaswag acc_norm {scores['acc_norm']:.4f} ({scores['count']} examples)")
                log.write(dict(type="hellaswag", step=run.step, tokens=run.step * cfg.total_batch_size, **scores,
                               **clocks()))
            if save_due:
                window.mean_loss(rt, run.step, cfg.out_dir)  # never checkpoint a diverged run
                meta = run_meta(scaler, run, cfg.to_dict(), cfg.model_args(), gather_rng_states(rt),
                                data.fingerprint, version)
                save_start = time.time()
                with watchdog.paused():  # rank 0 may write for many minutes while the others wait
                    path = checkpoints.save(raw_model, optimizer, meta, new_best)
                paused = time.time() - save_start  # asynchronous: staging the shards in host memory
                log.print(f"step {run.step}: writing {path} (training paused {paused:.1f} s)" if cfg.async_checkpoint
                          else f"step {run.step}: saved {path} in {paused:.1f} s")
        if stop_now:
            break
        window.start_time += time.time() - pause_start

        lr = set_learning_rates(optimizer, run.step, cfg, total_iters)
        log_now = (run.step + 1) % cfg.log_interval == 0 or run.step + 1 == total_iters
        loss, grad_norm, diagnostics = steps.optimizer_step(run.step, kinds if log_now else None)
        window.add(loss, grad_norm, cfg.grad_clip)
        run.step += 1
        stop.step_done()  # every rank sees a signal at the same step, at most two after it came
        log.advance()

        if log_now:  # the only host syncs of a step
            mean_loss = window.mean_loss(rt, run.step, cfg.out_dir)
            row = window.train_row(mean_loss, run.step, grad_norm, diagnostics, cfg) | dict(lr=lr)
            if flops:
                row["mfu"] = raw_model.estimate_mfu(row["tokens_per_s"] / rt.world_size, flops, passes_per_step)
            if rt.device.type == "cuda":  # this rank's peaks over the window (the allocator's counters: no sync)
                row["peak_memory_gib"] = torch.cuda.max_memory_allocated(rt.device) / 2**30
                row["reserved_memory_gib"] = torch.cuda.max_memory_reserved(rt.device) / 2**30
                torch.cuda.reset_peak_memory_stats(rt.device)
            log.write(row)
            log.print(f"step {run.step}/{total_iters} | loss {mean_loss:.4f} | lr {lr:.2e} | grad norm "
                      f"{row['grad_norm']:.3f} | clip {row['clip_rate']:.2f} | {row['tokens_per_s']:,.0f} tok/s | "
                      f"{row['ms_per_step']:.0f} ms/step" + (f" | mfu {100 * row['mfu']:.1f}%" if flops else "")
                      + (f" | mem {row['peak_memory_gib']:.1f} GiB" if "peak_memory_gib" in row else ""))

    with watchdog.paused():
        checkpoints.finish()  # an asynchronous save still being written
    watchdog.close()
    stop.close()  # (its last count of the ranks the signal reached)
    finished = run.step == total_iters  # a signal in the last steps leaves nothing to resume: never requeued
    if stop.requested:
        signal_name = stop.received or "a signal on another rank"
        reached = f" (it reached {stop.ranks_signalled} of {rt.world_size} ranks)" if rt.world_size > 1 else ""
        log.print(f"the run finished at step {run.step}; {signal_name}{reached} came during its last steps"
                  if finished else f"stopped by {signal_name}{reached} at step {run.step}; resume with "
                  "--init_from=resume (or auto)")
    if cfg.sample_tokens and not stop.requested:  # (every rank: a sharded model's forward is collective)
        with evaluation_weights(optimizer):
            print_sample(raw_model, cfg.tokenizer, cfg.sample_tokens, cfg.seed, rt.device, autocast, log)
    status = 0 if finished else stop.exit_status
    if stop.requeue and not finished:  # (after every rank's part of the last checkpoint is complete)
        requeued = rt.is_main and requeue_slurm_job(cfg.max_requeues, log.print)
        status = 0 if broadcast_from_main(requeued) else status
    log.close()
    return status


def main(argv: list[str]) -> None:
    keep_early_stop_signals()  # (again, for a script that imported train and calls main: from here on)
    with exit_on_input_error(ShardError, FileNotFoundError, FloatingPointError, PrepareError):
        if any(arg in HELP_FLAGS for arg in argv):
            print(help_text(argv, HYPERPARAMETERS))
            sys.exit(0)
        arguments = [arg for arg in argv if arg != PRINT_CONFIG_FLAG]
        run_config = recorded_config(arguments)  # --init_from=resume --out_dir=X alone: X's own config
        cfg = load_config(arguments, HYPERPARAMETERS, run_config, hf_model_args)
        if run_config is not None and os.environ.get("RANK", "0") == "0":
            print(f"resuming {cfg.out_dir} with its own config (config.json) and the overrides on the line")
        if PRINT_CONFIG_FLAG in argv:  # the config as config.json would record it; nothing started
            print(json.dumps(cfg.to_dict(), indent=2))
            sys.exit(0)
        check_slurm_restarts(cfg.max_requeues)  # (a job SLURM itself requeues after every failure)
        check_complete(cfg.data_path())  # an interrupted data.prepare: its shards hold part of the data
        status = train(cfg)
    sys.exit(status)


if __name__ == "__main__":
    main(sys.argv[1:])
