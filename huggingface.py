"""
Our GPT and Hugging Face's: GPT2LMHeadModel for GPT-2, LlamaForCausalLM for the Llama. The one mapping of
configurations and tensors, used both ways: eval/export_hf.py writes a checkpoint as a Hugging Face folder
(hf_config, hf_state_dict), and train.py's --init_from=hf:<folder or hub name> starts a run from one
(hf_model_args, load_hf_weights), the exact inverse.

How a Llama maps onto LlamaForCausalLM: c_attn's three parts are q_proj, k_proj and v_proj, c_proj is
o_proj, the SwiGLU's w1, w2 and c_proj are gate_proj, up_proj and down_proj, ln_1, ln_2 and ln_f are
input_layernorm, post_attention_layernorm and norm. Our rotary embeddings rotate adjacent pairs of a head's
dimensions (Meta's layout); Hugging Face's rotate the first half against the second, so each head's rows of
q_proj and k_proj are reordered (even dimensions first, then odd; halves_layout, and adjacent_layout back),
as transformers' own conversion of Meta's weights does: the same attention scores, exactly. The head is tied
or not as the model is.

How a GPT-2 maps onto GPT-2: the same parameter names; GPT-2's attention and MLP projections are Conv1D,
which store the weight as (in, out), so those Linear weights are transposed; lm_head is tied to wte in both.
bias=False is written as zero biases (exact: a zero bias computes what no bias does), and read back only
where they are zero. scale_attn_by_inverse_layer_idx is GPT2Config's field of the same name.

Starting from a Hugging Face checkpoint (docs/models.md, "Starting from Hugging Face weights"): its
config.json decides the architecture and the shape; the run keeps its block_size (GPT-2's position table is
cut to it), vocab_size (the checkpoint's rows padded up to it: 50257 -> 50304, each padded row the mean of
the real rows), dropout and tokenizer, which must be the checkpoint's.
"""

import functools
import json
import os
from collections.abc import Callable
from dataclasses import fields

import torch

from config import hf_source
from config.models import OWN_COMPONENTS, GPTConfig, components
from data.tokenizer import EOT_TOKEN, ByteEncoding
from errors import InputError
from model import GPT, mlp_hidden, swiglu_hidden

# Linear weights that GPT-2 keeps in Conv1D layout (in_features, out_features).
CONV1D_WEIGHTS = ("attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight")
# The GPTConfig fields the mapping expresses; a new field must be mapped (or refused) here. (init shapes
# training, not the function; dropout is off in evaluation.)
EXPRESSIBLE_FIELDS = {
    "block_size", "vocab_size", "n_layer", "n_head", "n_embd", "dropout", "bias", "scale_attn_by_inverse_layer_idx",
    "architecture", "mlp_ratio", "rope_theta", "norm_eps", "tie_embeddings", "init", "parametrization",
    "mup_base_width", "positions", "norm", "mlp",
}
HF_ARCHITECTURES = {"gpt2": "GPT2LMHeadModel", "llama": "LlamaForCausalLM"}
MODEL_TYPES = {"gpt2": "gpt2", "llama": "llama"}  # Hugging Face's model_type: our architecture
TOKENIZER_SIZES = {"gpt2": EOT_TOKEN + 1, "bytes": ByteEncoding.n_vocab}  # data/tokenizer.py's encodings' n_vocab
# Tensors of a Hugging Face model that are not weights (buffers some versions save)
NOT_WEIGHTS = (".attn.bias", ".attn.masked_bias", "rotary_emb.inv_freq")


class HuggingFaceError(InputError):
    """A Hugging Face checkpoint this project cannot start from, or a run's settings that contradict it."""


# ----------------------------------------------------------------------------- configurations


