"""
The training configuration: one typed schema with every setting and its default.

A config file in config/ is plain Python that only assigns values (what it imports
to compute them, such as `from math import pi`, is not a setting), e.g.

    n_layer = 12
    learning_rate = 6e-4

A file may build on others: `include = ["gpt2_small.py", "paper_mars.py"]` applies
those files (paths relative to it, in order) before its own assignments; the paper
configs are composed so, a model size and an optimizer recipe.

`python train.py config/x.py --key=value ...` applies the file, then the
overrides: arguments apply in order, and an override that a later config file
would set again is refused (put overrides last). Unknown keys, values of the wrong type and keys the chosen optimizer
does not read stop the run before any work, naming the key and the fix.
"""

import ast
import dataclasses
import difflib
import inspect
import json
import math
import os
import re
import types
import typing
from dataclasses import dataclass

from config.cells import CELLS
from config.models import COMPONENTS, PARAMETRIZATIONS, PRESETS, GPTConfig
from errors import ConfigError

TOKENIZERS = ("gpt2", "bytes")  # the token shards' (data/tokenizer.py)
HF_PREFIX = "hf:"  # --init_from=hf:<folder or hub name>: a Hugging Face checkpoint (huggingface.py)
SHAPE_KEYS = ("n_layer", "n_head", "n_embd")  # a config's values override the preset's; 0 keeps the preset's
GPT2_ONLY = ("bias", "scale_attn_by_inverse_layer_idx")  # a Llama has neither (model_args)


