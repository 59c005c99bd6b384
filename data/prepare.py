"""
Token shards for OpenWebText, FineWeb-Edu and local text files, and their verification.

    python -m data.prepare openwebtext
    python -m data.prepare fineweb-edu                           # sample-100BT; --subset sample-10BT, ...
    python -m data.prepare fineweb                               # FineWeb sample-100BT (the Llama benchmark's)
    python -m data.prepare text --files 'corpus/*.jsonl'         # .txt, .json(l)[.gz], .parquet
    python -m data.prepare verify data/fineweb-edu100B

Conventions (the loader, the evals and the quickstart share them):
- Delimiter: every document is PRECEDED by <|endoftext|> (50256), as in llm.c and
  modded-nanogpt. A split's token stream is EOT doc EOT doc ..., so decoding its
  shards in order gives back exactly '<|endoftext|>' + document, for each document.
  Text is encoded as ordinary text: a literal '<|endoftext|>' inside a document is
  not the delimiter.
- Validation split, reproducible:
  * openwebtext (and text): a held-out fraction, 0.0005 with seed 2357 as nanoGPT
    (text: --val-fraction, default 0.01). nanoGPT shuffles the whole dataset to choose
    it, which a stream cannot do; here a document is val when a hash of its tokens,
    keyed by the seed, falls below the fraction. So the choice is the same whatever
    the order or the worker count, and duplicate documents land on the same side.
  * fineweb-edu: the stream's leading documents, as many as fit whole into one
    shard (shard_size tokens), as llm.c and modded-nanogpt take the first shard;
    ending at a document boundary so that no document is split between val and train.
- Shards: each split's stream is cut into shards of exactly shard_size tokens (the
  last holds the rest): documents may span shards, tokens never do. Files are
  <name>_val_000000.bin, <name>_train_000001.bin, ... (per split, val from 0 and
  train from 1, as llm.c names them) in data/<name>/, in the format of data/shards.py.
- Sources are streamed with Hugging Face `datasets` (Skylion007/openwebtext;
  HuggingFaceFW/fineweb-edu with the subset as its config name); --files reads local
  files through the same datasets loading path instead (a local copy, or any corpus).

Speed and safety: documents are tokenised in batches by a pool of processes
(tiktoken in each) while this process, the single writer, consumes the results in
stream order: the bytes do not depend on the worker count. After each batch that
completed a shard, manifest.json records where the stream stands (documents read,
and each split's tokens not yet in a shard, saved to a .pending file); a rerun after
a crash or Ctrl-C continues from there and writes the same bytes as an uninterrupted
run. A resume re-reads, but does not re-tokenise, the documents already consumed.
From Python: prepare(Source(...), out_dir) (under `if __name__ == "__main__":` in a
script when workers > 1, as multiprocessing requires).
"""

if not __package__:  # run as a file: the repository's modules (model, data, ...) are not importable
    raise SystemExit("data/prepare.py is a module of the data package: run it from the repository root as\n"
                     "    python -m data.prepare ...")

import argparse
import codecs
import collections
import functools
import glob
import gzip
import hashlib
import json
import multiprocessing
import os
import signal
import sys
import time
from dataclasses import asdict, dataclass
from typing import Iterator

import numpy as np
from tqdm import tqdm

# `datasets` is imported where sources are read, so that tokenising local text (data/quickstart.py)
# does not need it.

from data.shards import ShardError, open_shard, write_shard
from config import TOKENIZERS
from data.tokenizer import get_encoding
from files import atomic_write, file_sha256

DEFAULT_SHARD_SIZE = 100_000_000  # tokens; 200 MB per shard
VOCAB_SIZE = 50257  # GPT-2: every token id is below this
TOKENIZER = "tiktoken r50k_base (GPT-2 BPE)"
DELIMITER = "<|endoftext|> (50256) before every document"
SPLITS = ("val", "train")
MANIFEST = "manifest.json"
# FineWeb-Edu subsets and their folders in data/ (the official MARS runs read fineweb-edu100B)
FINEWEB_FOLDERS = {"sample-10BT": "fineweb-edu10B", "sample-100BT": "fineweb-edu100B",
                   "sample-350BT": "fineweb-edu350B", "default": "fineweb-edu"}
