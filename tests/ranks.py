"""
The multi-rank tests' worker: one torchrun launch runs a whole list of scenarios in one gloo process
group, and reports each scenario's result by name, so that a failing scenario names itself (with every
rank's traceback) and the scenarios after it still run. Launches, not checks, are what a multi-rank test
pays for (a fresh interpreter, torch's import and a process group per rank): so few, fat launches.

    python -m torch.distributed.run --standalone --nproc_per_node=N tests/ranks.py PLAN.json OUT
    python tests/ranks.py PLAN.json OUT          # the same plan in one process, without a process group

PLAN.json holds a list of Scenario (as JSON objects); scenario `name` calls `module.function(rt, **kwargs)`
on every rank, and rank 0 saves {"result": what it returned, "errors": {rank: traceback}} to OUT
(result_file) as soon as the scenario ends. conftest.run_scenarios writes the plan, launches this and
reads the results back.
Scenarios run in the order given, so one may read what an earlier one wrote. The process group is
torn down as train.py's is (runtime.close_runtime), once, at the end.
"""

import contextlib
import gc
import io
import importlib
import json
import os
import sys
import time
import traceback
from collections.abc import Callable
from typing import IO, Any, NamedTuple

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the repository
sys.path.insert(1, os.path.dirname(os.path.abspath(__file__)))  # tests/, for the test modules

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

from runtime import Runtime, broadcast_from_main, close_runtime, join_process_group  # noqa: E402


class Scenario(NamedTuple):
    name: str  # unique within a plan: its results file
    call: str  # "module:function", function(rt: Runtime, **kwargs) -> a result torch.save takes
    kwargs: dict[str, Any] = {}


class Tee(io.TextIOBase):
    def __init__(self, *streams: IO[str]):
        self.streams = streams

    def write(self, text: str) -> int:
        for stream in self.streams:
            stream.write(text)
        return len(text)


def train(rt: Runtime, args: list[str]) -> dict:
    """train.py with these arguments, in this process group (train.train_on): its exit status and what every
    rank printed (stdout and stderr, rank after rank: what a torchrun launch's output holds)."""
    import train as train_py
    from optim import load_config

    printed = io.StringIO()
    with contextlib.redirect_stdout(Tee(sys.stdout, printed)), contextlib.redirect_stderr(Tee(sys.stderr, printed)):
        status = train_py.train_on(load_config(args), rt)
    outputs = [printed.getvalue()]
    if dist.is_initialized():
        outputs = [None] * dist.get_world_size()
        dist.all_gather_object(outputs, printed.getvalue())
    return dict(status=status, output="".join(outputs))


def on_main_rank(rt: Runtime, prepare: Callable[[], None]) -> None:
    """prepare() on rank 0 (a scenario's files), every rank raising its error if it raised (so that no rank
    waits for another in what follows)."""
    error = None
    if rt.is_main:
        try:
            prepare()
        except Exception as e:
            error = f"{type(e).__name__}: {e}"
    error = broadcast_from_main(error)
    if error:
        raise RuntimeError(error)


def result_file(out: str, name: str) -> str:
    """Where rank 0 saves scenario `name`'s result (a name may hold '/': variant/leg)."""
    return os.path.join(out, name.replace("/", "--") + ".pt")


def run_plan(plan: list[Scenario], out: str, rt: Runtime) -> None:
    for scenario in plan:
        start = time.time()
        module, function = scenario.call.split(":")
        try:
            result, error = getattr(importlib.import_module(module), function)(rt, **scenario.kwargs), None
        except BaseException:  # (SystemExit and DCP's CheckpointException too: the next scenario still runs)
            result, error = None, traceback.format_exc()
        gc.collect()  # the scenario's reference cycles (FSDP's hooks) go before the next one starts
        errors = [error]
        if dist.is_initialized():
            errors = [None] * dist.get_world_size()
            dist.all_gather_object(errors, error)
        if rt.is_main:
            torch.save({"result": result, "errors": {rank: e for rank, e in enumerate(errors) if e}},
                       result_file(out, scenario.name))
            print(f"scenario {scenario.name}: {'failed' if any(errors) else 'done'} in {time.time() - start:.2f} s",
                  flush=True)


def main() -> None:
    plan_path, out = sys.argv[1:]
    with open(plan_path) as f:
        plan = [Scenario(**item) for item in json.load(f)]
    torch.set_num_threads(1)  # each rank one thread, as train.py's ranks under the tests' OMP_NUM_THREADS=1
    if "RANK" in os.environ:
        join_process_group("gloo")
        rt = Runtime(dist.get_rank(), dist.get_rank(), dist.get_world_size(), torch.device("cpu"))
    else:
        rt = Runtime(0, 0, 1, torch.device("cpu"))
    import train  # noqa: F401  (what the scenarios run, imported before the freeze below)

    gc.freeze()  # what exists now lives to the end: each scenario's gc.collect() then skips it (0.25 s a call)
    run_plan(plan, out, rt)
    close_runtime()


if __name__ == "__main__":
    main()