@dataclass
class TrainConfig:
    # ---- output and run identity
    out_dir: str = "out"  # checkpoints, config.json and metrics.jsonl go here
    seed: int = 1337  # fixes init, data order and dropout (the validation windows are fixed for every seed)
    init_from: str = "scratch"  # 'scratch', 'resume', 'auto' (resume if out_dir has a checkpoint, else start) or 'hf:<folder or hub name>'
    # 'resume': out_dir's newest good checkpoint; 'auto': for a job that may be requeued (the same command both
    # times); 'hf:<folder or hub name>': as auto, but starting from a Hugging Face GPT-2 or Llama checkpoint, whose
    # config.json decides the model (huggingface.py; docs/models.md)

    # ---- data: token shards in data_dir (default data/<dataset>/), *_train_*.bin and *_val_*.bin
    dataset: str = "openwebtext"
    data_dir: str = ""
    tokenizer: str = "gpt2"  # the shards' tokenizer (data/tokenizer.py): gpt2 | bytes; for samples and HellaSwag

    # ---- model: the fields of GPTConfig (config/models.py: defaults from there); `model` names one of its PRESETS (its
    # architecture, GPT-2 or Llama, and its shape), and n_layer/n_head/n_embd override it. bias and
    # scale_attn_by_inverse_layer_idx are GPT-2's: a Llama has neither (a config file's are dropped; an override
    # asking for either is refused)
    model: str = "small"
    n_layer: int = 0  # 0: from the preset
    n_head: int = 0
    n_embd: int = 0
    block_size: int = GPTConfig.block_size
    vocab_size: int = GPTConfig.vocab_size
    dropout: float = GPTConfig.dropout
    bias: bool = GPTConfig.bias
    scale_attn_by_inverse_layer_idx: bool = GPTConfig.scale_attn_by_inverse_layer_idx
    # sp | mup: the maximal-update parametrization (initialisation, attention's 1/d, the output multiplier, the
    # hidden matrices' learning rates and weight decay by the optimizer's rule; docs/scaling.md), relative to
    # mup_base_width, the width the hyperparameters were tuned at (where mup equals sp)
    parametrization: str = GPTConfig.parametrization
    mup_base_width: int = GPTConfig.mup_base_width
    # one component of the other architecture swapped in ("": the architecture's own): positions learned | rope,
    # norm layernorm | rmsnorm, mlp gelu | swiglu (the GPT-2 against Llama study, docs/scaling.md)
    positions: str = GPTConfig.positions
    norm: str = GPTConfig.norm
    mlp: str = GPTConfig.mlp

    # ---- batch: the GLOBAL batch in tokens; gradient accumulation is derived
    # as total_batch_size / (micro_batch_size * block_size * world_size).
    total_batch_size: int = 480 * 1024
    micro_batch_size: int = 16  # sequences per device per micro-step
    # The gradient that clipping and the optimizer see is grad_multiplier x the mean gradient of the
    # global batch (in both passes of MARS-exact). The official MARS scripts never divide the loss by
    # their per-GPU accumulation count, so their gradient is that count x the mean: 4 for small and
    # medium, 12 for large and xl, which the paper configs set here, whatever the GPU count.
    grad_multiplier: float = 1.0

    # ---- run length: max_tokens, when set, wins (max_iters = ceil(max_tokens / total_batch_size))
    max_iters: int = 100_000
    max_tokens: int = 0

    # ---- optimizer: a name in the registry optim.OPTIMIZERS. Its settings (weight decay, betas, ...) are
    # declared by the optimizer itself (its Hyperparameters in optim/); a config sets them as keys like
    # these, and a key the chosen optimizer does not read is an error.
    optimizer: str = "adamw"
    learning_rate: float = 6e-4  # peak lr of the main (2-D) parameter group
    grad_clip: float = 1.0  # global-norm clipping; 0 disables
    # the optimizer's settings (load_config fills it from the keys above and the optimizer's own): not a key
    hyperparameters: typing.Any = dataclasses.field(default=None, metadata={"settable": False})
    # how model_args() reads the model of init_from='hf:...' (huggingface.hf_model_args, which load_config's caller
    # hands in: the config sits below the model and its Hugging Face mapping, and imports neither): not a key
    read_checkpoint_model: typing.Any = dataclasses.field(default=None, metadata={"settable": False}, repr=False,
                                                          compare=False)

    # ---- learning-rate schedule: cosine | constant | wsd (warmup-stable-decay) | onecycle (optim/schedule.py)
    lr_schedule: str = "cosine"
    warmup_iters: int = 2000
    lr_decay_iters: int = 0  # cosine: decays until here (0: max_iters)
    min_lr: float = 6e-5  # absolute lr of the main group at the end of decay
    # Where the other param groups (lr_1d, ...) end: "scaled", at base_lr * min_lr / learning_rate
    # (every group follows the main one; the official AdamW and MARS scripts); "absolute", at
    # min_lr itself (the official train_muon.py since commit 0052466).
    min_lr_groups: str = "scaled"
    wsd_decay_frac: float = 0.2  # wsd: fraction of the run spent decaying linearly to min_lr
    # How each group's decoupled weight decay follows the schedule: "constant" (weight_decay as set, so the decay of
    # a step is lr x weight_decay: AdamW's) or "lr" (schedule-coupled, AdamC / Muon-C: Defazio, arXiv 2506.02285;
    # weight_decay x lr / the group's peak lr, so a step decays lr^2 / peak x weight_decay), for every group that
    # decays, of any optimizer whose groups carry weight_decay (torch's and external ones too)
    weight_decay_schedule: str = "constant"

    # ---- weight averaging: the weights evaluated and saved are an average of those the optimizer visits, for any
    # optimizer (optim/averaging.py; training goes on from the weights themselves): "" none | ema | uniform (from
    # averaging_start on), one point every averaging_interval steps; a resume keeps the run's choice
    weight_averaging: str = ""
    ema_decay: float = 0.95  # ema: average <- average + (1 - ema_decay) (weights - average) (epfml's default)
    averaging_interval: int = 10  # a point every this many steps (epfml's ewa_interval)
    averaging_start: int = 0  # the step of the first point (ema: its start, e.g. warmup_iters; uniform: the tail's)

    # ---- evaluation, logging, checkpoints
    eval_interval: int = 1000
    eval_sequences: int = 200  # fixed validation windows (the same every eval and every run)
    eval_only: bool = False
    log_interval: int = 10  # also the cadence of NaN and stop-signal checks
    # On log steps: update and weight RMS per parameter kind, and MARS's variance-reduction statistics
    # (optim/diagnostics.py); costs a copy of the weights on those steps only.
    log_diagnostics: bool = True
    ckpt_interval: int = 0  # save a checkpoint every this many steps (0: at each eval)
    ckpt_keep: int = 2  # keep the newest this many checkpoints (resume falls back to an older one if needed)
    ckpt_keep_best: bool = False  # also keep the best-validation checkpoint (ckpt_best.pt)
    sample_tokens: int = 0  # at the end, print a sample of this many tokens
    hellaswag_interval: int = 0  # zero-shot HellaSwag acc_norm every this many steps (0: never)
    hellaswag_file: str = ""  # local HellaSwag validation jsonl ("": download from the hub)
    hellaswag_examples: int = 0  # score only the first this many examples (0: all 10042)
    wandb_log: bool = False
    wandb_project: str = "mars-gpt2"
    wandb_run_name: str = ""

    # ---- system
    device: str = "auto"  # auto | cpu | cuda | cuda:N
    dtype: str = "auto"  # auto (bf16 on CUDA, fp32 on CPU) | bfloat16 | float16 | float32
    compile: bool = False
    # The training loss computed in chunks, gradients made in the forward pass, the (tokens x vocabulary) logits
    # never whole (model.LinearCrossEntropy): less memory; its speed is not yet measured compiled on a GPU.
    fused_cross_entropy: bool = False
    # torch.compile's mode for the model (or each block under fsdp): default | max-autotune-no-cudagraphs (inductor
    # tunes its own matrix kernels, fusing their epilogues; minutes more to compile) | max-autotune | reduce-overhead
    # (CUDA graphs). bench.gpu --compile-mode measures them.
    compile_mode: str = "default"
    # Deterministic kernels (torch.use_deterministic_algorithms; cuBLAS workspace and inductor set to
    # match): on CUDA, bit-exact resumes and repeatable runs, at some speed; CPU runs are deterministic anyway.
    deterministic: bool = False
    peak_flops: float = 0.0  # for MFU; 0: guessed from the GPU's name
    ddp_bucket_mb: float = 0.0  # DDP gradient bucket size in MB (0: one transformer block's gradients)
    # ddp: every rank holds the whole model and optimizer state; fsdp: each transformer block and the rest
    # of the model sharded across ranks with FSDP2 (parallel.py), checkpoints written per rank through DCP
    data_parallel: str = "ddp"
    activation_checkpointing: bool = False  # recompute each block's activations in the backward pass
    async_checkpoint: bool = False  # fsdp: write the checkpoint's shards while training goes on (dcp.async_save)
    # Seconds a step of a distributed run may take before the run stops with an error naming it: a frozen
    # or dead rank makes the others wait (runtime.Watchdog). Checkpoint writes keep 60 minutes. 0: no limit.
    step_timeout: float = 600.0
    # Under SLURM, the requeue signal (SIGUSR1: sbatch --signal=USR1@<seconds> before the time limit, or
    # scancel --signal=USR1 on preemption) saves, requeues the job and exits 0; a job requeued this many
    # times (SLURM_RESTART_COUNT) saves and stops instead, named (a run that cannot progress never loops).
    max_requeues: int = 20

    def __post_init__(self) -> None:
        check_types(self)
        _check_values(self)

    def model_args(self) -> dict[str, typing.Any]:
        """GPTConfig arguments: GPTConfig's defaults, the preset's (its architecture and shape), the config's own
        model keys, and any explicit n_layer/n_head/n_embd (0: the preset's). Starting from a Hugging Face
        checkpoint (init_from='hf:...'), its config.json's architecture and shape instead (read_checkpoint_model)."""
        if hf_source(self.init_from):
            if self.read_checkpoint_model is None:
                raise ConfigError(f"init_from={self.init_from}: the config was read without the Hugging Face mapping "
                                  "that reads the checkpoint's model; read it with optim.load_config")
            return self.read_checkpoint_model(self)
        args = {f.name: f.default for f in dataclasses.fields(GPTConfig)} | PRESETS[self.model]
        args |= {key: getattr(self, key) for key in args if hasattr(self, key) and key not in SHAPE_KEYS}
        args |= {key: getattr(self, key) for key in SHAPE_KEYS if getattr(self, key)}
        if args["architecture"] == "llama":  # GPT-2's settings: a Llama has no biases and its attention's usual scale
            args |= dict.fromkeys(GPT2_ONLY, False)
        return args

    def data_path(self) -> str:
        """The token shards' folder: data_dir, else data/<dataset>/ in the repository."""
        return self.data_dir or os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data",
                                             self.dataset)

    def grad_accum_steps(self, world_size: int) -> int:
        per_micro_step = self.micro_batch_size * self.block_size * world_size
        if self.total_batch_size % per_micro_step:
            raise ConfigError(
                f"total_batch_size={self.total_batch_size} tokens is not a multiple of micro_batch_size * "
                f"block_size * world_size = {self.micro_batch_size} * {self.block_size} * {world_size} = "
                f"{per_micro_step}; change total_batch_size or micro_batch_size"
            )
        return self.total_batch_size // per_micro_step

    def total_iters(self) -> int:
        if self.max_tokens:
            return math.ceil(self.max_tokens / self.total_batch_size)
        return self.max_iters

    def to_dict(self) -> dict[str, typing.Any]:
        """Every setting, the loop's and the optimizer's, in one flat dict (as config files write them)."""
        loop = {key: getattr(self, key) for key in settable_keys(TrainConfig)}
        # the model as built: a Llama has no biases whatever bias says (model_args), so it records bias=False
        loop |= {key: value for key, value in self.model_args().items() if key in loop and key not in SHAPE_KEYS}
        return loop | (self.hyperparameters.to_dict() if self.hyperparameters is not None else {})