# FineWeb's (Semenov et al.'s benchmark reads sample-100BT, 0.0001 of it held out: llm-optimizer-benchmark
# src/data/fineweb.py)
FINEWEB_PLAIN_FOLDERS = {"sample-10BT": "fineweb10B", "sample-100BT": "fineweb100B", "sample-350BT": "fineweb350B"}


class PrepareError(Exception):
    """A problem with the input or the output folder; the message says what to do."""


# -----------------------------------------------------------------------------
# Validation split rules. Each decides a document's split from its tokens (and,
# for the leading-documents rule, from what the splits hold so far).

@dataclass(frozen=True)
class HeldOutFraction:
    """val = the documents whose seeded hash falls below `fraction` (openwebtext, text)."""
    fraction: float
    seed: int

    def split_of(self, tokens: np.ndarray, writers: dict) -> str:
        digest = hashlib.blake2b(tokens.tobytes(), digest_size=8, key=self.seed.to_bytes(8, "little")).digest()
        return "val" if int.from_bytes(digest, "little") < self.fraction * 2**64 else "train"


@dataclass(frozen=True)
class LeadingDocuments:
    """val = the leading documents, as many as fit whole into `tokens` tokens (fineweb-edu)."""
    tokens: int

    def split_of(self, tokens: np.ndarray, writers: dict) -> str:
        val, train = writers["val"], writers["train"]
        if train.tokens == 0 and val.tokens + len(tokens) <= self.tokens:
            return "val"
        val.close()  # val is complete: write its shard now rather than carry it in every checkpoint
        return "train"


# -----------------------------------------------------------------------------
# Sources: where documents come from, in a fixed order.

@dataclass(frozen=True)
class Source:
    name: str  # output naming: data/<name>/<name>_train_000001.bin
    dataset: str | None  # Hugging Face dataset id, streamed from the hub when `files` is empty
    subset: str | None  # its config name
    files: tuple[str, ...]  # local files read instead, in this order
    text_column: str
    val_rule: HeldOutFraction | LeadingDocuments
    tokenizer: str = "gpt2"  # data/tokenizer.py: gpt2 | bytes

    def settings(self) -> dict:
        """What determines the output bytes; a resume must find the same."""
        return dict(
            name=self.name, dataset=self.dataset, subset=self.subset, text_column=self.text_column,
            files=[[path, os.path.getsize(path)] for path in self.files],
            val_rule={"rule": type(self.val_rule).__name__, **asdict(self.val_rule)},
        ) | ({"tokenizer": self.tokenizer} if self.tokenizer != "gpt2" else {})


def local_files(patterns: list[str]) -> tuple[str, ...]:
    """The files matching the glob patterns, sorted, each checked readable."""
    files = []
    for pattern in patterns:
        matches = sorted(glob.glob(os.path.expanduser(pattern), recursive=True))
        if not matches:
            raise PrepareError(f"no file matches '{pattern}'; check the path (quote globs: --files 'corpus/*.jsonl')")
        matches = [os.path.abspath(m) for m in matches if os.path.isfile(m)]
        if not matches:
            raise PrepareError(f"'{pattern}' matches only folders; give the files in them ('{pattern}/*.jsonl')")
        files += matches
    for path in files:
        try:
            with open(path, "rb") as f:
                f.read(1)
        except OSError as e:
            raise PrepareError(f"cannot read {path} ({e.strerror}); fix its permissions or leave it out") from e
    return tuple(dict.fromkeys(files))  # a file matched by two patterns is read once


