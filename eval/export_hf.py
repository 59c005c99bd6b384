"""
Export a checkpoint as a Hugging Face folder: a GPT2LMHeadModel for a GPT-2 preset, a LlamaForCausalLM for a
Llama preset:

    python -m eval.export_hf --checkpoint out/run/ckpt.pt --out hf/

writes config.json, model.safetensors and the GPT-2 tokenizer (vocab.json,
merges.txt, tokenizer.json, ...) rebuilt from tiktoken's ranks, so that
transformers.AutoModelForCausalLM / AutoTokenizer and `lm_eval --model hf
--model_args pretrained=hf/` load it.

How a Llama maps onto LlamaForCausalLM: c_attn's three parts are q_proj, k_proj and v_proj, c_proj is
o_proj, the SwiGLU's w1, w2 and c_proj are gate_proj, up_proj and down_proj, ln_1, ln_2 and ln_f are
input_layernorm, post_attention_layernorm and norm. Our rotary embeddings rotate adjacent pairs of a head's
dimensions (Meta's layout); Hugging Face's rotate the first half against the second, so each head's rows of
q_proj and k_proj are reordered (even dimensions first, then odd), as transformers' own conversion of Meta's
weights does: the same attention scores, exactly. The head is tied or not as the preset is.

How a GPT-2 maps onto GPT-2:
- Same parameter names; GPT-2's attention and MLP projections are Conv1D, which
  store the weight as (in, out), so those Linear weights are transposed.
- lm_head is tied to wte in both; the file stores wte only (tie_word_embeddings).
- vocab_size stays 50304, the padded size we trained: the tokenizer has 50257
  tokens and never produces the 47 extra ids, so logits over real tokens are
  unchanged, and the softmax keeps the same (padded) normaliser as in training
  and in our evaluators.
- scale_attn_by_inverse_layer_idx is GPT2Config's field of the same name.
- bias=False: GPT-2 always has biases, so zero biases are written. That is exact,
  not an approximation: a Linear or LayerNorm with a zero bias computes what the
  bias-free one does.
- Anything GPT2Config cannot express makes the export fail rather than write a
  model that computes something else (see check_expressible).
- Only checkpoints trained on GPT-2 tokens are exported: the folder's tokenizer is
  GPT-2's, which would feed a byte-tokenizer model ids it never saw (see check_tokenizer).
"""

import argparse
import json
import os
from dataclasses import fields

import torch
from safetensors.torch import save_file

from data.tokenizer import EOT_TOKEN, get_encoding
from checkpoint import load_model
from eval.scoring import model_encoding
from model import GPT, GPTConfig, mlp_hidden
from errors import InputError, exit_on_input_error

# Linear weights that GPT-2 keeps in Conv1D layout (in_features, out_features).
CONV1D_WEIGHTS = ("attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight")
# The GPTConfig fields the exports below express; a new field must be mapped (or refused) here. (init shapes
# training, not the function; dropout is off in evaluation.)
EXPRESSIBLE_FIELDS = {
    "block_size", "vocab_size", "n_layer", "n_head", "n_embd", "dropout", "bias", "scale_attn_by_inverse_layer_idx",
    "architecture", "mlp_ratio", "rope_theta", "norm_eps", "tie_embeddings", "init",
}
HF_ARCHITECTURES = {"gpt2": "GPT2LMHeadModel", "llama": "LlamaForCausalLM"}
EOT_STRING = "<|endoftext|>"
# What an export writes: an --out folder holding anything else is not overwritten.
EXPORT_FILES = ("config.json", "model.safetensors", "vocab.json", "merges.txt", "tokenizer.json",
                "tokenizer_config.json", "special_tokens_map.json")


def check_expressible(config: GPTConfig) -> None:
    """Refuse configurations the Hugging Face model would compute differently."""
    unknown = {f.name for f in fields(GPTConfig)} - EXPRESSIBLE_FIELDS
    if unknown:
        raise ValueError(f"GPTConfig fields {sorted(unknown)} have no Hugging Face equivalent in export_hf; "
                         "map them in hf_config or refuse them explicitly")
    if config.architecture == "gpt2" and (not config.tie_embeddings or config.mlp_ratio):
        raise ValueError("a GPT2LMHeadModel has a tied head and a 4 n_embd MLP; this GPT-2 has not")


