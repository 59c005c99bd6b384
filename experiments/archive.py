"""
A folder of runs as the archive results/ commits: each finished run's config.json and metrics.jsonl (and a diverged
run's, with its diverged.txt), the folder's own files (its tables, start.json, tuned.json; no checkpoints, no logs)
and its links (tuned/ ...), in a tar.xz whose paths start at the folder's name, so that

    python -m experiments.archive out/mini_tune results/tune/runs.tar.xz
    mkdir -p out && tar xJf results/tune/runs.tar.xz -C out

puts them back where experiments.tune, .sweep and .budget_ladder read them: finished runs read, the others started
again. A run stopped midway is left out (its checkpoints are not kept). The archive is written beside itself and
moved into place, so a failure leaves the one before it whole.
"""

from __future__ import annotations

if not __package__:
    raise SystemExit("experiments/archive.py is a module of the experiments package: "
                     "run python -m experiments.archive from the repository root")

import argparse
import os
import tarfile

from errors import InputError, exit_on_input_error
from experiments.sweep import DIVERGED, finished_run
from runlog import LOCK

RUN_FILES = ("config.json", "metrics.jsonl", DIVERGED)
# What makes a folder a run's, even one only starting (train.py takes its lock and the sweep opens its log before
# the run writes config.json and metrics.jsonl)
RUN_MARKERS = (*RUN_FILES, LOCK, "train.log")
LEFT_OUT = (".pt", ".log", ".tmp", ".lock")  # checkpoints, logs, half-written files, locks


def members(folder: str) -> list[str]:
    """The archive's paths, relative to the folder's parent, sorted."""
    out = []
    for path, folders, files in os.walk(folder):  # (links to folders are listed in folders, not followed)
        if any(f in files for f in RUN_MARKERS):  # a run: kept whole if it ended, left out if it has not
            if DIVERGED in files or finished_run(path):
                out += [os.path.join(path, f) for f in RUN_FILES if f in files]
            folders.clear()  # (its checkpoints: ckpt_<step>/ folders and their links)
            continue
        folders[:] = [f for f in folders if not f.startswith("ckpt")]
        out += [os.path.join(path, f) for f in folders if os.path.islink(os.path.join(path, f))]
        out += [os.path.join(path, f) for f in files if not f.endswith(LEFT_OUT)]
    parent = os.path.dirname(os.path.abspath(folder))
    return sorted(os.path.relpath(os.path.abspath(m), parent) for m in out)


def write_archive(folder: str, archive: str) -> list[str]:
    """folder's runs and files (members) into archive (a .tar.xz); the members written."""
    if not os.path.isdir(folder):
        raise InputError(f"{folder} is not a folder of runs: give the folder under out/ (e.g. out/mini_tune)")
    if not archive.endswith(".tar.xz"):
        raise InputError(f"{archive}: the archive's name must end in .tar.xz")
    names = members(folder)
    parent = os.path.dirname(os.path.abspath(folder))
    partial = archive + ".tmp"
    try:
        os.makedirs(os.path.dirname(os.path.abspath(archive)), exist_ok=True)
        with tarfile.open(partial, "w:xz") as tar:
            for name in names:
                tar.add(os.path.join(parent, name), arcname=name, recursive=False)
        os.replace(partial, archive)
    except OSError as e:
        if os.path.isfile(partial):
            os.remove(partial)
        raise InputError(f"could not write {archive} ({e.strerror or e}); the archive there before, if any, is "
                         "unchanged") from None
    return names


def main(argv: list[str] | None = None) -> list[str]:
    parser = argparse.ArgumentParser(prog="python -m experiments.archive", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("folder", help="the folder of runs, e.g. out/mini_tune")
    parser.add_argument("archive", help="the .tar.xz to write, e.g. results/tune/runs.tar.xz")
    args = parser.parse_args(argv)
    with exit_on_input_error():
        names = write_archive(args.folder, args.archive)
    runs = sum(name.endswith("metrics.jsonl") for name in names)
    print(f"{args.archive}: {runs} runs, {len(names)} files and links, {os.path.getsize(args.archive)} bytes")
    return names


if __name__ == "__main__":
    main()