def load_local_file(path: str):
    """A streamed datasets.IterableDataset over one local file, the builder chosen by its extension.
    A text file that is not valid UTF-8 is read with each invalid byte replaced by U+FFFD, with a
    warning naming it: one stray byte (a Latin-1 character, a cut-off file) costs that character, not
    the file or the run (and the replacement is the same on every run, so a resume writes the same bytes)."""
    import datasets
    name = path.lower().removesuffix(".gz").removesuffix(".zst")
    text_file = name.endswith((".json", ".jsonl", ".txt"))
    bad_byte = first_invalid_utf8(path) if text_file and not path.lower().endswith(".zst") else None
    # (datasets' json builder applies encoding_errors only to an encoding not spelled "utf-8")
    decoding = {} if bad_byte is None else dict(encoding="utf_8", encoding_errors="replace")
    if bad_byte is not None:
        tqdm.write(f"warning: {path} is not valid UTF-8 (byte {bad_byte:,}"
                   f"{' of its decompressed text' if path.lower().endswith('.gz') else ''} is the first bad one); "
                   "reading it with each invalid byte replaced by U+FFFD", file=sys.stderr)
    if name.endswith(".parquet"):
        return datasets.load_dataset("parquet", data_files=[path], split="train", streaming=True)
    if name.endswith((".json", ".jsonl")):
        return datasets.load_dataset("json", data_files=[path], split="train", streaming=True, **decoding)
    if name.endswith(".txt"):  # a whole .txt file is one document
        return datasets.load_dataset("text", data_files=[path], split="train", streaming=True, sample_by="document",
                                     **decoding)
    raise PrepareError(f"{path}: unsupported file type; use .txt, .json, .jsonl (optionally .gz) or .parquet")


def first_invalid_utf8(path: str) -> int | None:
    """The offset of the first byte of a (.gz) text file that is not UTF-8 (None: it all is, or the file
    cannot be read, which reading it through datasets then reports)."""
    decoder = codecs.getincrementaldecoder("utf-8")()
    offset = 0  # of the chunk in the file
    try:
        with (gzip.open if path.lower().endswith(".gz") else open)(path, "rb") as f:
            while chunk := f.read(1 << 24):
                pending = len(decoder.getstate()[0])  # the bytes of a character cut by the last chunk's end
                try:
                    decoder.decode(chunk)
                except UnicodeDecodeError as e:
                    return offset - pending + e.start
                offset += len(chunk)
            decoder.decode(b"", final=True)
    except UnicodeDecodeError:  # the file ends inside a character
        return offset - len(decoder.getstate()[0])
    except (OSError, EOFError):
        return None
    return None


def load_hub_dataset(source: Source):
    """The source's train split streamed from the Hugging Face hub, the subset as its config name."""
    import datasets
    return datasets.load_dataset(source.dataset, name=source.subset, split="train", streaming=True)


def document_batches(source: Source, skip: int, batch_size: int) -> Iterator[list[str]]:
    """The source's documents in stream order, in batches, after the first `skip` documents."""
    import datasets
    datasets.disable_progress_bars()
    datasets.logging.set_verbosity(datasets.logging.CRITICAL)  # its errors come back as the PrepareError below
    if source.files:
        # (An empty file holds no documents; datasets cannot even infer its schema.)
        parts = [(path, functools.partial(load_local_file, path)) for path in source.files if os.path.getsize(path)]
    else:
        where = source.dataset + (f" ({source.subset})" if source.subset else "")
        parts = [(where, functools.partial(load_hub_dataset, source))]
    for where, load in parts:
        read = 0  # documents of this part so far
        try:
            dataset = load()
            if dataset.column_names is not None and source.text_column not in dataset.column_names:
                raise PrepareError(
                    f"{where} has no '{source.text_column}' column (it has {', '.join(dataset.column_names)}); "
                    "pass --text-column NAME to read another"
                )
            for batch in dataset.select_columns([source.text_column]).iter(batch_size=batch_size):
                texts = batch[source.text_column]
                check_texts(texts, where, source.text_column, read)
                read += len(texts)
                if skip >= len(texts):  # already in the shards: resuming
                    skip -= len(texts)
                    continue
                yield texts[skip:]
                skip = 0
        except PrepareError:
            raise
        except Exception as e:
            hint = "" if source.files else "; offline, or on a cluster without the hub, pass --files with a local copy"
            line = first_bad_json_line(where) if source.files else None
            if line:
                raise PrepareError(f"cannot read {where}: line {line} is not JSON; fix or remove that line") from e
            raise PrepareError(f"cannot read {where}: {type(e).__name__}: {e}{hint}") from e


