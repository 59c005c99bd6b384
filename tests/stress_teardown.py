"""
The teardown stress proof (not collected by pytest: a run takes minutes): two-rank jobs run again and
again while other processes load every core, each of which must exit 0. A race at process-group
teardown shows as a rank aborting at exit ("terminate called without an active exception", SIGABRT)
after a run that finished.

    python tests/stress_teardown.py --rounds 50    # each round: train.py (ddp, then fsdp next round), and
                                                   # tests/ranks.py running train.py under DDP and FSDP and
                                                   # the two-rank scenarios of test_optim_mars_m.py and
                                                   # test_optim_ddp.py in one launch
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

# the repository before tests/ (this script's folder, first on the path), whose data/ holds test data
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from conftest import run_train, tiny_run_args, torchrun_file, write_tiny_dataset  # noqa: E402

LOAD = "while True: pass"


def fat_worker(data: str, folder: str) -> subprocess.CompletedProcess:
    """tests/ranks.py running train.py twice (DDP, then FSDP with an asynchronous save) and the optimizer
    scenarios in one two-rank launch."""
    os.makedirs(folder)
    plan = [dict(name=dp, call="ranks:train", kwargs=dict(args=tiny_run_args(
        data, os.path.join(folder, dp), max_iters=4, eval_interval=2, micro_batch_size=4, data_parallel=dp,
        async_checkpoint=dp == "fsdp"))) for dp in ("ddp", "fsdp")]
    plan += [dict(name=module, call="conftest:results_of_ranks", kwargs=dict(run=f"{module}:run_on_fixed_gradients"))
             for module in ("test_optim_mars_m", "test_optim_ddp")]
    with open(os.path.join(folder, "plan.json"), "w") as f:
        json.dump(plan, f)
    return torchrun_file("tests/ranks.py", os.path.join(folder, "plan.json"), folder, check=False,
                         capture_output=True, text=True, timeout=600)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=50)
    parser.add_argument("--load", type=int, default=os.cpu_count(), help="busy processes beside the jobs")
    args = parser.parse_args()
    load = [subprocess.Popen([sys.executable, "-c", LOAD]) for _ in range(args.load)]
    failures, jobs, start = [], 0, time.time()
    try:
        with tempfile.TemporaryDirectory() as folder:
            data = os.path.join(folder, "data")
            os.makedirs(data)
            write_tiny_dataset(data)
            for round_ in range(args.rounds):
                data_parallel = ("ddp", "fsdp")[round_ % 2]
                out = os.path.join(folder, f"run{round_}")
                procs = {f"train.py {data_parallel}": run_train(
                    tiny_run_args(data, out, max_iters=4, eval_interval=4, micro_batch_size=4,
                                  data_parallel=data_parallel), nproc=2, check=False)}
                procs["tests/ranks.py"] = fat_worker(data, os.path.join(folder, f"fat{round_}"))
                for name, proc in procs.items():
                    jobs += 1
                    if proc.returncode != 0:  # (the ranks' own output comes before torchrun's report)
                        failures.append(f"round {round_}, {name}: exit {proc.returncode}\n{proc.stderr[:3000]}")
                        print(failures[-1], flush=True)
                print(f"round {round_ + 1}/{args.rounds}: {jobs - len(failures)} of {jobs} jobs exited 0 "
                      f"({time.time() - start:.0f} s)", flush=True)
    finally:
        for p in load:
            p.kill()
    print("\n\n".join(failures))
    print(f"{jobs - len(failures)} of {jobs} two-rank jobs exited 0, {args.load} busy processes beside them")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
