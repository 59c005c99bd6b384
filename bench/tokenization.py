"""
Tokenisation throughput of data/prepare.py against nanoGPT's approach, on one corpus, in one run.

    python -m bench.tokenization [--mb 30] [--parquet 'fineweb/*.parquet']

The corpus is a parquet file with a text column: by default the standard library's
source files (the quickstart corpus) cut into documents of web-page length and
repeated up to --mb megabytes, or your own parquet files. Measured, in tokens/s:
  - nanoGPT's data/openwebtext/prepare.py: enc.encode_ordinary per document inside
    datasets.map (num_proc=1 and all cores). Only its map is timed, not its writing.
  - data/prepare.py end to end (read, tokenise, write shards, checksum), 1 worker and
    all cores.
Each is run --repeat times and the best kept. Both produce the same token count
(checked), so the ratios compare equal work. For the 1-process runs it also prints
tokens per CPU-second, which other load on a shared machine disturbs far less.
"""

if not __package__:  # run as a file: the repository's modules (model, data, ...) are not importable
    raise SystemExit("bench/tokenization.py is a module of the bench package: run it from the repository root as\n"
                     "    python -m bench.tokenization ...")

import argparse
import contextlib
import os
import tempfile
import time

import datasets
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from bench import print_header
from data import prepare
from data.quickstart import stdlib_files
from data.tokenizer import get_encoding


def write_stdlib_corpus(path: str, megabytes: float, document_chars: int) -> None:
    """The stdlib's source files cut at line ends into documents of about document_chars
    characters, repeated up to `megabytes` of text."""
    documents = []
    for file in stdlib_files():
        with open(file, encoding="utf-8", errors="replace") as f:
            text = f.read()
        while text:
            cut = text.find("\n", document_chars) + 1 or len(text)
            documents.append(text[:cut])
            text = text[cut:]
    corpus, size = [], 0
    while size < megabytes * 1e6:
        corpus += documents
        size += sum(map(len, documents))
    pq.write_table(pa.table({"text": corpus}), path)


class Timer:
    """Wall-clock and this process's CPU seconds. CPU time is all of the work only when the
    work runs in this process (1 process/worker); on a shared machine it is the steadier measure."""

    def __enter__(self):
        self.wall, self.cpu = time.perf_counter(), time.process_time()
        return self

    def __exit__(self, *exc):
        self.wall, self.cpu = time.perf_counter() - self.wall, time.process_time() - self.cpu


def run_nanogpt_map(files: list[str], num_proc: int, cache_dir: str) -> tuple[int, Timer]:
    """nanoGPT's tokenisation, encode_ordinary per document in datasets.map: (tokens, timer)."""
    enc = get_encoding()
    dataset = datasets.load_dataset("parquet", data_files=files, split="train", cache_dir=cache_dir)

    def process(example):
        ids = enc.encode_ordinary(example["text"])
        ids.append(enc.eot_token)
        return {"ids": ids, "len": len(ids)}

    with Timer() as timer:
        tokenized = dataset.map(process, remove_columns=["text"], num_proc=num_proc if num_proc > 1 else None,
                                load_from_cache_file=False)
    return sum(tokenized["len"]), timer


def run_prepare(files: list[str], workers: int, out_dir: str) -> tuple[int, Timer]:
    """data/prepare.py end to end on the same files: (tokens, timer)."""
    source = prepare.Source("bench", None, None, tuple(files), "text", prepare.HeldOutFraction(0.0005, seed=2357))
    with open(os.devnull, "w") as quiet, contextlib.redirect_stdout(quiet), contextlib.redirect_stderr(quiet):
        with Timer() as timer:
            manifest = prepare.prepare(source, out_dir, workers=workers)
    return manifest["tokens"], timer


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.tokenization",
                                     description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mb", type=float, default=30, help="size of the stdlib corpus, in MB of text")
    parser.add_argument("--document-chars", type=int, default=4700,
                        help="stdlib corpus document length (OpenWebText's mean is about 4.7 KB)")
    parser.add_argument("--parquet", nargs="+", help="your own parquet files (a text column) instead")
    parser.add_argument("--repeat", type=int, default=2, help="runs of each measurement; the best counts")
    args = parser.parse_args()
    print_header()
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    datasets.disable_progress_bars()
    with tempfile.TemporaryDirectory() as tmp:
        if args.parquet:
            files = list(prepare.local_files(args.parquet))
        else:
            files = [os.path.join(tmp, "stdlib.parquet")]
            write_stdlib_corpus(files[0], args.mb, args.document_chars)
        texts = [pq.read_table(f, columns=["text"])["text"] for f in files]
        megabytes = sum(pc.sum(pc.binary_length(t)).as_py() for t in texts) / 1e6
        measurements = {
            "nanoGPT map, 1 process": lambda run: run_nanogpt_map(files, 1, os.path.join(tmp, "cache")),
            "prepare.py, 1 worker": lambda run: run_prepare(files, 1, os.path.join(tmp, f"out1_{run}")),
            f"nanoGPT map, {cores} processes": lambda run: run_nanogpt_map(files, cores, os.path.join(tmp, "cache")),
            f"prepare.py, {cores} workers": lambda run: run_prepare(files, cores, os.path.join(tmp, f"outN_{run}")),
        }
        # Best of --repeat runs: the first pays one-time costs (imports, process start) and a shared
        # machine adds noise; a long preparation runs at the warm rate.
        wall, cpu, token_counts = {}, {}, set()
        for label, measure in measurements.items():
            runs = [measure(run) for run in range(args.repeat)]
            token_counts |= {tokens for tokens, _ in runs}
            wall[label] = max(tokens / timer.wall for tokens, timer in runs)
            cpu[label] = max(tokens / timer.cpu for tokens, timer in runs)
    assert len(token_counts) == 1, f"different token counts {token_counts}: not the same work"

    print(f"\ncorpus: {megabytes:.1f} MB of text, {token_counts.pop():,} tokens; {cores} cores")
    print(f"  {'':<28} {'tokens/s':>9}   tokens per CPU-second")
    for label in measurements:
        per_cpu = f"{cpu[label] / 1e6:6.2f}M" if label.endswith(("1 process", "1 worker")) else "     -"
        print(f"  {label:<28} {wall[label] / 1e6:8.2f}M   {per_cpu}")
    base_1, ours_1, base_n, ours_n = measurements
    print(f"prepare.py vs nanoGPT, per core (1 process each): {wall[ours_1] / wall[base_1]:.2f}x by the clock, "
          f"{cpu[ours_1] / cpu[base_1]:.2f}x by CPU time")
    print(f"prepare.py vs nanoGPT, all {cores} cores each: {wall[ours_n] / wall[base_n]:.2f}x")
    print(f"prepare.py scaling, {cores} workers vs 1: {wall[ours_n] / wall[ours_1]:.2f}x "
          f"({wall[ours_n] / wall[ours_1] / cores:.0%} of linear)")


if __name__ == "__main__":
    main()