def check_texts(texts: list, where: str, column: str, before: int) -> None:
    """Every value a text (a null or a number in the column would fail in the tokeniser, unnamed)."""
    for i, text in enumerate(texts):
        if not isinstance(text, str):
            raise PrepareError(f"{where}: document {before + i + 1} has {type(text).__name__} "
                               f"{str(text)[:50]!r} in its '{column}' column, not text; fix it or leave the file out")


def first_bad_json_line(path: str) -> int | None:
    """The number of the first line of a .jsonl[.gz] file that is not a JSON object (None: all are, or
    the file is of another kind), to name it where datasets' error does not."""
    if not path.lower().removesuffix(".gz").endswith(".jsonl"):
        return None
    try:
        with (gzip.open if path.lower().endswith(".gz") else open)(path, "rt", encoding="utf-8") as f:
            for number, line in enumerate(f, start=1):
                if line.strip():
                    try:
                        if not isinstance(json.loads(line), dict):
                            return number
                    except ValueError:
                        return number
    except (OSError, UnicodeDecodeError, EOFError):
        return None
    return None


# -----------------------------------------------------------------------------
# Tokenising, in worker processes; results come back in submission order.

_encoding = None


def _load_encoding(tokenizer: str) -> None:
    global _encoding
    _encoding = get_encoding(tokenizer)


def _init_worker(tokenizer: str) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the main process's to handle: it ends the pool
    _load_encoding(tokenizer)


def encode_documents(texts: list[str]) -> list[np.ndarray]:
    """Each document's tokens as uint16, preceded by <|endoftext|>."""
    out = []
    for text in texts:
        try:
            # encode_to_numpy fills one buffer in Rust, no Python int per token as encode_ordinary's
            # list has; with no special tokens allowed it is encode_ordinary, token for token.
            tokens = _encoding.encode_to_numpy(text, disallowed_special=())
        except UnicodeEncodeError:  # lone surrogates: replaced, as tiktoken's encode_ordinary does
            text = text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
            tokens = _encoding.encode_to_numpy(text, disallowed_special=())
        doc = np.empty(len(tokens) + 1, dtype=np.uint16)
        doc[0] = _encoding.eot_token
        doc[1:] = tokens
        out.append(doc)
    return out


def tokenize_in_order(batches: Iterator[list[str]], workers: int, tokenizer: str = "gpt2"
                      ) -> Iterator[list[np.ndarray]]:
    """encode_documents over the batches, with `workers` processes, results in input order."""
    if workers == 1:
        _load_encoding(tokenizer)
        yield from map(encode_documents, batches)
        return
    # forkserver: workers fork from a clean server process, not from this one with datasets' threads
    # running. Preloading this module there spares each worker seconds of imports.
    context = multiprocessing.get_context("forkserver" if os.name == "posix" else "spawn")
    if os.name == "posix":
        context.set_forkserver_preload(["data.prepare"])
    # A bounded window of tasks in flight: Pool.imap would read the whole stream ahead into memory.
    with context.Pool(workers, initializer=_init_worker, initargs=(tokenizer,)) as pool:
        in_flight = collections.deque()
        for batch in batches:
            in_flight.append(pool.apply_async(encode_documents, (batch,)))
            if len(in_flight) >= 4 * workers:
                yield in_flight.popleft().get()
        while in_flight:
            yield in_flight.popleft().get()