def hf_source(init_from: str) -> str | None:
    """The folder or hub name of --init_from=hf:<source>; None for another init_from."""
    return init_from[len(HF_PREFIX):] if init_from.startswith(HF_PREFIX) else None


def settable_keys(schema: type) -> list[str]:
    """A settings dataclass's keys that a config file or an override may set (TrainConfig.hyperparameters is
    filled by load_config, not set)."""
    return [f.name for f in dataclasses.fields(schema) if f.metadata.get("settable", True)]


CHOICES = {  # the allowed values of the loop's keys that name a choice
    "init_from": ("scratch", "resume", "auto"),
    "tokenizer": TOKENIZERS,
    "model": tuple(PRESETS),
    "lr_schedule": ("cosine", "constant", "wsd", "onecycle"),
    "weight_decay_schedule": ("constant", "lr"),
    "weight_averaging": ("", "ema", "uniform"),
    "min_lr_groups": ("scaled", "absolute"),
    "dtype": ("auto", "bfloat16", "float16", "float32"),
    "data_parallel": ("ddp", "fsdp"),
    "parametrization": PARAMETRIZATIONS,
    **COMPONENTS,
    "compile_mode": ("default", "max-autotune-no-cudagraphs", "max-autotune", "reduce-overhead"),
}


def check_types(settings: typing.Any) -> None:
    """Check each field of a settings dataclass (TrainConfig, an optimizer's Hyperparameters) against
    its type hint; an int where a float is expected becomes a float."""
    hints = typing.get_type_hints(type(settings))
    for f in dataclasses.fields(settings):
        value, expected = getattr(settings, f.name), hints[f.name]
        if expected is typing.Any:
            continue
        ok = isinstance(value, expected) and not (expected is not bool and isinstance(value, bool))
        if expected is float and isinstance(value, int) and not isinstance(value, bool):
            ok = True  # an int where a float is expected is fine (lr = 1 means 1.0)
        if not ok:
            hint = (f"; write {value.strip().capitalize()} (Python's spelling)"
                    if expected is bool and isinstance(value, str) and value.strip().lower() in ("true", "false") else "")
            raise ConfigError(
                f"config key '{f.name}' must be {expected.__name__}, got {value!r} ({type(value).__name__}){hint}"
            )
        if expected is float and isinstance(value, int):
            setattr(settings, f.name, float(value))


