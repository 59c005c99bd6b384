"""
Muon and MARS-Shampoo under `torchrun --nproc_per_node=2` (gloo) equal single-process
runs, and each rank runs Newton-Schulz only on its share of the matrices.

The two ranks' part is a scenario of the session's two-rank launch (conftest.two_ranks).
"""

import torch

from conftest import counted_orthogonalizations, scenario_result
from optim import MARS, Muon

SHAPES = [(48, 32), (32, 96), (64, 64), (16, 16), (96,), (32,)]
STEPS = 5
OPTIMIZERS = {
    "muon": lambda params: Muon(params, weight_decay=0.01, compiled=False),
    "mars-shampoo": lambda params: MARS(params, mars_type="mars-shampoo", weight_decay=0.01, compiled=False),
}


def run_on_fixed_gradients() -> tuple[dict[str, list[torch.Tensor]], int]:
    """A few steps of each optimizer on fixed parameters and gradients (the same on every rank):
    the final parameters per optimizer and how many matrices this process orthogonalised."""
    results = {}
    with counted_orthogonalizations() as calls:
        for name, make in OPTIMIZERS.items():
            gen = torch.Generator().manual_seed(0)
            params = [torch.nn.Parameter(torch.randn(s, generator=gen)) for s in SHAPES]
            opt = make(params)
            for _ in range(STEPS):
                for p in params:
                    p.grad = torch.randn(p.shape, generator=gen)
                opt.step()
            results[name] = [p.detach() for p in params]
    return results, calls[0]


def two_rank_scenarios(tiny_dataset: str, folder) -> list[tuple]:
    return [("optim_ddp", "conftest:results_of_ranks", dict(run="test_optim_ddp:run_on_fixed_gradients"))]


def test_two_ranks_under_torchrun_equal_one_process(two_ranks):
    result = scenario_result(two_ranks, "optim_ddp")
    expected, single_calls = run_on_fixed_gradients()
    for name, wanted in expected.items():
        for actual, want in zip(result["params"][name], wanted):
            torch.testing.assert_close(actual, want, rtol=1e-6, atol=1e-6, msg=name)
    matrices = sum(len(s) == 2 for s in SHAPES)
    assert single_calls == len(OPTIMIZERS) * STEPS * matrices
    assert sum(result["calls"]) == single_calls  # no rank repeats another's work
    assert all(0 < calls < single_calls for calls in result["calls"])