# -----------------------------------------------------------------------------
# Writing: one writer per split, fed in stream order.

class SplitWriter:
    """One split's shards, in order, each filled to exactly shard_size tokens."""

    def __init__(self, out_dir: str, name: str, split: str, shard_size: int, state: dict | None):
        self.out_dir, self.name, self.split, self.shard_size = out_dir, name, split, shard_size
        self.first_index = 0 if split == "val" else 1
        state = state or dict(documents=0, tokens=0, shards=[], pending=None)
        self.documents, self.tokens, self.shards = state["documents"], state["tokens"], state["shards"]
        self.pending = state["pending"]  # file holding the buffer at the last checkpoint
        self.buffer = [open_shard(os.path.join(out_dir, self.pending)).copy()] if self.pending else []
        self.buffered = sum(len(b) for b in self.buffer)

    def add(self, doc: np.ndarray) -> None:
        self.buffer.append(doc)
        self.buffered += len(doc)
        self.documents += 1
        self.tokens += len(doc)
        while self.buffered >= self.shard_size:
            self._write_shard(self.shard_size)

    def close(self) -> None:
        """Write what is left as the split's last shard."""
        if self.buffered:
            self._write_shard(self.buffered)

    def _write_shard(self, size: int) -> None:
        tokens = np.concatenate(self.buffer)
        self.buffer = [tokens[size:]] if len(tokens) > size else []
        self.buffered = len(tokens) - size
        file = f"{self.name}_{self.split}_{self.first_index + len(self.shards):06d}.bin"
        write_shard(os.path.join(self.out_dir, file), tokens[:size])
        self.shards.append(dict(file=file, tokens=size, sha256=file_sha256(os.path.join(self.out_dir, file))))

    def save_pending(self, documents_read: int) -> None:
        """Save the buffer for a checkpoint, under a new name (the last checkpoint keeps its own)."""
        self.pending = None
        if self.buffered:
            self.buffer = [np.concatenate(self.buffer)]
            self.pending = f"{self.name}_{self.split}_{documents_read:012d}.pending"
            write_shard(os.path.join(self.out_dir, self.pending), self.buffer[0])

    def state(self) -> dict:
        return dict(documents=self.documents, tokens=self.tokens, shards=self.shards, pending=self.pending)


def read_manifest(out_dir: str) -> dict | None:
    path = os.path.join(out_dir, MANIFEST)
    if not os.path.exists(path):
        return None
    try:
        with open(path) as f:
            manifest = json.load(f)
    except (OSError, ValueError) as e:  # ValueError: not JSON, or not UTF-8
        raise PrepareError(f"{path} is unreadable or corrupt ({e}); delete {out_dir} and prepare it again") from e
    if not isinstance(manifest, dict) or not {"settings", "complete", "splits"} <= manifest.keys():
        raise PrepareError(f"{path} is not a data/prepare.py manifest; give the folder prepare wrote, "
                           "or delete this one and prepare it again")
    return manifest


def write_manifest(out_dir: str, manifest: dict) -> None:
    """Atomically, like the shards: a crash leaves the previous manifest or this one."""
    path = os.path.join(out_dir, MANIFEST)
    with atomic_write(path, "w") as f:
        json.dump(manifest, f, indent=1)


def remove_leftovers(out_dir: str, keep: set[str]) -> None:
    """Pending buffers of older checkpoints and temporary files of interrupted writes."""
    for path in glob.glob(os.path.join(out_dir, "*.pending")) + glob.glob(os.path.join(out_dir, "*.tmp")):
        if os.path.basename(path) not in keep:
            os.remove(path)


# -----------------------------------------------------------------------------