def _check_values(cfg: TrainConfig) -> None:
    for key, allowed in CHOICES.items():
        if key == "init_from" and hf_source(cfg.init_from):
            continue  # (the checkpoint is read, and checked, by model_args below)
        if getattr(cfg, key) not in allowed:
            hint = " or hf:<a Hugging Face model folder or hub name>" if key == "init_from" else ""
            raise ConfigError(f"config key '{key}' is {getattr(cfg, key)!r}; choose one of {', '.join(allowed)}{hint}")
    if not (cfg.device in ("auto", "cpu", "cuda") or cfg.device.startswith("cuda:")):
        raise ConfigError(f"config key 'device' is {cfg.device!r}; use auto, cpu, cuda or cuda:N")
    for key in ("total_batch_size", "micro_batch_size", "block_size", "eval_interval", "log_interval",
                "eval_sequences", "vocab_size", "ckpt_keep", "learning_rate", "grad_multiplier"):
        if not getattr(cfg, key) > 0:
            raise ConfigError(f"config key '{key}' must be positive, got {getattr(cfg, key)}")
    for key in ("warmup_iters", "lr_decay_iters", "ckpt_interval", "hellaswag_interval", "hellaswag_examples",
                "max_tokens", "sample_tokens", "n_layer", "n_head", "n_embd", "min_lr", "grad_clip", "peak_flops",
                "ddp_bucket_mb", "step_timeout", "max_requeues", "averaging_start"):
        if not getattr(cfg, key) >= 0:
            raise ConfigError(f"config key '{key}' must not be negative, got {getattr(cfg, key)}")
    if 0 < cfg.ddp_bucket_mb < 1:  # torch's first DDP bucket is 1 MB; compiled DDP refuses a cap below it
        raise ConfigError(f"config key 'ddp_bucket_mb' is {cfg.ddp_bucket_mb}; compiled DDP needs at least 1 (MB, "
                          "the size of its first bucket): set 1 or more, or 0 for one transformer block's gradients")
    if not 0.0 <= cfg.dropout < 1.0:
        raise ConfigError(f"config key 'dropout' must be in [0, 1), got {cfg.dropout}")
    if not 0.0 <= cfg.ema_decay < 1.0 or cfg.averaging_interval < 1:
        raise ConfigError(f"ema_decay must be in [0, 1) and averaging_interval at least 1, got {cfg.ema_decay} and "
                          f"{cfg.averaging_interval}")
    if not 0.0 <= cfg.wsd_decay_frac <= 1.0:
        raise ConfigError(f"config key 'wsd_decay_frac' must be in [0, 1], got {cfg.wsd_decay_frac}")
    cfg.grad_accum_steps(world_size=1)  # the batch must split into micro-batches (per rank: checked at launch)
    model = cfg.model_args()
    if model["n_embd"] % model["n_head"]:
        raise ConfigError(f"n_embd={model['n_embd']} is not divisible by n_head={model['n_head']} (model "
                          f"'{cfg.model}' plus overrides): choose n_head dividing n_embd, e.g. "
                          f"{max(h for h in range(1, model['n_head'] + 1) if model['n_embd'] % h == 0)}")
    if cfg.parametrization == "mup" and cfg.mup_base_width <= 0:
        raise ConfigError("parametrization='mup' needs mup_base_width: the width (n_embd) the hyperparameters were "
                          "tuned at, where mup equals sp (e.g. --mup_base_width=96 for the mini's)")
    if cfg.parametrization == "sp" and cfg.mup_base_width:
        raise ConfigError(f"mup_base_width={cfg.mup_base_width} is read only with parametrization='mup': set "
                          "--parametrization=mup, or remove mup_base_width")
    if model["architecture"] == "llama":
        if (model["n_embd"] // model["n_head"]) % 2:
            raise ConfigError(f"model '{cfg.model}' has a head size of n_embd / n_head = {model['n_embd']} / "
                              f"{model['n_head']} = {model['n_embd'] // model['n_head']}, which is odd: rotary "
                              "embeddings rotate a head's dimensions in pairs; choose an even head size")

    if cfg.hellaswag_interval and cfg.tokenizer != "gpt2":
        raise ConfigError(f"hellaswag_interval needs GPT-2 tokens; this run's tokenizer is {cfg.tokenizer!r}")
    if cfg.min_lr > cfg.learning_rate:
        raise ConfigError(f"min_lr={cfg.min_lr} is above learning_rate={cfg.learning_rate}: the schedule decays "
                          "from learning_rate down to min_lr; lower min_lr")
    if cfg.async_checkpoint and cfg.data_parallel != "fsdp":
        raise ConfigError("async_checkpoint=True needs data_parallel='fsdp' (sharded checkpoints written through "
                          "DCP); under ddp rank 0 writes one file: set async_checkpoint=False")
    if cfg.data_parallel == "fsdp" and cfg.dtype == "float16":
        raise ConfigError("dtype='float16' needs a gradient scaler, which sharded training does not use: "
                          "use bfloat16 (or float32) with data_parallel='fsdp'")
    if cfg.hyperparameters is not None:
        cfg.hyperparameters.check_loop(cfg)
    if cfg.dtype == "float16" and cfg.hyperparameters is not None and cfg.hyperparameters.second_gradient():
        # A gradient that overflows in fp16 on MARS-exact's second pass would become g_prev and turn the
        # update into NaN, and the GradScaler only skips steps whose own gradients overflow.
        raise ConfigError(f"dtype='float16' cannot be combined with {cfg.hyperparameters.display_name()}, which "
                          "takes a second gradient per step; use bfloat16")
    if cfg.total_iters() <= 0:
        raise ConfigError("the run has no steps: set max_iters or max_tokens to a positive value")


def _suggest(key: str, names: list[str]) -> str:
    close = difflib.get_close_matches(key, names, n=1, cutoff=0.5)
    return f" (did you mean '{close[0]}'?)" if close else ""


def _parse_override(arg: str) -> tuple[str, typing.Any]:
    if not arg.startswith("--") or "=" not in arg:
        raise ConfigError(f"cannot read argument {arg!r}: overrides are written --key=value")
    key, text = arg[2:].split("=", 1)
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError):
        value = text  # a bare string such as --dataset=fineweb-edu
    return key, value


