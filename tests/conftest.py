"""Shared test fixtures (the tests run from the repository root: python3 -m pytest tests): offline
settings, a tiny token dataset, and a runner for train.py (in a subprocess, single process or under
torchrun)."""

import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch

REPO = Path(__file__).resolve().parents[1]
# The GPT-2 BPE from ../shared/tiktoken where that folder exists (CI's); else tiktoken's download goes to a folder of
# the test run's own: the tests never write outside the checkout and the temporary folder.
SHARED_TIKTOKEN = REPO.parent / "shared" / "tiktoken"
os.environ.setdefault("TIKTOKEN_CACHE_DIR", str(SHARED_TIKTOKEN) if SHARED_TIKTOKEN.is_dir()
                      else tempfile.mkdtemp(prefix="test-tiktoken-"))
os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")  # (no network here: fail at once, not after retries)
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")  # a thread per process the tests start (two cores, and ranks share them)
# torch.cuda.is_available() through NVML, not the CUDA driver: a process that asked the driver cannot fork a child
# that uses CUDA, and tests/preload.py forks the commands the tests run from a server that asked.
os.environ.setdefault("PYTORCH_NVML_BASED_CUDA_CHECK", "1")
# One inductor and FX-graph cache for the whole test run, inherited by every process a test starts: a kernel
# compiled by one test (or train.py run) is loaded by the next. A folder of the run's own, so that a run's
# time says what a fresh machine pays (torch's default, /tmp/torchinductor_<user>, outlives runs).
RUN_COMPILE_CACHE = None if "TORCHINDUCTOR_CACHE_DIR" in os.environ else tempfile.mkdtemp(prefix="test-inductor-")
os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", RUN_COMPILE_CACHE or "")
os.environ.setdefault("TORCHINDUCTOR_FX_GRAPH_CACHE", "1")
# Compile in the compiling process: a pool of compile workers is two more interpreters importing torch for each
# process that compiles (inductor's default on 2 cores), slower than the compiling on two busy cores.
os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")

from data.shards import write_shard  # noqa: E402  (after the offline settings)


def start_preloaded_python() -> tuple[str, subprocess.Popen]:
    """tests/preload.py's server for this test run, started now (it imports while pytest collects), and the
    folder of its clients: python3 (whose commands are forked from the server) and torchrun (whose ranks are)."""
    folder = tempfile.mkdtemp(prefix="test-preload-")
    server = subprocess.Popen([sys.executable, str(REPO / "tests" / "preload.py"), "serve", f"{folder}/socket"],
                              env={**os.environ, "OMP_NUM_THREADS": "1"}, stdin=subprocess.DEVNULL,
                              stdout=open(f"{folder}/server.log", "w"), stderr=subprocess.STDOUT)
    (Path(folder) / "python3").write_text(textwrap.dedent(f"""\
        #!{sys.executable} -S
        import sys
        sys.path.insert(0, {str(REPO / "tests")!r})
        from preload import client
        client({folder + "/socket"!r}, {sys.executable!r})
        """))
    (Path(folder) / "torchrun").write_text(textwrap.dedent(f"""\
        #!/usr/bin/env bash
        # torchrun OPTIONS SCRIPT ARGS, the ranks run by the preloaded python3 (every option is --name=value or a flag)
        options=(); while [[ "$1" == -* ]]; do options+=("$1"); shift; done
        exec {folder}/python3 -m torch.distributed.run "${{options[@]}}" --no-python {folder}/python3 "$@"
        """))
    for client in ("python3", "torchrun"):
        os.chmod(Path(folder) / client, 0o755)
    return folder, server


# PYTHON is python3 for the commands the tests run: forked from one preloaded server (tests/preload.py) where
# that is the same as a fresh interpreter, else the real one. PRELOADED_BIN first on PATH does the same for
# the python3 and torchrun that scripts/*.sh call. Set when pytest starts (a rank of tests/ranks.py, which
# imports test modules and so this one, starts no server of its own); under pytest-xdist (-n N) the
# controller starts the one server, and its workers, started after, find its clients in SHARED_PRELOADED_BIN.
PRELOADED_BIN, PRELOAD_SERVER, PYTHON = "", None, sys.executable
SHARED_PRELOADED_BIN = "TESTS_PRELOADED_BIN"


