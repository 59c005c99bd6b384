"""
The multi-node path for real: two torchrun agents on this machine act as two nodes (--nnodes=2, one rank
each, a c10d rendezvous on 127.0.0.1, no --standalone), train under DDP and under FSDP and checkpoint;
then one node of two ranks resumes the run, which ends bit for bit where a one-node run of two ranks ends.
"""

import os
import subprocess

import pytest
import torch

from conftest import REPO, free_port, run_train, step_weights, tiny_run_args, torchrun

COMMON = dict(micro_batch_size=4, lr_decay_iters=8, eval_interval=4, optimizer="mars")


def two_nodes(args: list[str]) -> None:
    """train.py under two torchrun agents of one rank each, meeting at a c10d rendezvous."""
    endpoint = f"127.0.0.1:{free_port()}"
    launcher = torchrun(1, "--nnodes=2", "--rdzv_backend=c10d", f"--rdzv_endpoint={endpoint}",
                        "--rdzv_id=multinode-test")
    agents = [subprocess.Popen([*launcher, str(REPO / "train.py"), *args], cwd=REPO, text=True,
                               env=dict(os.environ, OMP_NUM_THREADS="1"), stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT) for _ in range(2)]
    outputs = [agent.communicate(timeout=300)[0] for agent in agents]
    for agent, output in zip(agents, outputs):
        assert agent.returncode == 0, output[-3000:]
    assert sum("saved" in output for output in outputs) >= 1  # (rank 0's agent prints the run's log)


@pytest.mark.parametrize("data_parallel", ["ddp", "fsdp"])
def test_two_nodes_train_checkpoint_and_one_node_resumes(tiny_dataset, tmp_path, data_parallel):
    nodes, straight = str(tmp_path / "nodes"), str(tmp_path / "straight")
    two_nodes(tiny_run_args(tiny_dataset, nodes, max_iters=4, data_parallel=data_parallel, **COMMON))
    run_train(tiny_run_args(tiny_dataset, nodes, max_iters=8, data_parallel=data_parallel, init_from="resume",
                            **COMMON), nproc=2)
    run_train(tiny_run_args(tiny_dataset, straight, max_iters=8, data_parallel=data_parallel, **COMMON), nproc=2)
    a, b = step_weights(straight, 8), step_weights(nodes, 8)
    assert all(torch.equal(a[k], b[k]) for k in a)