def _imported_names(source: str) -> set[str]:
    """The names a config file binds only by importing (`from math import pi`, `import os.path`): tools
    for computing values, not settings. A name it also assigns is a setting."""
    tree = ast.parse(source)
    imported = {(alias.asname or alias.name).split(".")[0] for node in ast.walk(tree)
                if isinstance(node, (ast.Import, ast.ImportFrom)) for alias in node.names}
    assigned = {node.id for node in ast.walk(tree) if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store)}
    return imported - assigned


CONFIG_DIR = os.path.dirname(os.path.abspath(__file__))


def read_config_file(path: str, including: tuple[str, ...] = ()) -> dict[str, typing.Any]:
    """The assignments a config file makes (its module-level names not starting with '_', and not
    brought in by an import), after those of the files it includes; config/<cell>.py, not on disk, is a cell of
    config/cells.py: its bases' assignments, its out_dir and wandb run name (the cell's name), then its own values."""
    folder, file = os.path.split(os.path.abspath(path))
    name = file.removesuffix(".py")
    if folder == CONFIG_DIR and name in CELLS and not os.path.exists(path):
        bases, own = CELLS[name]
        values: dict[str, typing.Any] = {}
        for base in bases:
            values |= read_config_file(os.path.join(CONFIG_DIR, base if base.endswith(".py") else f"{base}.py"),
                                       including)
        return values | {"out_dir": f"out/{name}", "wandb_run_name": name} | own
    try:
        with open(path) as f:
            source = f.read()
    except OSError as e:
        known = [*CELLS, *(f.removesuffix(".py") for f in os.listdir(CONFIG_DIR) if f.endswith(".py"))]
        hint = _suggest(name, known) if folder == CONFIG_DIR else ""
        raise ConfigError(f"cannot read config file {path}: {e}{hint}") from e
    namespace: dict[str, typing.Any] = {}
    try:
        exec(compile(source, path, "exec"), namespace)
    except SyntaxError as e:
        raise ConfigError(f"config file {path}, line {e.lineno}: {e.msg}: {(e.text or '').strip()!r}; "
                          "a config file is Python that assigns values (key = value)") from e
    except Exception as e:  # a config file only assigns values; anything that raises is a mistake in it
        raise ConfigError(f"config file {path} raised {type(e).__name__}: {e}; a config file only assigns "
                          "values (key = value)") from e
    imported = _imported_names(source)
    values = {
        k: v for k, v in namespace.items()
        if not k.startswith("_") and k not in imported and not isinstance(v, types.ModuleType)
    }
    included: dict[str, typing.Any] = {}
    if "include" in values:
        names = values.pop("include")
        if not (isinstance(names, list) and all(isinstance(name, str) for name in names)):
            raise ConfigError(f"config file {path}: include must be a list of config file names, got {names!r}")
        for name in names:
            included_path = os.path.join(os.path.dirname(path), name)
            if os.path.abspath(included_path) in including:
                raise ConfigError(f"config file {path} includes {name}, which includes it: remove one include")
            try:
                included |= read_config_file(included_path, (*including, os.path.abspath(path)))
            except ConfigError as e:
                raise ConfigError(f"config file {path} includes {name}: {e}") from None
    return included | values