def pytest_configure(config) -> None:
    global PRELOADED_BIN, PRELOAD_SERVER, PYTHON
    if hasattr(config, "workerinput"):
        # a worker of the controller's loadgroup (below, and pytest_configure_node): xdist set the worker's flag
        # that suffixes each test's id with its group from the worker's own parse of the command line (whose dist
        # is "no"); without it the controller sees no groups, and every worker builds the fixtures it shares
        config.option.loadgroup = config.option.loadgroup or config.workerinput.get("loadgroup", False)
    elif config.pluginmanager.hasplugin("xdist") and config.getoption("dist") in ("no", "load"):
        # -n N's default distribution made loadgroup (shared_fixture_group below), in the order collected; here, not
        # in pytest.ini, so that pytest runs without pytest-xdist too (one process)
        config.option.dist, config.option.loadscopereorder = "loadgroup", False
    if hasattr(config, "workerinput") and os.environ.get(SHARED_PRELOADED_BIN):
        PRELOADED_BIN = os.environ[SHARED_PRELOADED_BIN]
    else:
        PRELOADED_BIN, PRELOAD_SERVER = start_preloaded_python()
        os.environ[SHARED_PRELOADED_BIN] = PRELOADED_BIN
    PYTHON = f"{PRELOADED_BIN}/python3"


@pytest.hookimpl(optionalhook=True)  # (pytest-xdist's hook, on the controller, for each worker it starts)
def pytest_configure_node(node) -> None:
    node.workerinput["loadgroup"] = node.config.getoption("dist") == "loadgroup"


# Under pytest-xdist (python3 -m pytest -n 2, with pytest_configure's --dist loadgroup): the tests that share an
# expensive fixture run on one worker, as one group, so that it is built once: a module-scoped fixture's
# tests (a module's launch of tests/ranks.py, the SLURM cluster, the scripts' dry runs) are their module's
# group, and every user of two_ranks (one launch for the whole session) is one group. The other tests go to
# whichever worker is free. Groups start longest first (as measured), so that none is left for the end.
LONGEST_GROUPS_FIRST = ["tests/test_slurm.py", "tests/test_resume_matrix.py", "tests/test_scripts.py", "two_ranks",
                        "tests/test_memory.py", "tests/test_entrypoint_errors.py"]


def shared_fixture_group(item) -> str | None:
    if "two_ranks" in item.fixturenames:
        return "two_ranks"
    for definitions in item._fixtureinfo.name2fixturedefs.values():
        if definitions and definitions[-1].scope == "module":
            return item.nodeid.split("::")[0]
    return None


@pytest.hookimpl(tryfirst=True)  # (before xdist's own, which reads the groups off the marks)
def pytest_collection_modifyitems(config, items) -> None:
    groups = {}
    for item in items:
        groups[item] = shared_fixture_group(item)
        if groups[item]:
            item.add_marker(pytest.mark.xdist_group(groups[item]))
    rank = {group: i for i, group in enumerate(LONGEST_GROUPS_FIRST)}
    items.sort(key=lambda item: rank.get(groups[item], len(rank)))  # (stable: otherwise collection order)


def torchrun(nproc: int, *rendezvous: str) -> list[str]:
    """The command line before a script that torchrun runs on nproc local ranks (each rank preloaded), meeting
    at the rendezvous its options say (one node's, --standalone, when none)."""
    return [PYTHON, "-m", "torch.distributed.run", *(rendezvous or ["--standalone"]), f"--nproc_per_node={nproc}",
            "--no-python", PYTHON]

# A model small enough that a train.py run takes seconds on CPU.
TINY_MODEL = ["--n_layer=2", "--n_head=2", "--n_embd=32", "--block_size=32"]  # (GPT-2 with biases: the default)


def patterned_tokens(rng: np.random.Generator, count: int) -> np.ndarray:
    """Learnable text: runs of arithmetic progressions mod 97, each started at random."""
    out = []
    while sum(len(r) for r in out) < count:
        start, stride, length = rng.integers(0, 97), rng.integers(1, 5), rng.integers(8, 40)
        out.append((start + stride * np.arange(length)) % 97)
    return np.concatenate(out)[:count].astype(np.uint16)


def write_tiny_dataset(folder: str) -> str:
    """Two train shards and one val shard of patterned tokens in folder; returns it."""
    rng = np.random.default_rng(0)
    write_shard(os.path.join(folder, "tiny_train_000001.bin"), patterned_tokens(rng, 30_000))
    write_shard(os.path.join(folder, "tiny_train_000002.bin"), patterned_tokens(rng, 20_000))
    write_shard(os.path.join(folder, "tiny_val_000000.bin"), patterned_tokens(rng, 5_000))
    return folder


