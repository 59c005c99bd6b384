"""Bad input to every entry point (train.py, eval/, sample.py, data/, scripts/): a wrong path, a missing or corrupt
file, a wrong name or value, an empty corpus. Each gets a short error naming the input, a non-zero exit
status and no traceback, and leaves what is already on disk as it was.

Each case runs the real entry point in a subprocess; all of them run up front, two at a time (the lm-eval
import and its task index take seconds), and each test reads its case's result."""

import dataclasses
import json
import os
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Callable

import numpy as np
import pytest
import torch

from conftest import PRELOADED_BIN, PYTHON, REPO
from config import TrainConfig
from data.shards import write_shard
from model import GPT, GPTConfig

HELLASWAG_ROW = {"ind": 1, "activity_label": "Baking cookies", "ctx_a": "A chef shows a stack of baking pans.",
                 "ctx_b": "the pans", "endings": ["contain egg yolks.", "are sprinkled with sugar.",
                                                 "are placed in a strainer.", "are loaded into the oven."],
                 "label": 3, "split": "val", "source_id": "activitynet~v_x"}


@dataclasses.dataclass
class Case:
    command: list[str]  # after `python3` (or `bash` for a .sh)
    expect: list[str]  # in stderr: the input named, and the fix where it is the point
    untouched: list[Path] = dataclasses.field(default_factory=list)  # files or folders that must not change
    env: dict[str, str] = dataclasses.field(default_factory=dict)


