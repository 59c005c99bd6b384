"""
Train a GPT-2 on token shards: one CPU, one GPU, or N GPUs on one or many nodes.

    python train.py config/quickstart.py                      # CPU, minutes
    python train.py config/gpt2_small_mars.py --compile=True  # one GPU
    torchrun --standalone --nproc_per_node=8 train.py config/gpt2_small_mars.py

The config file sets values of config.TrainConfig; --key=value overrides
follow it. Outputs in out_dir: config.json (resolved config, code version),
metrics.jsonl (one JSON row per log/eval step), ckpt.pt (latest checkpoint).
"""

import ctypes
import datetime
import hashlib
import json
import math
import os
import signal
import subprocess
import sys
import time
from contextlib import nullcontext

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

from config import ConfigError, TrainConfig, load_config
from data.loader import TokenWindows, TrainBatches, to_device, validation_window_ids
from data.shards import ShardError, atomic_write
from eval.scoring import autocast_context
from model import GPT, GPTConfig
from optim import build_optimizer

# Settings that decide the shape of the optimizer or grad-scaler state: a resume cannot change them.
STATE_SHAPING_KEYS = ("optimizer", "mars_type", "is_approx", "optimize_1d", "amsgrad", "muon_embeddings_on_adamw",
                      "dtype")
PEAK_BF16_FLOPS = {"A100": 312e12, "H100": 989e12, "H200": 989e12}  # dense bf16, by device name


# -----------------------------------------------------------------------------
# Set-up helpers


def code_version() -> str:
    """The git commit of this code, with '-dirty' when it has uncommitted changes."""
    here = os.path.dirname(os.path.abspath(__file__))
    try:
        rev = subprocess.run(["git", "rev-parse", "HEAD"], cwd=here, capture_output=True, text=True, check=True)
        dirty = subprocess.run(["git", "status", "--porcelain"], cwd=here, capture_output=True, text=True)
        return rev.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def keep_freed_memory_for_reuse() -> None:
    """CPU training: glibc hands every large freed tensor back to the OS and page-faults it in
    again at the next step, which measured 40% of a quickstart step here. Larger mmap and trim
    thresholds keep that memory in the heap for reuse (glibc only; elsewhere nothing changes)."""
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        return
    M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
    libc.mallopt(M_MMAP_THRESHOLD, 1 << 30)
    libc.mallopt(M_TRIM_THRESHOLD, (1 << 31) - 1)


def lr_multiplier(step: int, cfg: TrainConfig, total_iters: int) -> float:
    """The schedule as a factor on every param group's base lr (min_lr is the main group's).
    Warmup is linear from 0 (step / warmup_iters), as in nanoGPT and the official MARS code."""
    if step < cfg.warmup_iters:
        return step / cfg.warmup_iters
    min_ratio = cfg.min_lr / cfg.learning_rate
    if cfg.lr_schedule == "constant":
        return 1.0
    if cfg.lr_schedule == "wsd":
        decay_start = int(total_iters * (1 - cfg.wsd_decay_frac))
        if step < decay_start:
            return 1.0
        return 1.0 - (1.0 - min_ratio) * (step - decay_start) / max(total_iters - decay_start, 1)
    decay_iters = cfg.lr_decay_iters or total_iters  # cosine
    if step >= decay_iters:
        return min_ratio
    progress = (step - cfg.warmup_iters) / max(decay_iters - cfg.warmup_iters, 1)
    return min_ratio + 0.5 * (1.0 + math.cos(math.pi * progress)) * (1.0 - min_ratio)


class StopSignal:
    """Turns SIGTERM/SIGINT (preemption, Ctrl-C) into a flag the loop checks; a second Ctrl-C kills."""

    def __init__(self) -> None:
        self.received: str | None = None
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self._handle)

    def _handle(self, signum: int, frame) -> None:
        self.received = signal.Signals(signum).name
        signal.signal(signal.SIGINT, signal.SIG_DFL)


def save_checkpoint(path: str, state: dict) -> None:
    """Write to a temporary file and atomically rename, so a crash mid-write
    leaves the previous checkpoint intact."""
    with atomic_write(path) as f:
        torch.save(state, f)


# -----------------------------------------------------------------------------