def resume_point(out_dir: str, settings: dict) -> dict | None:
    """The manifest of an unfinished run to continue (None: start afresh), after checking it is safe to."""
    manifest = read_manifest(out_dir)
    if manifest is None and glob.glob(os.path.join(out_dir, "*.bin")):
        raise PrepareError(f"{out_dir} holds token shards but no {MANIFEST}; choose another --out or empty it")
    if manifest is None or not any(state["shards"] for state in manifest["splits"].values()):
        return None  # nothing written yet: start afresh, whatever the settings were
    if manifest["settings"] != settings:
        changed = sorted(k for k in settings if manifest["settings"].get(k) != settings[k])
        raise PrepareError(
            f"{out_dir} was prepared with other settings (different {', '.join(changed)}); "
            "choose another --out, or delete the folder to prepare it again"
        )
    for state in manifest["splits"].values():  # the shards a resume builds on
        for shard in state["shards"]:
            try:
                open_shard(os.path.join(out_dir, shard["file"]))
            except ShardError as e:
                raise PrepareError(f"{e}; a resume cannot rebuild it: delete {out_dir} and prepare again") from e
    return manifest


def write_checkpoint(out_dir: str, settings: dict, documents_read: int, writers: dict) -> None:
    """Record where the stream stands: the pending buffers first, then the manifest naming them."""
    for writer in writers.values():
        writer.save_pending(documents_read)
    write_manifest(out_dir, dict(settings=settings, complete=False, documents_read=documents_read,
                                 splits={split: w.state() for split, w in writers.items()}))
    remove_leftovers(out_dir, keep={w.pending for w in writers.values()})


def prepare(source: Source, out_dir: str, shard_size: int = DEFAULT_SHARD_SIZE,
            workers: int | None = None, batch_size: int = 64) -> dict:
    """Tokenise the source into out_dir's shards (resuming what a previous run started); returns the manifest."""
    if workers is None:  # the cores this process may use (a cluster job may get fewer than the machine has)
        workers = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    settings = dict(source.settings(), tokenizer=TOKENIZER, delimiter=DELIMITER, shard_size=shard_size)
    manifest = resume_point(out_dir, settings)
    if manifest is not None and manifest["complete"]:
        remove_leftovers(out_dir, keep=set())  # in case the finishing run stopped just short of this
        print(f"{out_dir} is already prepared ({manifest['tokens']:,} tokens); nothing to do")
        return manifest
    documents_read = manifest["documents_read"] if manifest else 0
    writers = {split: SplitWriter(out_dir, source.name, split, shard_size, manifest and manifest["splits"][split])
               for split in SPLITS}
    if manifest is None:  # a manifest from the start, so that any shard on disk is ours to resume
        try:
            os.makedirs(out_dir, exist_ok=True)
        except OSError as e:
            raise PrepareError(f"cannot create the output folder {out_dir} ({e.strerror}); give another --out") from e
        for path in glob.glob(os.path.join(out_dir, "*.bin")):  # ours (resume_point checked): never recorded
            os.remove(path)
        write_checkpoint(out_dir, settings, documents_read, writers)
    else:
        print(f"resuming {out_dir} after {documents_read:,} documents")

    tokens_this_run, start = 0, time.time()
    batches = document_batches(source, skip=documents_read, batch_size=batch_size)
    # (closed before an error propagates, so that the error's message starts a line of its own)
    with tqdm(initial=documents_read, unit=" docs", unit_scale=True, desc=source.name) as bar:
        for docs in tokenize_in_order(batches, workers, source.tokenizer):
            shards_before = sum(len(w.shards) for w in writers.values())
            for doc in docs:
                writers[source.val_rule.split_of(doc, writers)].add(doc)
            documents_read += len(docs)
            if sum(len(w.shards) for w in writers.values()) > shards_before:
                write_checkpoint(out_dir, settings, documents_read, writers)
            tokens_this_run += sum(len(d) for d in docs)
            bar.update(len(docs))
            bar.set_postfix(tokens=f"{tokens_this_run:,}", tok_per_s=f"{tokens_this_run / (time.time() - start):,.0f}")
    if documents_read == 0:
        where = ", ".join(source.files) if source.files else source.dataset
        raise PrepareError(f"no documents in {where}: the corpus is empty; check the files or the dataset name")

    for writer in writers.values():
        writer.close()
    manifest = dict(
        settings=settings, complete=True, documents=documents_read, tokens=sum(w.tokens for w in writers.values()),
        splits={split: dict(documents=w.documents, tokens=w.tokens, shards=w.shards) for split, w in writers.items()},
    )
    write_manifest(out_dir, manifest)
    remove_leftovers(out_dir, keep=set())
    for split, writer in writers.items():
        print(f"{split}: {writer.documents:,} documents, {writer.tokens:,} tokens in {len(writer.shards)} shards")
        if writer.documents == 0:
            print(f"warning: the {split} split is empty; training needs both splits "
                  "(a larger corpus, or a larger --val-fraction / --shard-size)", file=sys.stderr)
    return manifest