HELP_FLAGS = ("--help", "-h")
PRINT_CONFIG_FLAG = "--print_config"  # train.py: print the resolved config (as config.json records it) and exit


def schema_help(schema: type, values: typing.Mapping[str, typing.Any] | None = None,
                sources: typing.Mapping[str, str] | None = None) -> list[str]:
    """A settings dataclass's settable keys, one line each (name, default, type, allowed values, its comment in
    the source: the class's own or an ancestor's), under the source's section headers (`# ---- ...`). A key in
    values shows that value instead of the default, marked with where it came from (sources: a file, an override)."""
    described: dict[str, tuple[str, str]] = {}  # key: (type as written, comment)
    order: list[str] = []  # the schema's own source: its headers (a leading space) and keys, in order
    for cls in [c for c in reversed(schema.__mro__) if dataclasses.is_dataclass(c)]:
        in_header = False
        for line in inspect.getsource(cls).splitlines():
            header = re.match(r"\s+# ---- (.*)", line)
            more = re.match(r"\s+# (.*)", line)
            field = re.match(r"\s+(\w+): ([^=]+?) = .*?(?:  # (.*))?$", line)
            if header and cls is schema:
                order.append(" " + header.group(1))
            elif more and in_header:
                order[-1] += " " + more.group(1)
            elif field:
                described[field.group(1)] = (field.group(2).strip(), field.group(3) or "")
                if cls is schema:
                    order.append(field.group(1))
            in_header = bool(header or (more and in_header)) and cls is schema
    keys = [key for key in settable_keys(schema) if key in described]
    order = [item for item in order if item.startswith(" ") or item in keys]
    order += [key for key in keys if key not in order]  # inherited keys
    fields = {f.name: f for f in dataclasses.fields(schema)}
    lines = []
    for item in order:
        if item.startswith(" "):
            lines += ["", f"  {item[1:]}"]
            continue
        f, (kind, comment) = fields[item], described[item]
        meta = f.metadata
        if meta.get("choices"):
            kind += f" in {{{', '.join(meta['choices'])}}}"
        elif meta.get("low") is not None:
            low, high = "(" if meta.get("low_open") else "[", ")" if meta.get("high_open") else "]"
            kind += f" in {low}{meta['low']}, {meta['high'] if meta.get('high') is not None else 'inf'}{high}"
        if values is not None and f.name in values:
            origin = (sources or {}).get(f.name, "")
            lines.append(f"    --{f.name}={values[f.name]!r}  ({kind})  [{origin + '; ' if origin else ''}default "
                         f"{f.default!r}]" + (f"  {comment}" if comment else ""))
        else:
            lines.append(f"    --{f.name}={f.default!r}  ({kind})" + (f"  {comment}" if comment else ""))
    return lines