def check_expressible(config: GPTConfig) -> None:
    """Refuse configurations the Hugging Face model would compute differently."""
    unknown = {f.name for f in fields(GPTConfig)} - EXPRESSIBLE_FIELDS
    if unknown:
        raise ValueError(f"GPTConfig fields {sorted(unknown)} have no Hugging Face equivalent in huggingface.py; "
                         "map them in hf_config and hf_model_args or refuse them explicitly")
    if config.architecture == "gpt2" and (not config.tie_embeddings or config.mlp_ratio):
        raise ValueError("a GPT2LMHeadModel has a tied head and a 4 n_embd MLP; this GPT-2 has not")
    swapped = {k: v for k, v in components(config).items() if v != OWN_COMPONENTS[config.architecture][k]}
    if swapped:
        raise InputError(f"this {config.architecture} model has another architecture's {', '.join(swapped)} swapped in "
                         f"({swapped}), which its Hugging Face class does not compute: evaluate it with python -m "
                         "eval.hellaswag or eval.harness")
    if config.width_multiplier() != 1:
        raise InputError(f"this model is mup at {config.width_multiplier():g}x its base width (its attention's 1/d and "
                         "its logits / m), which a Hugging Face GPT-2 or Llama does not compute: evaluate it with "
                         "python -m eval.hellaswag or eval.harness, which load it as it was trained")


def hf_config(config: GPTConfig) -> dict:
    """config.json for the Hugging Face model with the same architecture."""
    check_expressible(config)
    if config.architecture == "llama":
        return {
            "architectures": ["LlamaForCausalLM"],
            "model_type": "llama",
            "vocab_size": config.vocab_size,
            "hidden_size": config.n_embd,
            "intermediate_size": mlp_hidden(config),
            "num_hidden_layers": config.n_layer,
            "num_attention_heads": config.n_head,
            "num_key_value_heads": config.n_head,
            "head_dim": config.n_embd // config.n_head,
            "hidden_act": "silu",
            "max_position_embeddings": config.block_size,
            "rms_norm_eps": config.norm_eps,
            "rope_theta": config.rope_theta,
            "rope_scaling": None,
            "attention_bias": False,
            "mlp_bias": False,
            "attention_dropout": 0.0,
            "initializer_range": 0.02,
            "tie_word_embeddings": config.tie_embeddings,
            "bos_token_id": EOT_TOKEN,
            "eos_token_id": EOT_TOKEN,
            "torch_dtype": "float32",
        }
    return {
        "architectures": ["GPT2LMHeadModel"],
        "model_type": "gpt2",
        "vocab_size": config.vocab_size,
        "n_positions": config.block_size,
        "n_ctx": config.block_size,
        "n_embd": config.n_embd,
        "n_layer": config.n_layer,
        "n_head": config.n_head,
        "n_inner": 4 * config.n_embd,
        "activation_function": "gelu_new",  # tanh-approximated GELU, as model.MLP
        "layer_norm_epsilon": config.norm_eps,
        "resid_pdrop": config.dropout,
        "embd_pdrop": config.dropout,
        "attn_pdrop": config.dropout,
        "initializer_range": 0.02,
        "scale_attn_weights": True,
        "scale_attn_by_inverse_layer_idx": config.scale_attn_by_inverse_layer_idx,
        "reorder_and_upcast_attn": False,
        "tie_word_embeddings": True,
        "bos_token_id": EOT_TOKEN,
        "eos_token_id": EOT_TOKEN,
        "torch_dtype": "float32",
    }


def _rope_theta(hf) -> float:
    """A LlamaConfig's rotary theta (transformers 5 keeps it in rope_parameters, 4 as rope_theta)."""
    parameters = getattr(hf, "rope_parameters", None) or {}
    return float(parameters.get("rope_theta", getattr(hf, "rope_theta", None) or 10000.0))


