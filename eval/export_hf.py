"""
Export a checkpoint as a Hugging Face folder: a GPT2LMHeadModel for a GPT-2 preset, a LlamaForCausalLM for a
Llama preset:

    python -m eval.export_hf --checkpoint out/run/ckpt.pt --out hf/

writes config.json, model.safetensors and the GPT-2 tokenizer (vocab.json,
merges.txt, tokenizer.json, ...) rebuilt from tiktoken's ranks, so that
transformers.AutoModelForCausalLM / AutoTokenizer and `lm_eval --model hf
--model_args pretrained=hf/` load it.

The mapping of configurations and tensors (and its inverse, --init_from=hf: in train.py) is huggingface.py's;
its docstring says how each architecture maps. What the export adds:
- vocab_size stays 50304, the padded size we trained: the tokenizer has 50257
  tokens and never produces the 47 extra ids, so logits over real tokens are
  unchanged, and the softmax keeps the same (padded) normaliser as in training
  and in our evaluators.
- Anything Hugging Face's config cannot express makes the export fail rather than write a
  model that computes something else (huggingface.check_expressible).
- Only checkpoints trained on GPT-2 tokens are exported: the folder's tokenizer is
  GPT-2's, which would feed a byte-tokenizer model ids it never saw (see check_tokenizer).
"""

if not __package__:  # run as a file: the repository's modules (model, data, ...) are not importable
    raise SystemExit("eval/export_hf.py is a module of the eval package: run it from the repository root as\n"
                     "    python -m eval.export_hf ...")

import argparse
import json
import os

from safetensors.torch import save_file

from data.tokenizer import EOT_TOKEN, get_encoding
from checkpoint import load_model
from eval.scoring import model_encoding
from errors import InputError, exit_on_input_error
from huggingface import HF_ARCHITECTURES, hf_config, hf_state_dict  # noqa: F401  (HF_ARCHITECTURES: the tests')

EOT_STRING = "<|endoftext|>"
# What an export writes: an --out folder holding anything else is not overwritten.
EXPORT_FILES = ("config.json", "model.safetensors", "vocab.json", "merges.txt", "tokenizer.json",
                "tokenizer_config.json", "special_tokens_map.json")


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


def current_umask() -> int:
    """The process's file-creation mask (read by setting it, then set back)."""
    mask = os.umask(0)
    os.umask(mask)
    return mask


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
        weights = os.path.join(out_dir, "model.safetensors")
        save_file(hf_state_dict(model), weights, metadata={"format": "pt"})
        os.chmod(weights, 0o666 & ~current_umask())  # (safetensors creates it 0600: readable as the folder's other files)
        write_tokenizer(out_dir, model.config.block_size)
    except OSError as e:
        raise InputError(f"cannot write the export to {out_dir} ({e.strerror or e}); give a writable --out") from e
    return config["architectures"][0]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m eval.export_hf",
                                     description="Export a checkpoint as a Hugging Face GPT-2 or Llama folder.")
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--out", required=True, help="output folder")
    args = parser.parse_args(argv)
    with exit_on_input_error():
        architecture = export(args.checkpoint, args.out)
    print(f"wrote {architecture} folder {args.out}")


if __name__ == "__main__":
    main()