def write(path: Path, content: str | bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    return path


def jsonl(path: Path, rows: list) -> Path:
    return write(path, "".join(json.dumps(row) + "\n" for row in rows))


def torch_file(path: Path, contents) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save(contents, path)
    return path


def checkpoint(d: Path) -> str:
    """A checkpoint as train.py writes one (the keys checkpoint.load_model reads), of a tiny model."""
    path = d / "run" / "ckpt.pt"
    if not path.exists():
        model = GPT(GPTConfig(block_size=32, n_layer=1, n_head=1, n_embd=8))
        torch_file(path, {"model": model.state_dict(), "model_args": dataclasses.asdict(model.config), "config": {},
                          "step": 0})
    return str(path)


def run_folder(d: Path, config: str | None = None, metrics: list | None = None) -> Path:
    """A train.py run folder (config.json, metrics.jsonl), with the given file contents in place of good ones."""
    info = dict(config=TrainConfig(max_iters=10).to_dict(), num_params=1000, total_iters=10, world_size=1)
    write(d / "config.json", json.dumps(info) if config is None else config)
    good = [{"type": "val", "step": 0, "tokens": 0, "val_loss": 10.0, "time": 1.0}]
    jsonl(d / "metrics.jsonl", good if metrics is None else metrics)
    return d


def run_holding_a_run(d: Path) -> str:
    """A run's folder (d/run, its checkpoint) that also holds a dated run: out/quickstart after a direct run of
    config/quickstart.py (before it wrote out/quickstart/direct) and a run of scripts/quickstart.sh."""
    run = Path(checkpoint(d)).parent
    torch_file(run / "20261129-120000" / "ckpt.pt", torch.load(run / "ckpt.pt", weights_only=False))
    return str(run)


def tiny_shards(d: Path) -> Path:
    """A train and a val token shard, enough for a tiny model to start."""
    d.mkdir(parents=True, exist_ok=True)
    for split in ("train", "val"):
        write_shard(str(d / f"tiny_{split}_000001.bin"), np.arange(1000, dtype=np.uint16) % 97)
    return d


def hellaswag(d: Path, data: Path, *args: str) -> Case:
    return Case(["-m", "eval.hellaswag", "--checkpoint", checkpoint(d), "--data", str(data), *args], [str(data)])


def prepare_text(d: Path, *files: Path, args: tuple[str, ...] = (), expect: list[str] | None = None) -> Case:
    return Case(["-m", "data.prepare", "text", "--files", *map(str, files), "--out", str(d / "shards"),
                 "--workers", "1", *args], expect if expect is not None else [str(files[0])])


# name -> the case, its inputs built under a folder of its own
CASES: dict[str, Callable[[Path], Case]] = {
    # lm-eval's task index takes the longest: first
    "harness_unknown_task": lambda d: Case(
        ["-m", "eval.harness", "--checkpoint", checkpoint(d), "--tasks", "hellaswg"],
        ["'hellaswg'", "close matches: hellaswag"]),
    "harness_missing_checkpoint": lambda d: Case(
        ["-m", "eval.harness", "--checkpoint", str(d / "missing.pt"), "--tasks", "hellaswag"], [str(d / "missing.pt")]),
    "harness_bad_device": lambda d: Case(
        ["-m", "eval.harness", "--checkpoint", checkpoint(d), "--tasks", "hellaswag", "--device", "gpu0"],
        ["--device", "'gpu0'"]),
    "harness_output_in_missing_folder": lambda d: Case(
        ["-m", "eval.harness", "--checkpoint", checkpoint(d), "--tasks", "hellaswag",
         "--output", str(d / "nowhere" / "results.json")], [str(d / "nowhere" / "results.json"), "--output"]),

    "hellaswag_missing_data": lambda d: hellaswag(d, d / "missing.jsonl"),
    "hellaswag_data_is_a_folder": lambda d: hellaswag(d, d),
    "hellaswag_line_not_json": lambda d: dataclasses.replace(
        hellaswag(d, write(d / "hs.jsonl", json.dumps(HELLASWAG_ROW) + "\n{not json\n")), expect=["hs.jsonl, line 2"]),
    "hellaswag_row_lacks_fields": lambda d: dataclasses.replace(
        hellaswag(d, jsonl(d / "hs.jsonl", [{"ctx_a": "x"}])), expect=["hs.jsonl, line 1", "endings", "label"]),
    "hellaswag_label_out_of_range": lambda d: dataclasses.replace(
        hellaswag(d, jsonl(d / "hs.jsonl", [HELLASWAG_ROW, {**HELLASWAG_ROW, "label": 7}])),
        expect=["hs.jsonl, line 2", "label 7"]),
    "hellaswag_empty_file": lambda d: hellaswag(d, write(d / "hs.jsonl", "\n")),
    "hellaswag_missing_checkpoint": lambda d: Case(
        ["-m", "eval.hellaswag", "--checkpoint", str(d / "missing.pt"),
         "--data", str(jsonl(d / "hs.jsonl", [HELLASWAG_ROW]))], [str(d / "missing.pt")]),
    "hellaswag_truncated_checkpoint": lambda d: Case(
        ["-m", "eval.hellaswag", "--checkpoint", str(write(d / "cut.pt", Path(checkpoint(d)).read_bytes()[:2000])),
         "--data", str(jsonl(d / "hs.jsonl", [HELLASWAG_ROW]))], [str(d / "cut.pt"), "is unreadable: "]),
    "hellaswag_bad_batch_size": lambda d: dataclasses.replace(
        hellaswag(d, jsonl(d / "hs.jsonl", [HELLASWAG_ROW]), "--batch_size", "0"), expect=["--batch_size"]),

    "official_mars_missing_checkout": lambda d: Case(["-m", "bench.official_mars", str(d / "MARS")],
                                                     [str(d / "MARS"), "has no mars_fused.py"]),

    "sample_run_folder_that_also_holds_runs": lambda d: Case(  # (an older quickstart's out/quickstart: which?)
        ["sample.py", "--checkpoint", run_holding_a_run(d)],
        [str(d / "run"), "also holds runs (20261129-120000)", "point at the one to use"]),
    "sample_missing_checkpoint": lambda d: Case(["sample.py", "--checkpoint", str(d / "missing.pt")],
                                                [str(d / "missing.pt")]),
    "sample_text_file_as_checkpoint": lambda d: Case(
        ["sample.py", "--checkpoint", str(write(d / "notes.pt", "not a checkpoint\n"))], [str(d / "notes.pt")]),
    "sample_foreign_checkpoint": lambda d: Case(
        ["sample.py", "--checkpoint", str(torch_file(d / "other.pt", {"weights": [1.0]}))],
        [str(d / "other.pt"), "model_args"]),
    "sample_missing_prompt_file": lambda d: Case(
        ["sample.py", "--checkpoint", checkpoint(d), "--prompt", f"FILE:{d / 'prompt.txt'}"], [str(d / "prompt.txt")]),
    "sample_bad_device": lambda d: Case(["sample.py", "--checkpoint", checkpoint(d), "--device", "cuda:x"],
                                        ["--device", "'cuda:x'"]),
    "sample_no_samples": lambda d: Case(["sample.py", "--checkpoint", checkpoint(d), "--num_samples", "0"],
                                        ["--num_samples", "at least 1"]),

    "export_missing_checkpoint": lambda d: Case(
        ["-m", "eval.export_hf", "--checkpoint", str(d / "missing.pt"), "--out", str(d / "hf")],
        [str(d / "missing.pt")]),
    "export_out_is_a_file": lambda d: Case(
        ["-m", "eval.export_hf", "--checkpoint", checkpoint(d), "--out", str(write(d / "hf", "mine"))],
        [str(d / "hf"), "is a file"], untouched=[d / "hf"]),
    "export_out_is_a_run_folder": lambda d: Case(
        ["-m", "eval.export_hf", "--checkpoint", checkpoint(d), "--out", str(run_folder(d / "run"))],
        [str(d / "run"), "not an earlier export"], untouched=[d / "run"]),

    "prepare_no_file_matches": lambda d: prepare_text(d, d / "nothing*.jsonl"),
    "prepare_corrupt_jsonl": lambda d: dataclasses.replace(
        prepare_text(d, write(d / "c.jsonl", '{"text": "a document"}\n{"text": "cut sho\n')),
        expect=[str(d / "c.jsonl"), "line 2"]),
    "prepare_garbage_parquet": lambda d: prepare_text(d, write(d / "train.parquet", b"PAR1 but not really" * 20)),
    "prepare_text_column_holds_numbers": lambda d: dataclasses.replace(
        prepare_text(d, jsonl(d / "n.jsonl", [{"text": "a document"}, {"text": 5}])),
        expect=[str(d / "n.jsonl"), "document 2"]),
    "prepare_empty_corpus": lambda d: prepare_text(d, write(d / "a.jsonl", ""), write(d / "b.txt", ""),
                                                   expect=["corpus is empty", str(d / "a.jsonl")]),
    "prepare_zero_shard_size": lambda d: prepare_text(d, jsonl(d / "t.jsonl", [{"text": "a"}]),
                                                      args=("--shard-size", "0"), expect=["--shard-size 0"]),
    "prepare_out_is_a_file": lambda d: Case(
        ["-m", "data.prepare", "text", "--files", str(jsonl(d / "t.jsonl", [{"text": "a document"}])),
         "--out", str(write(d / "out", "mine")), "--workers", "1"], [str(d / "out")], untouched=[d / "out"]),
    "prepare_corrupt_manifest": lambda d: Case(
        ["-m", "data.prepare", "text", "--files", str(jsonl(d / "t.jsonl", [{"text": "a document"}])),
         "--out", str(d / "shards"), "--workers", "1"],
        [str(d / "shards" / "manifest.json")], untouched=[write(d / "shards" / "manifest.json", "{cut sh").parent]),
    "prepare_verify_missing_folder": lambda d: Case(["-m", "data.prepare", "verify", str(d / "nothing")],
                                                    [str(d / "nothing")]),

    # arguments apply in order: an override that a later config file would undo, silently, is refused
    "train_override_before_a_config_file": lambda d: Case(
        ["train.py", "--max_iters=2", "config/quickstart.py"],
        ["--max_iters=2 comes before config/quickstart.py", "put the overrides after the config files"]),
    "train_gpt2_bias_asked_of_a_llama": lambda d: Case(
        ["train.py", "config/quickstart.py", "--model=llama-124m", "--bias=True"], ["--bias=True", "is a Llama"]),
    "train_gpt2_attention_scale_asked_of_a_llama": lambda d: Case(
        ["train.py", "config/quickstart.py", "--model=llama-124m", "--scale_attn_by_inverse_layer_idx=True"],
        ["--scale_attn_by_inverse_layer_idx=True", "is a Llama"]),
    "train_bool_in_lower_case": lambda d: Case(
        ["train.py", "config/quickstart.py", "--bias=true"], ["'bias' must be bool", "write True"]),
    "tune_report_of_a_mistyped_folder": lambda d: Case(
        ["-m", "experiments.tune", str(d / "mini_tunning"), "--report-only"],
        [str(d / "mini_tunning"), "holds no tuning"], untouched=[d]),
    "rankings_with_a_nan_loss": lambda d: Case(
        ["-m", "experiments.rankings", "AdamW=nan", "Muon=2.0", "Lion=2.5"], ["'AdamW=nan'", "finite"]),
    "train_step_bench_with_a_mistyped_key": lambda d: Case(
        ["-m", "bench.train_step", "config/quickstart.py", "--lerning_rate=1"],
        ["unknown config key 'lerning_rate'", "did you mean 'learning_rate'"]),
    "train_cuda_without_a_gpu": lambda d: Case(
        ["train.py", "--device=cuda:1", f"--data_dir={tiny_shards(d / 'data')}", f"--out_dir={d / 'out'}",
         "--n_layer=1", "--n_head=1", "--n_embd=8", "--block_size=8", "--total_batch_size=64",
         "--micro_batch_size=8"],
        ["config key 'device'", "'cuda:1'", "no usable CUDA GPU"], untouched=[d], env=dict(CUDA_VISIBLE_DEVICES="")),

    "quickstart_out_is_a_file": lambda d: Case(["-m", "data.quickstart", "--out", str(write(d / "stdlib", "mine"))],
                                               [str(d / "stdlib"), "--out"], untouched=[d / "stdlib"]),

    "report_corrupt_config": lambda d: Case(
        ["-m", "experiments.report", str(run_folder(d / "runs" / "a", config='{"config": {')), "--out", str(d / "r")],
        [str(d / "runs" / "a" / "config.json")]),
    "report_foreign_config": lambda d: Case(
        ["-m", "experiments.report", str(run_folder(d / "runs" / "a", config='{"model_type": "gpt2"}')),
         "--out", str(d / "r")], [str(d / "runs" / "a" / "config.json")]),
    "report_metrics_row_without_loss": lambda d: Case(
        ["-m", "experiments.report", str(run_folder(d / "runs" / "a", metrics=[{"type": "val", "step": 0, "tokens": 0}])),
         "--out", str(d / "r")], [str(d / "runs" / "a" / "metrics.jsonl"), "line 1", "val_loss"]),
    "report_missing_folder": lambda d: Case(["-m", "experiments.report", str(d / "nothing")], [str(d / "nothing")]),
    "report_out_is_a_file": lambda d: Case(
        ["-m", "experiments.report", str(run_folder(d / "runs" / "a")), "--out", str(write(d / "r", "mine"))],
        [str(d / "r"), "--out"], untouched=[d / "r"]),

    "script_ngpu_not_a_number": lambda d: Case(
        ["scripts/run.sh", "gpt2_small_mars"], ["NGPU", "'x'"], env=dict(NGPU="x", DRY_RUN="1", OUT_ROOT=str(d))),
    "script_tokens_not_a_number": lambda d: Case(
        ["scripts/run.sh", "gpt2_small_mars"], ["TOKENS", "'1.5B'"], env=dict(TOKENS="1.5B", DRY_RUN="1", OUT_ROOT=str(d))),
    "script_dry_run_not_0_or_1": lambda d: Case(
        ["scripts/run.sh", "gpt2_small_mars"], ["DRY_RUN", "'yes'"], env=dict(DRY_RUN="yes", OUT_ROOT=str(d))),
    "script_not_a_cell": lambda d: Case(["scripts/run.sh", "gpt2_small_marz"], ["'gpt2_small_marz' is not a cell",
                                                                              "gpt2_small_mars"]),
    "train_neither_file_nor_cell": lambda d: Case(["train.py", "config/gpt2_small_marz.py"], [
        "config/gpt2_small_marz.py", "did you mean 'gpt2_small_mars'"]),
    "script_jobs_not_a_number": lambda d: Case(
        ["scripts/mini_sweep.sh"], ["JOBS", "'two'"], env=dict(JOBS="two", DRY_RUN="1", OUT_ROOT=str(d))),
    "eval_downstream_without_checkpoint": lambda d: Case(
        ["scripts/eval_downstream.sh", str(d / "run")], [str(d / "run" / "ckpt.pt")], env=dict(DRY_RUN="1")),
}


def snapshot(paths: list[Path]) -> dict[str, bytes]:
    """Every file under the paths, with its bytes."""
    files = {}
    for path in paths:
        for f in ([path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())):
            files[str(f)] = f.read_bytes()
    return files


@pytest.fixture(scope="module")
def results(tmp_path_factory) -> dict[str, tuple[Case, subprocess.CompletedProcess, dict, dict]]:
    """Each case, its finished process, and its untouched files' bytes before and after."""
    root = tmp_path_factory.mktemp("bad_input")
    cases = {name: build(root / name) for name, build in CASES.items()}

    def run(name: str) -> tuple[Case, subprocess.CompletedProcess, dict, dict]:
        case = cases[name]
        before = snapshot(case.untouched)
        runner = ["bash"] if case.command[0].endswith(".sh") else [PYTHON]
        env = dict(os.environ, OMP_NUM_THREADS="1", HF_DATASETS_OFFLINE="1", HF_HUB_OFFLINE="1",
                   PATH=f"{PRELOADED_BIN}:{os.environ['PATH']}", **case.env)
        proc = subprocess.run(runner + case.command, capture_output=True, text=True, cwd=REPO, env=env, timeout=300)
        return case, proc, before, snapshot(case.untouched)

    with ThreadPoolExecutor(max_workers=2) as pool:
        return dict(zip(cases, pool.map(run, cases)))


@pytest.mark.parametrize("name", list(CASES))
def test_bad_input_is_named_without_traceback(name, results):
    case, proc, before, after = results[name]
    report = f"exit {proc.returncode}\nstdout:\n{proc.stdout[-2000:]}\nstderr:\n{proc.stderr[-3000:]}"
    assert proc.returncode != 0, report
    assert "Traceback" not in proc.stderr, report
    for text in case.expect:
        assert text in proc.stderr, f"{text!r} not in the error\n{report}"
    assert after == before, "files that were already there changed"


MODULE_ENTRY_POINTS = ["eval.export_hf", "eval.harness", "eval.hellaswag", "data.prepare", "data.quickstart", "bench.gpu",
                       "bench.memory", "bench.nanogpt", "bench.official_mars", "bench.optimizer_step",
                       "bench.tokenization", "bench.diagnostics", "bench.train_step"]
USAGE_SCRIPT = """
import contextlib, io, runpy, sys
for name in sys.argv[1:]:
    sys.argv, out = [name, "--help"], io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.suppress(SystemExit):
        runpy.run_module(name, run_name="__main__", alter_sys=True)
    print(name, "|", out.getvalue().splitlines()[0])
"""


def test_module_entry_points_say_how_they_are_run():
    """A module of eval/, data/ or bench/ run as a file (python eval/export_hf.py) names its python -m command
    instead of failing on its first import; argparse's usage line names that command, not the file (sample.py,
    in the repository root, runs as a file)."""
    for name in MODULE_ENTRY_POINTS:
        proc = subprocess.run([PYTHON, name.replace(".", "/") + ".py", "--help"], capture_output=True, text=True,
                              cwd=REPO, timeout=60)
        assert proc.returncode == 1 and f"python -m {name} ..." in proc.stderr, (name, proc.stderr)
        assert "Traceback" not in proc.stderr, proc.stderr
    with_parser = [name for name in MODULE_ENTRY_POINTS if "argparse" in (REPO / (name.replace(".", "/") + ".py")
                                                                           ).read_text()]
    proc = subprocess.run([PYTHON, "-c", USAGE_SCRIPT, *with_parser, "sample"], capture_output=True, text=True,
                          cwd=REPO, timeout=300)
    usage = {name: line.split(" [-h]")[0] for name, line in (row.split(" | ") for row in proc.stdout.splitlines())}
    assert usage == {name: f"usage: python -m {name}" for name in with_parser} | {
        "sample": "usage: python sample.py"}, proc.stderr


def test_the_train_step_benchmark_prints_its_help():
    proc = subprocess.run([PYTHON, "-m", "bench.train_step", "--help"], capture_output=True, text=True, cwd=REPO,
                          timeout=120)
    assert proc.returncode == 0 and "python -m bench.train_step config/quickstart.py" in proc.stdout, proc.stderr
    assert "Traceback" not in proc.stderr