def help_text(argv: list[str], hyperparameters: typing.Mapping[str, type]) -> str:
    """train.py --help: the usage, every loop key, the model presets and the optimizers; with an optimizer named
    (--optimizer=NAME, or a config file that names one), that optimizer's own keys too. After config files or
    overrides, each key they set shows its resolved value, marked with the file or override it came from."""
    values: dict[str, typing.Any] = {}
    sources: dict[str, str] = {}
    for arg in argv:
        if arg in HELP_FLAGS or arg == PRINT_CONFIG_FLAG:
            continue
        if arg.startswith("--") and "=" in arg:
            key, value = _parse_override(arg)
            values[key], sources[key] = value, "override"
        elif not arg.startswith("-"):
            from_file = read_config_file(arg)
            values |= from_file
            sources |= dict.fromkeys(from_file, f"from {arg}")
    optimizer = values.get("optimizer")
    lines = ["usage: python train.py [CONFIG_FILE.py ...] [--key=value ...] [--print_config]   (torchrun ... "
             "train.py ... for DDP/FSDP)", "",
             "Config files and overrides apply in order (an override before a config file that sets its key again is "
             "refused: put overrides last); --print_config prints the resolved config (as the "
             "run's config.json records it) and exits without starting the run."]
    lines += ["The loop's keys (" + ("this command line's value [where from; the default] or the default"
                                     if values else "default") + ", type, what it is):"]
    lines += schema_help(TrainConfig, values, sources)
    lines += ["", "model presets (--model=NAME):"]
    lines += [f"    {name}: " + ", ".join(f"{k}={v}" for k, v in preset.items()) for name, preset in PRESETS.items()]
    lines += ["", "optimizers (--optimizer=NAME; add --help after it for its own keys): " + ", ".join(hyperparameters)]
    if optimizer in hyperparameters:
        lines += ["", f"{optimizer}'s own keys:"] + schema_help(hyperparameters[optimizer], values, sources)
        read = set(settable_keys(TrainConfig)) | set(settable_keys(hyperparameters[optimizer]))
        unread = [key for key in values if key not in read]
        if unread:
            lines += ["", f"keys this command line sets that neither the loop nor {optimizer} reads (the run would "
                      f"stop on them): {', '.join(unread)}"]
    elif optimizer is not None:
        lines += ["", f"(no optimizer {optimizer!r}: choose one of the above)"]
    return "\n".join(lines)