def check_tokenizer(tokenizer: str, vocab_size: int, checkpoint: str) -> None:
    """Refuse a checkpoint the GPT-2 tokenizer files would not fit: one trained with another tokenizer,
    or with a vocabulary smaller than GPT-2's."""
    if tokenizer != "gpt2":
        raise InputError(
            f"{checkpoint} was trained with the '{tokenizer}' tokenizer, but the Hugging Face export writes "
            "GPT-2's tokenizer (a Hugging Face folder with GPT-2's BPE files), which would turn text into "
            f"ids this {vocab_size}-token model was never trained on: it cannot be exported faithfully. "
            "Evaluate it with python -m eval.hellaswag or eval.harness, which use its own tokenizer"
        )
    model_encoding(tokenizer, vocab_size, checkpoint)


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


def halves_layout(weight: torch.Tensor, n_head: int) -> torch.Tensor:
    """q_proj or k_proj rows reordered within each head from adjacent rotary pairs (0, 1), (2, 3), ... to
    Hugging Face's halves (0, 2, 4, ..., then 1, 3, 5, ...)."""
    rows, columns = weight.shape
    return weight.view(n_head, rows // n_head // 2, 2, columns).transpose(1, 2).reshape(rows, columns)


def llama_state_dict(model: GPT) -> dict[str, torch.Tensor]:
    """LlamaForCausalLM's tensors (float32, contiguous) from ours."""
    config = model.config
    ours = {name: tensor.detach().float().cpu() for name, tensor in model.state_dict().items()}
    state = {"model.embed_tokens.weight": ours["transformer.wte.weight"],
             "model.norm.weight": ours["transformer.ln_f.weight"]}
    if not config.tie_embeddings:
        state["lm_head.weight"] = ours["lm_head.weight"]
    for i in range(config.n_layer):
        block, hf = f"transformer.h.{i}.", f"model.layers.{i}."
        q, k, v = ours[block + "attn.c_attn.weight"].split(config.n_embd)
        state |= {
            hf + "self_attn.q_proj.weight": halves_layout(q, config.n_head),
            hf + "self_attn.k_proj.weight": halves_layout(k, config.n_head),
            hf + "self_attn.v_proj.weight": v,
            hf + "self_attn.o_proj.weight": ours[block + "attn.c_proj.weight"],
            hf + "mlp.gate_proj.weight": ours[block + "mlp.w1.weight"],
            hf + "mlp.up_proj.weight": ours[block + "mlp.w2.weight"],
            hf + "mlp.down_proj.weight": ours[block + "mlp.c_proj.weight"],
            hf + "input_layernorm.weight": ours[block + "ln_1.weight"],
            hf + "post_attention_layernorm.weight": ours[block + "ln_2.weight"],
        }
    return {name: tensor.contiguous() for name, tensor in state.items()}


def hf_state_dict(model: GPT) -> dict[str, torch.Tensor]:
    """The Hugging Face model's tensors (float32, contiguous) from ours."""
    if model.config.architecture == "llama":
        return llama_state_dict(model)
    state = {}
    for name, tensor in model.state_dict().items():
        if name == "lm_head.weight":
            continue  # tied to transformer.wte.weight
        tensor = tensor.detach().float().cpu()
        state[name] = (tensor.t() if name.endswith(CONV1D_WEIGHTS) else tensor).contiguous()
    if not model.config.bias:
        for name, module in model.named_modules():
            if isinstance(module, (torch.nn.Linear, torch.nn.LayerNorm)) and name != "lm_head":
                out_features = module.weight.shape[0]  # Linear: (out, in); LayerNorm: (n_embd,)
                state[f"{name}.bias"] = torch.zeros(out_features)
    return state


def _merge_of(ranks: dict[bytes, int], token: bytes) -> tuple[bytes, bytes]:
    """The BPE merge that created token: applying only the merges ranked before it
    leaves exactly the two pieces it was merged from."""
    parts = [bytes([b]) for b in token]
    while len(parts) > 2:
        pair_ranks = [ranks.get(a + b, len(ranks)) for a, b in zip(parts, parts[1:])]
        i = min(range(len(pair_ranks)), key=pair_ranks.__getitem__)
        if pair_ranks[i] >= ranks[token]:
            break
        parts[i : i + 2] = [parts[i] + parts[i + 1]]
    assert len(parts) == 2, f"token {token!r} is not a single merge of earlier tokens"
    return parts[0], parts[1]


def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2's reversible byte -> printable character map used in vocab.json/merges.txt."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(
        range(ord("®"), ord("ÿ") + 1))
    mapping, extra = {}, 0
    for b in range(256):
        if b in printable:
            mapping[b] = chr(b)
        else:
            mapping[b] = chr(256 + extra)
            extra += 1
    return mapping