def check_complete(data_dir: str) -> None:
    """Refuse to train on a folder whose preparation stopped part way (its manifest says incomplete):
    its shards hold only part of the data, perhaps no val split yet. A folder without a manifest
    (shards from elsewhere, or written by hand) is taken as it is."""
    manifest = read_manifest(data_dir)
    if manifest is not None and not manifest["complete"]:
        raise PrepareError(
            f"{data_dir} is only partly prepared: data/prepare.py stopped after {manifest['documents_read']:,} "
            f"documents ({MANIFEST} says complete: false). Run the same python -m data.prepare command again "
            "to finish it (it resumes where it stopped), then train")


def verify(out_dir: str) -> list[str]:
    """Every shard against the manifest: header, size, token range, sha256. Returns the problems found."""
    manifest = read_manifest(out_dir)
    if manifest is None:
        return [f"{os.path.join(out_dir, MANIFEST)}: missing; prepare the data with data/prepare.py"]
    if not manifest["complete"]:
        return [f"{out_dir}: preparation incomplete ({manifest['documents_read']:,} documents so far); "
                "rerun the same prepare command to finish it"]
    problems, listed = [], set()
    for state in manifest["splits"].values():
        for shard in state["shards"]:
            path = os.path.join(out_dir, shard["file"])
            listed.add(shard["file"])
            try:
                tokens = open_shard(path)
            except ShardError as e:
                problems.append(str(e))
                continue
            if len(tokens) != shard["tokens"]:
                problems.append(f"{path}: {len(tokens)} tokens, the manifest says {shard['tokens']}")
            elif len(tokens) and tokens.max() >= VOCAB_SIZE:
                problems.append(f"{path}: token id {tokens.max()} is outside the GPT-2 vocabulary (< {VOCAB_SIZE})")
            elif file_sha256(path) != shard["sha256"]:
                problems.append(f"{path}: sha256 differs from the manifest's; the file is corrupt, prepare it again")
    for path in sorted(glob.glob(os.path.join(out_dir, "*.bin"))):
        if os.path.basename(path) not in listed:
            problems.append(f"{path}: not in the manifest, but the loader would read it; remove it")
    return problems


# -----------------------------------------------------------------------------