def recorded_config(argv: list[str]) -> dict[str, typing.Any] | None:
    """`--init_from=resume --out_dir=X` with no config file on the line: the run's own config, as X/config.json
    records it, for load_config's base (the overrides on the line then change it); None for any other line, or a
    folder with no config.json (whose resume then says there is no run to resume)."""
    if any(not arg.startswith("-") for arg in argv):
        return None
    overrides = dict(_parse_override(arg) for arg in argv if arg.startswith("--") and "=" in arg)
    if overrides.get("init_from") != "resume" or "out_dir" not in overrides:
        return None
    path = os.path.join(str(overrides["out_dir"]), "config.json")
    if not os.path.exists(path):
        return None
    try:
        with open(path) as f:
            recorded = json.load(f)["config"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise ConfigError(f"cannot read the run's config from {path} ({type(e).__name__}: {e}); give the run's "
                          "config files on the command line, as it was started") from None
    return {key: value for key, value in recorded.items() if key != "init_from"}


def load_config(argv: list[str], hyperparameters: typing.Mapping[str, type], base: dict[str, typing.Any] | None = None,
                read_checkpoint_model: typing.Callable | None = None) -> TrainConfig:
    """Build the config from [config_file.py] [--key=value ...]; base values come first. hyperparameters:
    each optimizer's settings class (the registry's, optim.HYPERPARAMETERS), which validates its keys;
    read_checkpoint_model: how the model of init_from='hf:...' is read (huggingface.hf_model_args)."""
    values: dict[str, typing.Any] = dict(base or {})
    overridden: dict[str, str] = {}  # key -> the override that set it
    for arg in argv:
        if arg.startswith("--"):
            key, value = _parse_override(arg)
            values[key], overridden[key] = value, arg
        else:
            from_file = read_config_file(arg)
            undone = [key for key in from_file if key in overridden]
            if undone:  # (arguments apply in order: the file's value would win, silently)
                raise ConfigError(f"{' '.join(overridden[key] for key in undone)} comes before {arg}, which sets "
                                  f"{', '.join(undone)} again and would undo it: put the overrides after the config "
                                  "files")
            values.update(from_file)
    optimizer = values.get("optimizer", TrainConfig.optimizer)
    if not isinstance(optimizer, str) or optimizer not in hyperparameters:
        raise ConfigError(f"config key 'optimizer' is {optimizer!r}; choose one of {', '.join(hyperparameters)} (a "
                          "registry name), or name one from outside the project as package.module:Name")
    loop_keys = set(settable_keys(TrainConfig))
    own_keys = {f.name for f in dataclasses.fields(hyperparameters[optimizer])}
    for key in values:
        if key in loop_keys or key in own_keys:
            continue
        readers = [name for name, schema in hyperparameters.items() if key in {f.name for f in dataclasses.fields(schema)}]
        if readers:
            raise ConfigError(f"config key '{key}' is a setting of {', '.join(readers)}, not of the chosen optimizer "
                              f"{optimizer!r}, which reads {', '.join(sorted(own_keys))}; remove it (it would be "
                              "ignored) or choose one of those optimizers")
        every_key = sorted(loop_keys | {f.name for schema in hyperparameters.values() for f in dataclasses.fields(schema)})
        raise ConfigError(f"unknown config key '{key}'{_suggest(key, every_key)}")
    settings = hyperparameters[optimizer](**{k: v for k, v in values.items() if k in own_keys})
    cfg = TrainConfig(**{k: v for k, v in values.items() if k in loop_keys}, hyperparameters=settings,
                      read_checkpoint_model=read_checkpoint_model)
    dropped = [overridden[key] for key in GPT2_ONLY if key in overridden and values[key]]
    if dropped and cfg.model_args()["architecture"] == "llama":  # (a config file's are dropped, as documented)
        raise ConfigError(f"{', '.join(dropped)}: model '{cfg.model}' is a Llama, which has no biases and its "
                          "attention's usual scale; remove the override, or choose a GPT-2 model")
    return cfg