def pytest_sessionfinish(session, exitstatus) -> None:
    if PRELOAD_SERVER:
        PRELOAD_SERVER.kill()
        shutil.rmtree(PRELOADED_BIN, ignore_errors=True)
    if RUN_COMPILE_CACHE:
        shutil.rmtree(RUN_COMPILE_CACHE, ignore_errors=True)


@pytest.fixture(scope="session")
def tiny_dataset(tmp_path_factory) -> str:
    return write_tiny_dataset(str(tmp_path_factory.mktemp("tiny_data")))


def tiny_run_args(data_dir: str, out_dir: str, **overrides) -> list[str]:
    """train.py arguments for a tiny CPU run; keyword overrides replace the defaults. A vocabulary of 128 ids
    (the tiny dataset's are below 97): GPT-2's 50304 makes the embedding, the logits, the optimizer's state
    and every checkpoint 50x larger (a step 114 ms instead of 10, a run's checkpoints 38 MB instead of 0.8);
    a test of GPT-2's vocabulary itself sets vocab_size=50304."""
    settings = dict(
        data_dir=data_dir, out_dir=out_dir, device="cpu", vocab_size=128, total_batch_size=8 * 32, micro_batch_size=8,
        max_iters=12, warmup_iters=2, learning_rate=3e-3, min_lr=3e-4, eval_interval=6, eval_sequences=16,
        log_interval=2, seed=7,
    )
    settings.update(overrides)
    return TINY_MODEL + [f"--{k}={v}" for k, v in settings.items()]


def without_key_bias(weights: dict) -> dict:
    """The weights, the attention's key bias rows left out: no output depends on them (softmax ignores a
    constant added to every key's score), so their gradient is zero in exact arithmetic and rounding noise
    in practice, which Adam-type rules normalise to steps of +-lr. Any change of rounding (another world
    size's sum, another thread count) moves them by O(1) of their own size; compare runs without them."""
    def query_value(bias: torch.Tensor) -> torch.Tensor:
        q, _, v = bias.chunk(3)
        return torch.cat([q, v])
    return {name: query_value(value) if name.endswith("attn.c_attn.bias") else value for name, value in weights.items()}


