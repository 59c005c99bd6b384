"""
The quickstart corpus: the Python standard library's own source files, which
every Python installation has (about 5M GPT-2 tokens), as token shards
in data/stdlib/. No download beyond the GPT-2 BPE itself. With --tokenizer bytes,
the same files as raw UTF-8 bytes (about 11M tokens of a 257-symbol vocabulary) in
data/stdlib_bytes/: the CPU mini reproduction's corpus.

    python -m data.quickstart [--tokenizer gpt2|bytes] [--out data/stdlib]

Each file is one document, preceded by <|endoftext|> (the project's delimiter
convention). Every 50th file (in sorted order) goes to the val split.
"""

if not __package__:  # run as a file: the repository's modules (model, data, ...) are not importable
    raise SystemExit("data/quickstart.py is a module of the data package: run it from the repository root as\n"
                     "    python -m data.quickstart ...")

import argparse
import os
import sysconfig

import numpy as np

from data.prepare import tokenize_in_order
from data.shards import write_shard
from config import TOKENIZERS
from errors import InputError, exit_on_input_error

SKIPPED_DIRS = {"test", "tests", "site-packages", "idlelib", "lib2to3", "turtledemo", "__pycache__"}
VAL_EVERY = 50


def stdlib_files() -> list[str]:
    """The standard library's .py files in a fixed order, test suites left out."""
    root = sysconfig.get_paths()["stdlib"]
    files = []
    for folder, dirs, names in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in SKIPPED_DIRS)
        files += [os.path.join(folder, n) for n in sorted(names) if n.endswith(".py")]
    return files


def prepare(out_dir: str, tokenizer: str = "gpt2") -> None:
    try:  # first: a bad --out fails before the tokenising
        os.makedirs(out_dir, exist_ok=True)
    except OSError as e:
        raise InputError(f"cannot create the folder {out_dir} ({e.strerror}); give a writable folder with --out") from e
    files = stdlib_files()
    texts = []
    for path in files:
        with open(path, encoding="utf-8", errors="replace") as f:
            texts.append(f.read())
    (docs,) = tokenize_in_order(iter([texts]), workers=1, tokenizer=tokenizer)  # each preceded by <|endoftext|>
    for split, name in (("val", "stdlib_val_000000.bin"), ("train", "stdlib_train_000001.bin")):
        chosen = [d for i, d in enumerate(docs) if (i % VAL_EVERY == 0) == (split == "val")]
        tokens = np.concatenate(chosen)
        write_shard(os.path.join(out_dir, name), tokens)
        print(f"{split}: {len(chosen)} files, {len(tokens):,} tokens -> {os.path.join(out_dir, name)}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="python -m data.quickstart",
                                     description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokenizer", default="gpt2", choices=TOKENIZERS,
                        help="gpt2, or bytes (the CPU mini reproduction's corpus, data/stdlib_bytes/)")
    parser.add_argument("--out", help="default: data/stdlib (gpt2) or data/stdlib_bytes (bytes)")
    args = parser.parse_args()
    folder = "stdlib" if args.tokenizer == "gpt2" else f"stdlib_{args.tokenizer}"
    with exit_on_input_error():
        prepare(args.out or os.path.join(os.path.dirname(os.path.abspath(__file__)), folder), args.tokenizer)
