"""
Muon under `torchrun --nproc_per_node=2` (gloo) equals single-process Muon, and
each rank runs Newton-Schulz only on its share of the matrices.

pytest runs the test below; torchrun runs this same file as the worker.
"""

import os

import torch

from conftest import counted_orthogonalizations, run_file_under_torchrun, save_results_of_ranks
from optim import Muon

SHAPES = [(48, 32), (32, 96), (64, 64), (16, 16), (96,), (32,)]
STEPS = 5


def run_muon() -> tuple[list[torch.Tensor], int]:
    """A few Muon steps on fixed parameters and gradients (the same on every rank):
    the final parameters and how many matrices this process orthogonalised."""
    gen = torch.Generator().manual_seed(0)
    params = [torch.nn.Parameter(torch.randn(s, generator=gen)) for s in SHAPES]
    opt = Muon(params, weight_decay=0.01, compiled=False)
    with counted_orthogonalizations() as calls:
        for _ in range(STEPS):
            for p in params:
                p.grad = torch.randn(p.shape, generator=gen)
            opt.step()
    return [p.detach() for p in params], calls[0]


def test_muon_under_torchrun_equals_single_process(tmp_path):
    result = run_file_under_torchrun(os.path.abspath(__file__), tmp_path / "rank0.pt")
    expected, single_calls = run_muon()
    for actual, wanted in zip(result["params"], expected):
        torch.testing.assert_close(actual, wanted, rtol=1e-6, atol=1e-6)
    matrices = sum(len(s) == 2 for s in SHAPES)
    assert single_calls == STEPS * matrices
    assert sum(result["calls"]) == single_calls  # no rank repeats another's work
    assert all(0 < calls < single_calls for calls in result["calls"])


if __name__ == "__main__":
    save_results_of_ranks(run_muon)
