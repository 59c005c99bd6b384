"""
Sample from a trained checkpoint, as nanoGPT's sample.py:

    python sample.py --checkpoint out/run/ckpt.pt --prompt "The meaning of life is" \
        --num_samples 3 --max_new_tokens 100 --temperature 0.8 --top_k 200 --seed 1337

--prompt FILE:path reads the prompt from a file; an empty prompt starts from
<|endoftext|>, the document boundary the model saw in training.
"""

import argparse

import torch

from checkpoint import load_model
from eval.scoring import model_encoding
from model import GPT
from errors import InputError, at_least, exit_on_input_error
from runtime import device_arg


def read_prompt(prompt: str) -> str:
    """The prompt itself, or the contents of the file after a FILE: prefix."""
    if not prompt.startswith("FILE:"):
        return prompt
    path = prompt[len("FILE:") :]
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except OSError as e:
        raise InputError(f"cannot read the prompt file {path} ({e.strerror}); check the path after FILE:") from None
    except UnicodeDecodeError as e:
        raise InputError(f"the prompt file {path} is not UTF-8 text ({e.reason} at byte {e.start})") from None


def generate_samples(
    model: GPT, prompt: str, num_samples: int, max_new_tokens: int, temperature: float, top_k: int | None,
    seed: int, device: str, tokenizer: str = "gpt2",
) -> list[str]:
    """num_samples continuations of prompt (each including the prompt), reproducible by seed."""
    enc = model_encoding(tokenizer, model.config.vocab_size, "the checkpoint's model")
    start = enc.encode(prompt, allowed_special="all") or [enc.eot_token]
    idx = torch.tensor([start] * num_samples, dtype=torch.long, device=device)
    generator = torch.Generator(device=device).manual_seed(seed)
    out = model.generate(idx, max_new_tokens, temperature=temperature, top_k=top_k, generator=generator)
    # The ids padding the vocabulary to 50304 are no tokens; only an untrained model samples them.
    return [enc.decode([t for t in row if t < enc.n_vocab]) for row in out.tolist()]


def main(argv: list[str] | None = None) -> list[str]:
    parser = argparse.ArgumentParser(prog="python sample.py", description="Sample text from a checkpoint.")
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--prompt", default="", help="text, or FILE:path to read it from a file")
    parser.add_argument("--num_samples", type=at_least(1), default=3)
    parser.add_argument("--max_new_tokens", type=at_least(0), default=200)
    parser.add_argument("--temperature", type=at_least(0.0, float), default=0.8,
                        help="0 is greedy; < 1 sharper, > 1 more random")
    parser.add_argument("--top_k", type=at_least(0), default=200, help="sample among the k likeliest tokens (0: all)")
    parser.add_argument("--seed", type=int, default=1337)
    parser.add_argument("--device", type=device_arg, default="cuda" if torch.cuda.is_available() else "cpu")
    args = parser.parse_args(argv)

    with exit_on_input_error():
        prompt = read_prompt(args.prompt)
        model, tokenizer = load_model(args.checkpoint, args.device)
        samples = generate_samples(model, prompt, args.num_samples, args.max_new_tokens, args.temperature,
                                   args.top_k or None, args.seed, args.device, tokenizer)
    for sample in samples:
        print(sample)
        print("---------------")
    return samples


if __name__ == "__main__":
    main()