def checkpoint_model_args(hf, source: str) -> dict:
    """What a Hugging Face config (a transformers PretrainedConfig) fixes of our GPTConfig, plus its
    vocabulary (vocab_size) and, for GPT-2, its position table's length (n_positions); refuses what our
    model cannot compute."""
    model_type = getattr(hf, "model_type", None)
    if model_type not in MODEL_TYPES:
        names = ", ".join(getattr(hf, "architectures", None) or []) or "no architectures named"
        raise HuggingFaceError(
            f"{source} is a '{model_type}' model ({names}); --init_from=hf: starts from a GPT-2 (GPT2LMHeadModel) "
            "or a Llama (LlamaForCausalLM) checkpoint: give one of those")

    def refuse(what: str) -> HuggingFaceError:
        return HuggingFaceError(f"{source}: {what}, which this project's {HF_ARCHITECTURES[model_type]} "
                                "counterpart cannot compute; start from a checkpoint without it")

    if model_type == "gpt2":
        n_embd = hf.n_embd
        if not getattr(hf, "tie_word_embeddings", True):
            raise refuse("an untied head")
        if (hf.n_inner or 4 * n_embd) != 4 * n_embd:
            raise refuse(f"an MLP of {hf.n_inner} (not 4 x n_embd = {4 * n_embd})")
        if hf.activation_function not in ("gelu_new", "gelu_pytorch_tanh"):
            raise refuse(f"activation_function={hf.activation_function!r} (ours is the tanh GELU, 'gelu_new')")
        if not getattr(hf, "scale_attn_weights", True):
            raise refuse("scale_attn_weights=False")
        return dict(architecture="gpt2", n_layer=hf.n_layer, n_head=hf.n_head, n_embd=n_embd,
                    norm_eps=hf.layer_norm_epsilon, tie_embeddings=True, mlp_ratio=0,
                    scale_attn_by_inverse_layer_idx=bool(hf.scale_attn_by_inverse_layer_idx),
                    vocab_size=hf.vocab_size, n_positions=hf.n_positions)
    n_embd, n_head = hf.hidden_size, hf.num_attention_heads
    if (hf.num_key_value_heads or n_head) != n_head:
        raise refuse(f"grouped-query attention ({hf.num_key_value_heads} key-value heads for {n_head} heads)")
    if n_embd % n_head or (getattr(hf, "head_dim", None) or n_embd // n_head) != n_embd // n_head:
        raise refuse(f"a head size of {getattr(hf, 'head_dim', None)} (not hidden_size / heads)")
    if hf.hidden_act != "silu":
        raise refuse(f"hidden_act={hf.hidden_act!r} (ours is SwiGLU's silu)")
    if getattr(hf, "attention_bias", False) or getattr(hf, "mlp_bias", False):
        raise refuse("biases")
    rope = getattr(hf, "rope_parameters", None) or getattr(hf, "rope_scaling", None) or {}
    if rope.get("rope_type", rope.get("type", "default")) != "default":
        raise refuse(f"rotary scaling {rope.get('rope_type', rope.get('type'))!r}")
    hidden = hf.intermediate_size
    if hidden == swiglu_hidden(n_embd):
        mlp_ratio = 0
    elif hidden % n_embd == 0:
        mlp_ratio = hidden // n_embd
    else:
        raise refuse(f"intermediate_size={hidden}, neither a whole multiple of hidden_size={n_embd} nor "
                     f"llm-baselines' rule ({swiglu_hidden(n_embd)})")
    return dict(architecture="llama", n_layer=hf.num_hidden_layers, n_head=n_head, n_embd=n_embd,
                norm_eps=hf.rms_norm_eps, rope_theta=_rope_theta(hf), mlp_ratio=mlp_ratio,
                tie_embeddings=bool(getattr(hf, "tie_word_embeddings", False)), bias=False,
                scale_attn_by_inverse_layer_idx=False, vocab_size=hf.vocab_size)


def _looks_like_a_path(source: str) -> bool:
    return (source.startswith(("/", "./", "../", "~")) or source.endswith("/") or os.sep + os.sep in source
            or source.count("/") > 1 or os.sep != "/" and os.sep in source)


@functools.lru_cache(maxsize=8)
def read_hf_config(source: str):
    """The transformers config of a local folder or a hub name, or a HuggingFaceError naming the problem."""
    path = os.path.expanduser(source)
    if os.path.isdir(path):
        config_file = os.path.join(path, "config.json")
        if not os.path.isfile(config_file):
            raise HuggingFaceError(f"--init_from=hf:{source}: the folder has no config.json, so it is not a Hugging "
                                   "Face model folder; give a folder written by save_pretrained (config.json and "
                                   "model.safetensors or pytorch_model.bin), or a hub name such as gpt2")
        try:
            with open(config_file) as f:
                model_type = json.load(f).get("model_type")
        except (ValueError, AttributeError, OSError) as e:
            raise HuggingFaceError(f"--init_from=hf:{source}: {config_file} is not a JSON object ({e}); give a "
                                   "folder written by save_pretrained") from e
        if model_type not in MODEL_TYPES:  # (before transformers, which may not know the type at all)
            raise HuggingFaceError(
                f"--init_from=hf:{source} is a '{model_type}' model (its config.json's model_type); "
                "--init_from=hf: starts from a GPT-2 (GPT2LMHeadModel) or a Llama (LlamaForCausalLM) "
                "checkpoint: give one of those")
    elif os.path.exists(path) or _looks_like_a_path(source):
        raise HuggingFaceError(f"--init_from=hf:{source}: there is no folder {path}; give a Hugging Face model folder "
                               "(config.json and its weights) or a hub name such as gpt2 or gpt2-medium")
    from transformers import AutoConfig

    try:
        return AutoConfig.from_pretrained(path)
    except (OSError, ValueError, KeyError) as e:
        where = ("the folder's config.json" if os.path.isdir(path)
                 else "the Hugging Face hub (no local folder has that name)")
        raise HuggingFaceError(f"--init_from=hf:{source}: cannot read the model's config from {where}: {e}. "
                               "Check the name and the network (or HF_TOKEN for a gated model), or give a local "
                               "folder") from None


def hf_model_args(cfg) -> dict:
    """GPTConfig arguments for a run that starts from --init_from=hf:<source> (cfg: a config.TrainConfig): the
    checkpoint's architecture and shape; the run's block_size, vocab_size and dropout; GPT-2's bias as the run
    says (False only for a checkpoint whose biases are zero, checked as it loads). An explicit n_layer, n_head
    or n_embd, or scale_attn_by_inverse_layer_idx=True, that the checkpoint contradicts is an error."""
    source = hf_source(cfg.init_from)
    checkpoint = checkpoint_model_args(read_hf_config(source), source)
    vocab, n_positions = checkpoint.pop("vocab_size"), checkpoint.pop("n_positions", None)
    conflicts = [f"{key}={getattr(cfg, key)} (it has {checkpoint[key]})" for key in ("n_layer", "n_head", "n_embd")
                 if getattr(cfg, key) and getattr(cfg, key) != checkpoint[key]]
    if cfg.scale_attn_by_inverse_layer_idx and not checkpoint["scale_attn_by_inverse_layer_idx"]:
        conflicts.append("scale_attn_by_inverse_layer_idx=True (it has False)")
    if cfg.parametrization != "sp":
        conflicts.append(f"parametrization={cfg.parametrization} (a Hugging Face checkpoint is sp)")
    if conflicts:
        raise HuggingFaceError(f"--init_from=hf:{source}: the checkpoint's config.json decides the model's shape, and "
                               f"the run asks for {', '.join(conflicts)}; remove those settings (or set them as the "
                               "checkpoint has them)")
    if n_positions is not None and cfg.block_size > n_positions:
        raise HuggingFaceError(f"--init_from=hf:{source}: block_size={cfg.block_size} is longer than the checkpoint's "
                               f"{n_positions} learned positions (n_positions); set block_size to {n_positions} "
                               "or less")
    tokens = TOKENIZER_SIZES[cfg.tokenizer]
    if not tokens <= vocab <= cfg.vocab_size:
        fix = (f"set vocab_size={vocab} or more" if vocab > cfg.vocab_size and vocab < tokens + 64 else
               f"start from a checkpoint trained on the run's '{cfg.tokenizer}' tokens ({tokens} ids), or train on "
               "shards of the checkpoint's own tokenizer")
        raise HuggingFaceError(f"--init_from=hf:{source}: the checkpoint has a vocabulary of {vocab} ids, and the "
                               f"run's tokenizer '{cfg.tokenizer}' has {tokens} and its vocab_size is "
                               f"{cfg.vocab_size}: the vocabulary must hold the tokenizer's ids and fit vocab_size; "
                               f"{fix}")
    args = {f.name: f.default for f in fields(GPTConfig)} | checkpoint
    args |= dict(block_size=cfg.block_size, vocab_size=cfg.vocab_size, dropout=cfg.dropout)
    if args["architecture"] == "gpt2":
        args["bias"] = cfg.bias
    return args


# ----------------------------------------------------------------------------- tensors


def halves_layout(weight: torch.Tensor, n_head: int) -> torch.Tensor:
    """q_proj or k_proj rows reordered within each head from adjacent rotary pairs (0, 1), (2, 3), ... to
    Hugging Face's halves (0, 2, 4, ..., then 1, 3, 5, ...)."""
    rows, columns = weight.shape
    return weight.view(n_head, rows // n_head // 2, 2, columns).transpose(1, 2).reshape(rows, columns)


def adjacent_layout(weight: torch.Tensor, n_head: int) -> torch.Tensor:
    """halves_layout's inverse: Hugging Face's halves back to adjacent rotary pairs."""
    rows, columns = weight.shape
    return weight.view(n_head, 2, rows // n_head // 2, columns).transpose(1, 2).reshape(rows, columns)


# One tensor of ours: its name, its Hugging Face names, ours -> theirs, theirs -> ours
Mapping = tuple[str, tuple[str, ...], Callable[[torch.Tensor], tuple[torch.Tensor, ...]], Callable[..., torch.Tensor]]


def _positions(rows: int) -> Callable[..., torch.Tensor]:
    """Theirs -> ours for GPT-2's position table: cut to block_size (`rows`)."""
    def read(weight: torch.Tensor) -> torch.Tensor:
        if weight.size(0) < rows:
            raise HuggingFaceError(f"the checkpoint has {weight.size(0)} learned positions, fewer than "
                                   f"block_size={rows}")
        return weight[:rows]
    return read


def _vocabulary(rows: int) -> Callable[..., torch.Tensor]:
    """Theirs -> ours for an embedding or a head: padded to vocab_size (`rows`), each new row the mean of the
    real ones (a logit at the real logits' mean, not the 0 of a zero row, which would outweigh GPT-2's strongly
    negative logits)."""
    def read(weight: torch.Tensor) -> torch.Tensor:
        if weight.size(0) > rows:
            raise HuggingFaceError(f"the checkpoint has a vocabulary of {weight.size(0)} ids, more than "
                                   f"vocab_size={rows}")
        return torch.cat([weight, weight.mean(0, keepdim=True).expand(rows - weight.size(0), -1)])
    return read


def tensor_mapping(config: GPTConfig) -> list[Mapping]:
    """Every tensor of our model and its counterparts in the Hugging Face model (the one table both ways)."""
    same: Callable = lambda t: (t,)
    back: Callable = lambda t: t
    transposed: Callable = lambda t: (t.t(),)
    vocab = _vocabulary(config.vocab_size)
    if config.architecture == "gpt2":
        mapping: list[Mapping] = []
        parts = ("ln_1", "attn.c_attn", "attn.c_proj", "ln_2", "mlp.c_fc", "mlp.c_proj")
        blocks = [f"transformer.h.{i}.{part}.{kind}" for i in range(config.n_layer) for part in parts
                  for kind in ("weight", "bias")]
        for name in ["transformer.wte.weight", "transformer.wpe.weight", *blocks, "transformer.ln_f.weight",
                     "transformer.ln_f.bias"]:
            if name.endswith("bias") and not config.bias:
                continue  # (zero_biases)
            if name.endswith(CONV1D_WEIGHTS):
                mapping.append((name, (name,), transposed, lambda t: t.t()))
            else:
                read = vocab if name == "transformer.wte.weight" else (
                    _positions(config.block_size) if name == "transformer.wpe.weight" else back)
                mapping.append((name, (name,), same, read))
        return mapping
    n_embd, n_head = config.n_embd, config.n_head
    mapping = [("transformer.wte.weight", ("model.embed_tokens.weight",), same, vocab),
               ("transformer.ln_f.weight", ("model.norm.weight",), same, back)]
    if not config.tie_embeddings:
        mapping.append(("lm_head.weight", ("lm_head.weight",), same, vocab))
    for i in range(config.n_layer):
        ours, hf = f"transformer.h.{i}.", f"model.layers.{i}.self_attn."

        def split(t: torch.Tensor) -> tuple[torch.Tensor, ...]:
            q, k, v = t.split(n_embd)
            return halves_layout(q, n_head), halves_layout(k, n_head), v

        def join(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
            return torch.cat([adjacent_layout(q, n_head), adjacent_layout(k, n_head), v])

        mapping.append((ours + "attn.c_attn.weight", (hf + "q_proj.weight", hf + "k_proj.weight", hf + "v_proj.weight"),
                        split, join))
        hf = f"model.layers.{i}."
        mapping += [(ours + a, (hf + b,), same, back) for a, b in (
            ("attn.c_proj.weight", "self_attn.o_proj.weight"), ("mlp.w1.weight", "mlp.gate_proj.weight"),
            ("mlp.w2.weight", "mlp.up_proj.weight"), ("mlp.c_proj.weight", "mlp.down_proj.weight"),
            ("ln_1.weight", "input_layernorm.weight"), ("ln_2.weight", "post_attention_layernorm.weight"))]
    return mapping


def zero_biases(config: GPTConfig) -> dict[str, int]:
    """The biases (name: length) a GPT-2 without biases is written with, as zeros; none for a Llama."""
    if config.architecture != "gpt2" or config.bias:
        return {}
    n = config.n_embd
    sizes = dict(ln_1=n, **{"attn.c_attn": 3 * n, "attn.c_proj": n, "mlp.c_fc": 4 * n, "mlp.c_proj": n}, ln_2=n)
    return {f"transformer.h.{i}.{part}.bias": size for i in range(config.n_layer) for part, size in sizes.items()} | {
        "transformer.ln_f.bias": n}


def to_hf_state_dict(ours: dict[str, torch.Tensor], config: GPTConfig) -> dict[str, torch.Tensor]:
    """The Hugging Face model's tensors (float32, contiguous, on the CPU) from our state_dict."""
    state = {}
    for name, hf_names, to_hf, _ in tensor_mapping(config):
        state |= dict(zip(hf_names, to_hf(ours[name].detach().float().cpu()), strict=True))
    state |= {name: torch.zeros(size) for name, size in zero_biases(config).items()}
    return {name: tensor.contiguous() for name, tensor in state.items()}


def hf_state_dict(model: GPT) -> dict[str, torch.Tensor]:
    """The Hugging Face model's tensors (float32, contiguous) from our model's."""
    return to_hf_state_dict(model.state_dict(), model.config)


def from_hf_state_dict(theirs: dict[str, torch.Tensor], config: GPTConfig, source: str = "the checkpoint"
                       ) -> dict[str, torch.Tensor]:
    """Our state_dict (float32, contiguous) from the Hugging Face model's tensors: to_hf_state_dict's inverse.
    Every weight of theirs is used (a tied head is the embedding), and a GPT-2 without biases reads zero biases."""
    theirs = {name: tensor.detach().float().cpu() for name, tensor in theirs.items()}
    state, used = {}, set()
    for name, hf_names, _, from_hf in tensor_mapping(config):
        missing = [hf_name for hf_name in hf_names if hf_name not in theirs]
        if missing:
            raise HuggingFaceError(f"{source} has no {missing[0]}, which a {HF_ARCHITECTURES[config.architecture]} "
                                   "of its config has; its weights do not match its config.json")
        state[name] = from_hf(*(theirs[hf_name] for hf_name in hf_names)).contiguous()
        used.update(hf_names)
    for name in zero_biases(config):
        if name in theirs and theirs[name].any():
            raise HuggingFaceError(f"{source} has non-zero biases ({name}, ...), and the run says bias=False; run with "
                                   "bias=True (the default), or the model would compute something else")
        used.add(name)
    if config.tie_embeddings:
        used.add("lm_head.weight")
    unused = sorted(name for name in set(theirs) - used if not name.endswith(NOT_WEIGHTS))
    if unused:
        raise HuggingFaceError(f"{source} holds weights our model has no place for ({', '.join(unused[:3])}); start "
                               "from a plain GPT2LMHeadModel or LlamaForCausalLM checkpoint")
    if "lm_head.weight" not in state:
        state["lm_head.weight"] = state["transformer.wte.weight"]
    return state


def check_hf_tokenizer(source: str, tokenizer: str) -> None:
    """Refuse a checkpoint whose own tokenizer (where it ships one) splits text otherwise than the run's."""
    from data.tokenizer import get_encoding

    path = os.path.expanduser(source)
    if os.path.isdir(path) and not any(os.path.exists(os.path.join(path, name)) for name in (
            "tokenizer.json", "vocab.json", "tokenizer.model", "tokenizer_config.json")):
        return  # no tokenizer shipped: the vocabulary size was checked (hf_model_args)
    try:
        from transformers import AutoTokenizer

        theirs = AutoTokenizer.from_pretrained(path)
    except Exception:  # (none to be had from the hub, or one transformers cannot build: nothing to compare)
        return
    text = "Hello world!  It's 2024 - naïve café 日本語\n\n  tabs\tand   spaces"
    ours = get_encoding(tokenizer).encode(text)
    if theirs.encode(text, add_special_tokens=False) != list(ours):
        raise HuggingFaceError(f"--init_from=hf:{source}: the checkpoint's tokenizer splits text into other ids than "
                               f"the run's '{tokenizer}' tokenizer does, so it would read the run's token shards as "
                               "other words; start from a checkpoint of the run's tokenizer, or train on shards of "
                               "its own")


def load_hf_weights(model: GPT, source: str, tokenizer: str) -> str:
    """Copy the weights of the Hugging Face checkpoint `source` (a folder or a hub name, through transformers'
    from_pretrained) into model, built from hf_model_args; returns a line saying what was loaded."""
    from safetensors import SafetensorError  # (a cut or garbled model.safetensors: a plain Exception's subclass)
    from transformers import GPT2LMHeadModel, LlamaForCausalLM
    from transformers.utils import logging as transformers_logging

    transformers_logging.disable_progress_bar()  # (a bar per load in the run's log)
    check_hf_tokenizer(source, tokenizer)
    cls = {"gpt2": GPT2LMHeadModel, "llama": LlamaForCausalLM}[model.config.architecture]
    try:
        hf_model = cls.from_pretrained(os.path.expanduser(source))
    except (OSError, ValueError, RuntimeError, SafetensorError) as e:
        raise HuggingFaceError(f"--init_from=hf:{source}: transformers cannot load its weights as a {cls.__name__}: "
                               f"{str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__}; give a "
                               "folder with config.json and model.safetensors or pytorch_model.bin") from None
    state = from_hf_state_dict(hf_model.state_dict(), model.config, f"--init_from=hf:{source}")
    vocab = hf_model.config.vocab_size
    del hf_model
    model.load_state_dict(state)
    padded = f", its {vocab} ids padded to {model.config.vocab_size}" if vocab < model.config.vocab_size else ""
    return f"starting from the {cls.__name__} {source}{padded} (fresh optimizer, step 0)"