def check_settings(args: argparse.Namespace) -> None:
    """Numbers the command line allows but preparing cannot use (a shard size of 0 would never end)."""
    if args.shard_size < 1:
        raise PrepareError(f"--shard-size {args.shard_size}: give a positive number of tokens per shard")
    if args.workers is not None and args.workers < 1:
        raise PrepareError(f"--workers {args.workers}: give at least 1 (or leave it out: one per core)")
    if not 0 <= getattr(args, "val_fraction", 0) <= 1:
        raise PrepareError(f"--val-fraction {args.val_fraction:g}: give a fraction of the documents, 0 to 1")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m data.prepare",
                                     description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--out", help="output folder (default data/<name>)")
    common.add_argument("--shard-size", type=int, default=DEFAULT_SHARD_SIZE, help="tokens per shard")
    common.add_argument("--workers", type=int, help="tokenising processes (default: one per available core)")
    common.add_argument("--text-column", default="text")
    common.add_argument("--tokenizer", default="gpt2", choices=TOKENIZERS,
                        help="gpt2 (the GPT-2 BPE) or bytes (UTF-8 bytes, vocabulary 256 + <|endoftext|> = 256)")
    hub_files = "read a local copy of the dataset (.parquet, .jsonl, ...) instead of streaming it from the hub"
    owt = commands.add_parser("openwebtext", parents=[common], help="Skylion007/openwebtext")
    owt.add_argument("--files", nargs="+", default=[], help=hub_files)
    owt.add_argument("--val-fraction", type=float, default=0.0005)
    fineweb = commands.add_parser("fineweb-edu", parents=[common], help="HuggingFaceFW/fineweb-edu")
    fineweb.add_argument("--subset", default="sample-100BT", choices=list(FINEWEB_FOLDERS),
                         help="the hub config; sample-100BT is the official MARS runs' (data/fineweb-edu100B/)")
    fineweb.add_argument("--files", nargs="+", default=[], help=hub_files)
    plain = commands.add_parser("fineweb", parents=[common], help="HuggingFaceFW/fineweb")
    plain.add_argument("--subset", default="sample-100BT", choices=list(FINEWEB_PLAIN_FOLDERS),
                       help="the hub config; sample-100BT is Semenov et al.'s benchmark's (data/fineweb100B/)")
    plain.add_argument("--files", nargs="+", default=[], help=hub_files)
    plain.add_argument("--val-fraction", type=float, default=0.0001)
    text = commands.add_parser("text", parents=[common], help="local .txt / .jsonl / .parquet files")
    text.add_argument("--files", nargs="+", required=True, help="files or quoted globs")
    text.add_argument("--name", default="text", help="dataset name: data/<name>/<name>_train_000001.bin")
    text.add_argument("--val-fraction", type=float, default=0.01)
    check = commands.add_parser("verify", help="check a prepared folder's shards against its manifest")
    check.add_argument("folder")
    args = parser.parse_args(argv)

    try:
        if args.command == "verify":
            if not os.path.isdir(args.folder):
                raise PrepareError(f"{args.folder} is not a folder; give the one data/prepare.py wrote (data/<name>)")
            problems = verify(args.folder)
            for problem in problems:
                print(problem, file=sys.stderr)
            print(f"{args.folder}: {len(problems)} problem(s)" if problems else f"{args.folder}: all shards OK")
            return 1 if problems else 0
        check_settings(args)
        files = local_files(args.files)
        suffix = "" if args.tokenizer == "gpt2" else f"_{args.tokenizer}"  # data/<name>_bytes/ for raw bytes
        if args.command == "openwebtext":
            source = Source("openwebtext" + suffix, "Skylion007/openwebtext", None, files, args.text_column,
                            HeldOutFraction(args.val_fraction, seed=2357), args.tokenizer)
        elif args.command == "fineweb-edu":
            source = Source(FINEWEB_FOLDERS[args.subset] + suffix, "HuggingFaceFW/fineweb-edu", args.subset, files,
                            args.text_column, LeadingDocuments(tokens=args.shard_size), args.tokenizer)
        elif args.command == "fineweb":
            source = Source(FINEWEB_PLAIN_FOLDERS[args.subset] + suffix, "HuggingFaceFW/fineweb", args.subset, files,
                            args.text_column, HeldOutFraction(args.val_fraction, seed=2357), args.tokenizer)
        else:
            source = Source(args.name + suffix, None, None, files, args.text_column,
                            HeldOutFraction(args.val_fraction, seed=2357), args.tokenizer)
        out = args.out or os.path.join(os.path.dirname(os.path.abspath(__file__)), source.name)
        prepare(source, out, shard_size=args.shard_size, workers=args.workers)
    except (PrepareError, ShardError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("\ninterrupted; run the same command again to resume", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