def train(cfg: TrainConfig) -> None:
    # ---- distributed set-up: torchrun sets RANK/LOCAL_RANK/WORLD_SIZE
    distributed = "RANK" in os.environ
    use_cuda = cfg.device.startswith("cuda") or (cfg.device == "auto" and torch.cuda.is_available())
    if distributed:
        rank, local_rank, world_size = (int(os.environ[k]) for k in ("RANK", "LOCAL_RANK", "WORLD_SIZE"))
        device = torch.device(f"cuda:{local_rank}" if use_cuda else "cpu")
        if use_cuda:
            torch.cuda.set_device(device)
        # Generous timeout: the other ranks wait in a collective while rank 0 writes a checkpoint
        # (tens of GB for XL with MARS) to a possibly slow shared filesystem.
        dist.init_process_group(backend="nccl" if use_cuda else "gloo", device_id=device if use_cuda else None,
                                timeout=datetime.timedelta(minutes=60))
    else:
        rank, local_rank, world_size = 0, 0, 1
        device = torch.device((cfg.device if cfg.device != "auto" else "cuda") if use_cuda else "cpu")
    is_main = rank == 0
    log = print if is_main else (lambda *a, **k: None)
    grad_accum = cfg.grad_accum_steps(world_size)
    total_iters = cfg.total_iters()
    sequences_per_step = cfg.total_batch_size // cfg.block_size

    # ---- precision: bf16 autocast on CUDA by default, fp16 with a GradScaler as an option
    dtype_name = cfg.dtype if cfg.dtype != "auto" else ("bfloat16" if device.type == "cuda" else "float32")
    dtype = getattr(torch, dtype_name)
    autocast = autocast_context(device.type, dtype_name)
    scaler = torch.amp.GradScaler(device.type, enabled=dtype == torch.float16)
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    else:
        keep_freed_memory_for_reuse()

    # ---- data
    data_dir = cfg.data_dir or os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", cfg.dataset)
    train_windows = TokenWindows(data_dir, "train", cfg.block_size)
    val_windows = TokenWindows(data_dir, "val", cfg.block_size)
    train_batches = TrainBatches(train_windows, cfg.seed, sequences_per_step)
    val_ids = validation_window_ids(val_windows, cfg.eval_sequences)[rank::world_size]

    # ---- model, optimizer, and the checkpoint to resume from
    ckpt_path = os.path.join(cfg.out_dir, "ckpt.pt")
    resume = cfg.init_from == "resume" or cfg.eval_only  # eval_only scores the run's checkpoint
    if resume and not os.path.exists(ckpt_path):
        raise ConfigError(f"{'eval_only' if cfg.eval_only else 'init_from=resume'} needs a checkpoint, and there is "
                          f"none at {ckpt_path}; point out_dir at a run (or start one with --init_from=scratch)")
    if not resume and os.path.exists(ckpt_path):
        raise ConfigError(f"{ckpt_path} already exists: resume it with --init_from=resume, or choose "
                          "another out_dir (a new run would overwrite it)")
    torch.manual_seed(cfg.seed)
    model_args = cfg.model_args()
    model = GPT(GPTConfig(**model_args)).to(device)
    optimizer = build_optimizer(model, cfg, device.type)
    step, best_val_loss = 0, float("inf")
    if resume:
        ckpt = torch.load(ckpt_path, map_location=device, weights_only=True)
        if ckpt["model_args"] != model_args:
            raise ConfigError(f"the model in {ckpt_path} ({ckpt['model_args']}) differs from the config's "
                              f"({model_args}); resume with the run's own model settings")
        if [list(x) for x in ckpt["data_fingerprint"]] != [list(x) for x in train_windows.fingerprint()]:
            raise ConfigError(f"the training shards in {data_dir} differ from those {ckpt_path} was trained on; "
                              "resuming on other data would not continue the run")
        new_values = cfg.to_dict()
        changed = {k: (v, new_values.get(k)) for k, v in ckpt["config"].items()
                   if k not in ("init_from", "eval_only") and new_values.get(k) != v}
        state_shaping = {k: changed[k] for k in STATE_SHAPING_KEYS if k in changed}
        if state_shaping:
            raise ConfigError(f"{ckpt_path} was trained with other optimizer or precision settings "
                              f"(old, new): {state_shaping}; its state cannot continue under the new ones")
        log(f"resuming {ckpt_path} at step {ckpt['step']}" + (f"; config changes (old, new): {changed}" if changed else ""))
        model.load_state_dict(ckpt["model"])
        # The moments come from the checkpoint, the hyperparameters from the config (as printed above).
        hyperparameters = [{k: v for k, v in g.items() if k != "params"} for g in optimizer.param_groups]
        optimizer.load_state_dict(ckpt["optimizer"])
        for group, fresh in zip(optimizer.param_groups, hyperparameters):
            group.update(fresh)
        scaler.load_state_dict(ckpt["scaler"])
        step, best_val_loss = ckpt["step"], ckpt["best_val_loss"]
        rng_states = ckpt["rng"]
        if len(rng_states) == world_size:
            torch.set_rng_state(rng_states[rank]["cpu"])
            if device.type == "cuda" and rng_states[rank]["cuda"] is not None:
                torch.cuda.set_rng_state(rng_states[rank]["cuda"], device)
        else:  # another world size: the data is the same, dropout masks cannot be
            torch.manual_seed(cfg.seed + 7919 * step + rank)
        del ckpt
    else:
        torch.manual_seed(cfg.seed + rank)  # per-rank dropout streams; init above was identical
    raw_model = model
    if cfg.compile:
        model = torch.compile(model)
    if distributed:
        model = DDP(model, device_ids=[local_rank] if device.type == "cuda" else None)
    needs_next_batch_grad = getattr(optimizer, "needs_grad_on_next_batch", False)  # MARS-exact

    # ---- outputs: resolved config, metrics, wandb
    run_info = dict(config=cfg.to_dict(), code_version=code_version(), world_size=world_size,
                    grad_accum_steps=grad_accum, total_iters=total_iters, torch=torch.__version__,
                    num_params=raw_model.num_params(), argv=sys.argv)
    if is_main and not cfg.eval_only:
        os.makedirs(cfg.out_dir, exist_ok=True)
        with open(os.path.join(cfg.out_dir, "config.json"), "w") as f:
            json.dump(run_info, f, indent=2)
        log(json.dumps(run_info["config"], indent=1))
        log(f"{raw_model.num_params() / 1e6:.2f}M parameters | world size {world_size} | grad accumulation "
            f"{grad_accum} | {cfg.total_batch_size} tokens per step | {total_iters} steps | {device} {dtype_name}")
        metrics_file = open(os.path.join(cfg.out_dir, "metrics.jsonl"), "a" if resume else "w")
        if cfg.wandb_log:
            import wandb

            # One W&B run per out_dir, so a resumed run continues its curves.
            run_id = hashlib.sha1(os.path.abspath(cfg.out_dir).encode()).hexdigest()[:16]
            wandb.init(project=cfg.wandb_project, name=cfg.wandb_run_name or None, config=run_info,
                       id=run_id, resume="allow")
    peak_flops = cfg.peak_flops or next(
        (v for k, v in PEAK_BF16_FLOPS.items() if device.type == "cuda" and k in torch.cuda.get_device_name(device)),
        0.0,
    )

    def write_metrics(row: dict) -> None:
        if is_main:
            metrics_file.write(json.dumps(row) + "\n")
            metrics_file.flush()
            if cfg.wandb_log:
                wandb.log(row, step=row["step"])

    def all_reduce_sum(t: torch.Tensor) -> torch.Tensor:
        if distributed:
            dist.all_reduce(t)
        return t

    @torch.no_grad()
    def evaluate() -> float:
        """Mean loss over the fixed validation windows (each rank scores its share)."""
        raw_model.eval()
        loss_sum = torch.zeros((), device=device)
        for i in range(0, len(val_ids), cfg.micro_batch_size):
            x, y = val_windows.gather(val_ids[i : i + cfg.micro_batch_size])
            with autocast:
                _, loss = raw_model(to_device(x, device), to_device(y, device))
            loss_sum += loss * len(x)
        raw_model.train()
        totals = all_reduce_sum(torch.stack([loss_sum, torch.tensor(float(len(val_ids)), device=device)]))
        return (totals[0] / totals[1]).item()

    hellaswag_examples = []
    if cfg.hellaswag_interval:
        from eval.hellaswag import evaluate_hellaswag, load_hellaswag

        hellaswag_examples = load_hellaswag(cfg.hellaswag_file or None)[: cfg.hellaswag_examples or None]

    def forward_backward(batch_step: int) -> torch.Tensor:
        """Gradients of the global batch of batch_step in p.grad; returns the mean loss (on device).
        DDP all-reduces gradients only on the last micro-step."""
        loss_total = torch.zeros((), device=device)
        for micro_step in range(grad_accum):
            x, y = train_batches.micro_batch(batch_step, micro_step, cfg.micro_batch_size, rank, world_size)
            last_micro_step = micro_step == grad_accum - 1
            with model.no_sync() if distributed and not last_micro_step else nullcontext():
                with autocast:
                    _, loss = model(to_device(x, device), to_device(y, device))
                    loss = loss / grad_accum
                scaler.scale(loss).backward()
            loss_total += loss.detach()
        return loss_total

    def clip_gradients() -> torch.Tensor:
        """Global gradient norm (before clipping), clipping to grad_clip when it is set."""
        scaler.unscale_(optimizer)
        params = [p for p in raw_model.parameters() if p.grad is not None]
        norm = torch.nn.utils.get_total_norm([p.grad for p in params], foreach=True)
        if cfg.grad_clip > 0:
            torch.nn.utils.clip_grads_with_norm_(params, cfg.grad_clip, norm, foreach=True)
        return norm

    def checkpoint_state() -> dict:
        rng = dict(cpu=torch.get_rng_state(), cuda=torch.cuda.get_rng_state(device) if device.type == "cuda" else None)
        rng_all = [rng]
        if distributed:
            rng_all = [None] * world_size
            dist.all_gather_object(rng_all, rng)
        return dict(model=raw_model.state_dict(), optimizer=optimizer.state_dict(), scaler=scaler.state_dict(),
                    step=step, tokens_seen=step * cfg.total_batch_size, best_val_loss=best_val_loss,
                    config=cfg.to_dict(), model_args=model_args, rng=rng_all,
                    loader=dict(seed=cfg.seed, next_step=step), data_fingerprint=train_windows.fingerprint(),
                    code_version=run_info["code_version"])

    if cfg.eval_only:
        log(f"{ckpt_path} at step {step}: val loss {evaluate():.4f}")
        if distributed:
            dist.destroy_process_group()
        return

    # ---- the loop. `step` counts completed optimizer steps; the checks that need the host
    # (NaN/inf loss, stop signals, logging) run every log_interval steps and before a checkpoint.
    stop = StopSignal()
    ckpt_interval = cfg.ckpt_interval or cfg.eval_interval
    loss_sum = torch.zeros((), device=device)  # sum of step losses since the last log
    clipped_steps = torch.zeros((), device=device)
    steps_since_log, last_log_time, start_step = 0, time.time(), step
    stop_requested = False  # stop.received, made the same on every rank at log steps
    progress = None
    if is_main and sys.stderr.isatty():
        from tqdm import tqdm

        progress = tqdm(total=total_iters, initial=step, unit="step", dynamic_ncols=True)

    def synced_window_loss() -> float:
        """Mean training loss over the steps since the last log, over all ranks; stops on NaN/inf."""
        mean = all_reduce_sum(loss_sum.clone()).item() / max(steps_since_log, 1) / world_size
        if not math.isfinite(mean):
            raise FloatingPointError(
                f"training loss is {mean} at step {step}: stopping without saving, so {ckpt_path} still holds "
                "the last good state. Lower learning_rate, raise warmup_iters or set grad_clip, then rerun "
                "with --init_from=resume."
            )
        return mean

    while True:
        last_step = step == total_iters
        pause_start = time.time()  # evaluation and checkpoints are left out of tokens/s
        evaluate_now = not (resume and step == start_step)  # a resumed step was evaluated before it was saved
        if evaluate_now and (step % cfg.eval_interval == 0 or last_step):
            val_loss = evaluate()
            if not math.isfinite(val_loss):
                raise FloatingPointError(f"validation loss is {val_loss} at step {step}; {ckpt_path} is untouched")
            best_val_loss = min(best_val_loss, val_loss)
            log(f"step {step}: val loss {val_loss:.4f}")
            write_metrics(dict(type="val", step=step, tokens=step * cfg.total_batch_size, val_loss=val_loss,
                               time=time.time()))
        if evaluate_now and hellaswag_examples and (step % cfg.hellaswag_interval == 0 or last_step):
            scores = evaluate_hellaswag(raw_model, hellaswag_examples, str(device), autocast,
                                        cfg.micro_batch_size, rank, world_size)
            log(f"step {step}: hellaswag acc_norm {scores['acc_norm']:.4f} ({scores['count']} examples)")
            write_metrics(dict(type="hellaswag", step=step, tokens=step * cfg.total_batch_size, **scores,
                               time=time.time()))
        stop_now = last_step or stop_requested
        if step > start_step and (step % ckpt_interval == 0 or stop_now):
            synced_window_loss()  # never checkpoint a diverged run
            state = checkpoint_state()
            if is_main:
                save_checkpoint(ckpt_path, state)
                log(f"step {step}: saved {ckpt_path}")
            del state
        if stop_now:
            if stop_requested:
                log(f"stopped by {stop.received or 'a signal on another rank'} at step {step}; "
                    "resume with --init_from=resume")
            break
        last_log_time += time.time() - pause_start

        # ---- one optimizer step
        multiplier = lr_multiplier(step, cfg, total_iters)
        for group in optimizer.param_groups:
            group["lr"] = group["base_lr"] * multiplier
        if needs_next_batch_grad:  # MARS-exact: the gradient at these weights on the next step's batch
            forward_backward(step + 1)
            clip_gradients()
            optimizer.stash_grad_for_next_step()
            optimizer.zero_grad(set_to_none=True)
            scaler.update()
        loss_sum += forward_backward(step)
        grad_norm = clip_gradients()
        if cfg.grad_clip > 0:
            clipped_steps += (grad_norm > cfg.grad_clip).float()
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad(set_to_none=True)
        step += 1
        steps_since_log += 1
        if progress is not None:
            progress.update(1)

        # ---- host-side checks and logging, every log_interval steps only
        if step % cfg.log_interval == 0 or step == total_iters:
            loss = synced_window_loss()
            # every rank must leave the loop at the same step
            stop_flag = torch.tensor(float(stop.received is not None), device=device)
            if distributed:
                dist.all_reduce(stop_flag, op=dist.ReduceOp.MAX)
            stop_requested = bool(stop_flag.item())
            elapsed = time.time() - last_log_time
            tokens_per_s = steps_since_log * cfg.total_batch_size / elapsed
            row = dict(type="train", step=step, tokens=step * cfg.total_batch_size, loss=loss,
                       lr=cfg.learning_rate * multiplier, grad_norm=grad_norm.item(),
                       clip_rate=clipped_steps.item() / steps_since_log, tokens_per_s=tokens_per_s,
                       ms_per_step=1000 * elapsed / steps_since_log, time=time.time())
            if peak_flops:
                row["mfu"] = raw_model.estimate_mfu(tokens_per_s / world_size, peak_flops)
            write_metrics(row)
            line = (f"step {step}/{total_iters} | loss {loss:.4f} | lr {row['lr']:.2e} | grad norm "
                    f"{row['grad_norm']:.3f} | clip {row['clip_rate']:.2f} | {tokens_per_s:,.0f} tok/s | "
                    f"{row['ms_per_step']:.0f} ms/step" + (f" | mfu {100 * row['mfu']:.1f}%" if peak_flops else ""))
            (progress.write if progress is not None else log)(line)
            loss_sum.zero_()
            clipped_steps.zero_()
            steps_since_log, last_log_time = 0, time.time()

    if progress is not None:
        progress.close()
    if is_main and cfg.sample_tokens and not stop_requested:
        from data.tokenizer import EOT_TOKEN, get_encoding

        enc = get_encoding()
        prompt = torch.tensor([[EOT_TOKEN]], device=device)
        generator = torch.Generator(device=device).manual_seed(cfg.seed)
        with autocast:
            out = raw_model.generate(prompt, cfg.sample_tokens, temperature=0.8, top_k=200, generator=generator)
        log("---- sample ----\n" + enc.decode([t for t in out[0].tolist() if t < enc.n_vocab]))
    if is_main:
        metrics_file.close()
        if cfg.wandb_log:
            wandb.finish()
    if distributed:
        dist.destroy_process_group()


def main(argv: list[str]) -> None:
    try:
        cfg = load_config(argv)
    except ConfigError as e:
        sys.exit(f"config error: {e}")
    try:
        train(cfg)
    except (ConfigError, ShardError, FileNotFoundError, FloatingPointError) as e:
        sys.exit(f"error: {e}")


if __name__ == "__main__":
    main(sys.argv[1:])