def run_train(args: list[str], nproc: int = 0, check: bool = True, timeout: int = 300) -> subprocess.CompletedProcess:
    """Run train.py (under torchrun with nproc processes when nproc > 0) and return the finished process."""
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    proc = subprocess.run((torchrun(nproc) if nproc else [PYTHON]) + [str(REPO / "train.py")] + args,
                          capture_output=True, text=True, env=env, timeout=timeout, cwd=REPO)
    if check and proc.returncode != 0:
        raise AssertionError(f"train.py failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return proc


def torchrun_file(path: str, *args: Path | str, nproc: int = 2, **run_kwargs) -> subprocess.CompletedProcess:
    """Run a test file as a torchrun script on gloo (one thread per rank) with these arguments (its output path)."""
    return subprocess.run(
        [*torchrun(nproc), path, *map(str, args)],
        env={**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}, cwd=REPO, **{"timeout": 300, **run_kwargs},
    )


def run_scenarios(plan: list, folder: Path | str, nproc: int = 0, timeout: int = 900) -> dict[str, dict]:
    """Run a plan of tests/ranks.py scenarios in one launch (under torchrun with nproc ranks, on gloo, when
    nproc > 0; else in one process) and return {name: {"result": ..., "errors": {rank: traceback}}} for each
    scenario that ended. The launch's output is in folder/launch.log; a launch that fails names it."""
    from ranks import Scenario, result_file

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "plan.json").write_text(json.dumps([Scenario(*s)._asdict() for s in plan]))
    launcher = torchrun(nproc) if nproc else [PYTHON]
    with open(folder / "launch.log", "w") as log:
        proc = subprocess.run(launcher + [str(REPO / "tests" / "ranks.py"), str(folder / "plan.json"), str(folder)],
                              stdout=log, stderr=subprocess.STDOUT, timeout=timeout, cwd=REPO,
                              env={**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"})
    if proc.returncode != 0:
        raise AssertionError(f"the launch of {folder / 'plan.json'} failed ({proc.returncode}):\n"
                             f"{(folder / 'launch.log').read_text()[-5000:]}")
    files = {s[0]: result_file(str(folder), s[0]) for s in plan}
    return {name: torch.load(file, weights_only=False) for name, file in files.items() if os.path.exists(file)}


@pytest.fixture(scope="session")
def two_ranks_folder(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("two_ranks")


@pytest.fixture(scope="session")
def two_ranks(request, tiny_dataset, two_ranks_folder) -> dict[str, dict]:
    """The results of the 2-rank scenarios of every test module this session runs (a module's
    two_rank_scenarios(tiny_dataset, two_ranks_folder) -> [Scenario tuple]), all in one torchrun launch;
    read one with scenario_result."""
    modules = sorted({item.module for item in request.session.items}, key=lambda module: module.__name__)
    plan = [scenario for module in modules if hasattr(module, "two_rank_scenarios")
            for scenario in module.two_rank_scenarios(tiny_dataset, two_ranks_folder)]
    return run_scenarios(plan, two_ranks_folder, nproc=2)


def scenario_result(results: dict[str, dict], name: str):
    """What scenario `name` returned; an AssertionError with every rank's traceback if it failed."""
    if name not in results:
        raise AssertionError(f"scenario {name} never reported (its launch stopped before it)")
    if results[name]["errors"]:
        raise AssertionError(f"scenario {name} failed:\n" + "\n".join(
            f"rank {rank}:\n{trace}" for rank, trace in results[name]["errors"].items()))
    return results[name]["result"]


def step_weights(out_dir: str, step: int) -> dict:
    """The model weights of a run's checkpoint at `step`: a single file (ckpt_<step>.pt) or a sharded folder."""
    from checkpoint import load_model

    path = os.path.join(out_dir, f"ckpt_{step:07d}")
    return load_model(path if os.path.isdir(path) else path + ".pt")[0].state_dict()


def relative_difference(a: dict, b: dict) -> float:
    """The largest relative norm of a tensor's difference, b the reference."""
    return max(((a[k] - b[k]).norm() / b[k].norm()).item() for k in b)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


def cut_back(source_run: str, step: int, out_dir: str) -> str:
    """A copy of source_run cut back to its checkpoint at `step`, as a run preempted after that save leaves its
    folder; returns out_dir."""
    shutil.copytree(source_run, out_dir, symlinks=True)
    for name in os.listdir(out_dir):
        if name.startswith("ckpt_") and int(name.split("_")[1].split(".")[0]) > step:
            path = os.path.join(out_dir, name)
            shutil.rmtree(path) if os.path.isdir(path) else os.remove(path)
    if os.path.lexists(os.path.join(out_dir, "ckpt.pt")):  # (a single-file run's link to its newest)
        os.remove(os.path.join(out_dir, "ckpt.pt"))
        os.link(os.path.join(out_dir, f"ckpt_{step:07d}.pt"), os.path.join(out_dir, "ckpt.pt"))
    return out_dir


def flip_middle_byte(path: str) -> None:
    """Flip the byte in the middle of a file (a corrupt checkpoint)."""
    with open(path, "r+b") as f:
        f.seek(os.path.getsize(path) // 2)
        byte = f.read(1)
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([byte[0] ^ 0xFF]))


def results_of_ranks(rt, run: str) -> dict:
    """A scenario of tests/ranks.py: run ("module:function", returning params and a Newton-Schulz call count first)
    on every rank; this rank's params and every rank's count."""
    import importlib

    import torch.distributed as dist

    module, function = run.split(":")
    params, calls = getattr(importlib.import_module(module), function)()[:2]
    all_calls = [None] * dist.get_world_size()
    dist.all_gather_object(all_calls, calls)
    return {"params": params, "calls": all_calls}


@contextlib.contextmanager
def counted_orthogonalizations():
    """Count the matrices Newton-Schulz runs on (optim.newton_schulz.newton_schulz5_batched's) inside the block:
    yields a one-item list holding the count."""
    import optim.newton_schulz

    original, count = optim.newton_schulz.newton_schulz5_batched, [0]

    def counted(matrices, *args, **kwargs):
        count[0] += len(matrices)
        return original(matrices, *args, **kwargs)

    optim.newton_schulz.newton_schulz5_batched = counted
    try:
        yield count
    finally:
        optim.newton_schulz.newton_schulz5_batched = original


def random_gradient_step(model, optimizer, generator) -> None:
    """One optimizer step on random gradients (MARS-exact's second gradient stashed first, as the loop does)."""
    def draw_gradients() -> None:
        for p in model.parameters():
            p.grad = torch.randn(p.shape, generator=generator, dtype=p.dtype)

    if hasattr(optimizer, "stash_grad_for_next_step"):
        draw_gradients()
        optimizer.stash_grad_for_next_step()
    draw_gradients()
    optimizer.step()