def write_tokenizer(out_dir: str, model_max_length: int) -> None:
    """GPT-2 tokenizer files rebuilt from tiktoken's r50k_base ranks (GPT-2's BPE):
    vocab.json + merges.txt (the original format) and tokenizer.json (the
    tokenizers library's), written directly so no transformers version's
    tokenizer constructor is involved."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, processors

    ranks = get_encoding()._mergeable_ranks
    byte_char = _bytes_to_unicode()

    def as_text(token: bytes) -> str:
        return "".join(byte_char[b] for b in token)

    vocab = {as_text(token): rank for token, rank in ranks.items()}
    vocab[EOT_STRING] = EOT_TOKEN
    by_rank = sorted(ranks, key=ranks.__getitem__)
    merges = [tuple(map(as_text, _merge_of(ranks, token))) for token in by_rank if len(token) > 1]
    with open(os.path.join(out_dir, "vocab.json"), "w", encoding="utf-8") as f:
        json.dump(vocab, f, ensure_ascii=False)
    with open(os.path.join(out_dir, "merges.txt"), "w", encoding="utf-8") as f:
        f.write("#version: 0.2\n" + "".join(f"{a} {b}\n" for a, b in merges))

    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=merges, fuse_unk=False))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.post_processor = processors.ByteLevel(trim_offsets=False)
    tokenizer.add_special_tokens([AddedToken(EOT_STRING, special=True, normalized=False)])
    tokenizer.save(os.path.join(out_dir, "tokenizer.json"))
    specials = {"bos_token": EOT_STRING, "eos_token": EOT_STRING, "unk_token": EOT_STRING}
    with open(os.path.join(out_dir, "tokenizer_config.json"), "w") as f:
        json.dump({"tokenizer_class": "GPT2Tokenizer", "model_max_length": model_max_length,
                   "add_prefix_space": False, **specials}, f, indent=2)
    with open(os.path.join(out_dir, "special_tokens_map.json"), "w") as f:
        json.dump(specials, f, indent=2)


def check_out_dir(out_dir: str) -> None:
    """Refuse an --out that is a file, or a folder holding anything but an earlier export (a run's folder
    with train.py's config.json, say), whose files the export would overwrite."""
    if os.path.exists(out_dir) and not os.path.isdir(out_dir):
        raise InputError(f"--out {out_dir} is a file; give a folder to write the export into")
    if not os.path.isdir(out_dir):
        return
    foreign = sorted(set(os.listdir(out_dir)) - set(EXPORT_FILES))
    config = os.path.join(out_dir, "config.json")
    if not foreign and os.path.exists(config):
        try:
            with open(config) as f:
                if json.load(f).get("architectures") not in [[name] for name in HF_ARCHITECTURES.values()]:
                    foreign = ["config.json"]
        except (ValueError, AttributeError):  # not JSON, or not an object
            foreign = ["config.json"]
    if foreign:
        raise InputError(f"--out {out_dir} holds files that are not an earlier export ({', '.join(foreign[:5])}); "
                         "give a new or empty folder so that nothing in it is overwritten")


def export(checkpoint: str, out_dir: str) -> str:
    """Write the Hugging Face folder for checkpoint into out_dir; the Hugging Face architecture written."""
    check_out_dir(out_dir)
    model, tokenizer = load_model(checkpoint, "cpu")
    check_tokenizer(tokenizer, model.config.vocab_size, checkpoint)  # before anything is written
    config = hf_config(model.config)
    try:
        os.makedirs(out_dir, exist_ok=True)
        with open(os.path.join(out_dir, "config.json"), "w") as f:
            json.dump(config, f, indent=2)
        save_file(hf_state_dict(model), os.path.join(out_dir, "model.safetensors"), metadata={"format": "pt"})
        write_tokenizer(out_dir, model.config.block_size)
    except OSError as e:
        raise InputError(f"cannot write the export to {out_dir} ({e.strerror or e}); give a writable --out") from e
    return config["architectures"][0]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Export a checkpoint as a Hugging Face GPT-2 or Llama folder.")
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--out", required=True, help="output folder")
    args = parser.parse_args(argv)
    with exit_on_input_error():
        architecture = export(args.checkpoint, args.out)
    print(f"wrote {architecture} folder {args.out}")


if __name__ == "__main__":
    main()
