"""
Every matrix optimizer of the registry (each one whose step is matrix products: optim.contract.MatrixProducts),
on 2 ranks (`torchrun --nproc_per_node=2`, gloo) and on 4 (a scenario of the resume matrix's 4-rank launch), with
plain parameters (DDP: every rank holds them whole) and with FSDP2's sharded ones, equals one process number for
number (Dion's sharded step, which sums its products over the ranks' row blocks, to float32 rounding:
ROW_BLOCK_SUMS); and each rank runs Newton-Schulz only on its share of the matrices, in one batched call
and one exchange a step.

The model has two blocks, so that matrices of one shape are batched (and shared out over the owner ranks), and
widths that split unevenly over 2 and 4 ranks. The two ranks' part is a scenario of the session's two-rank launch
(conftest.two_ranks).
"""

import contextlib

import torch
import torch.distributed as dist

from conftest import counted_orthogonalizations, scenario_result
from model import GPT, GPTConfig
from optim import OPTIMIZERS, build_optimizer, load_config
from optim.contract import MatrixProducts

MODEL = ["--n_layer=2", "--n_head=2", "--n_embd=34", "--block_size=30", "--vocab_size=128", "--dropout=0.0"]
STEPS = 3
# Variants beyond the registry's defaults whose step is matrix products.
EXTRA_VARIANTS = {"mars-shampoo": ["--optimizer=mars", "--mars_type=mars-shampoo"],
                  # Kron's update probability below 1 from the first step: steps 1 and 3 leave the preconditioners
                  # as they are (only the direction comes back from the owners), step 2 updates them
                  "kron-skipping": ["--optimizer=kron", "--kron_update_prob_flat_start=0"]}
# Optimizers whose sharded step sums products over the ranks' row blocks (an all-reduce of partial sums, in another
# order than one process's product over all rows, and never a whole matrix gathered): sharded, they equal one
# process to float32 rounding, not bit for bit (plain, they compute alone and do). Dion (measured 2e-8 relative).
ROW_BLOCK_SUMS = {"dion"}


def matrix_variants() -> dict[str, list[str]]:
    """Every registry optimizer (and variant) whose built optimizer declares matrix products: its config args."""
    variants = {name: [f"--optimizer={name}"] for name in OPTIMIZERS} | EXTRA_VARIANTS
    return {name: args for name, args in variants.items() if build(args, GPT(GPTConfig(**model_args())))[1]}


def model_args() -> dict:
    return load_config(MODEL).model_args()


def build(args: list[str], model: torch.nn.Module) -> tuple[torch.optim.Optimizer, bool]:
    optimizer = build_optimizer(model, load_config([*args, *MODEL, "--lr_schedule=constant", "--compile=False"]), "cpu")
    return optimizer, isinstance(optimizer, MatrixProducts) and bool(optimizer.products())


@contextlib.contextmanager
def counted_calls(functions: dict[str, tuple[object, str]]):
    """Count the calls of each module attribute (name: (module, attribute)) inside the block: yields the counts."""
    counts, originals = dict.fromkeys(functions, 0), {name: getattr(*where) for name, where in functions.items()}

    def counting(name):
        def call(*args, **kwargs):
            counts[name] += 1
            return originals[name](*args, **kwargs)
        return call

    for name, (module, attribute) in functions.items():
        setattr(module, attribute, counting(name))
    try:
        yield counts
    finally:
        for name, (module, attribute) in functions.items():
            setattr(module, attribute, originals[name])


def run_on_fixed_gradients(sharded: bool = False) -> tuple[dict[str, list[torch.Tensor]], int, dict[str, list]]:
    """STEPS steps of every matrix variant on the same model and gradients (the same on every rank), its
    parameters plain or (sharded) FSDP2's DTensors over every rank: each variant's final weights, whole, how
    many matrices this process orthogonalised, and each variant's calls in each step of the owner exchange's
    collectives (optim.sharding.on_owner_ranks: all-to-alls sharded, broadcasts plain) and of the batched
    Newton-Schulz."""
    import optim.newton_schulz
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor import distribute_tensor

    results, per_step, threads = {}, {}, torch.get_num_threads()
    watched = {"all_to_all": (dist, "all_to_all_single"), "broadcast": (dist, "broadcast"),
               "batched": (optim.newton_schulz, "newton_schulz5_batched")}
    # One thread, as each torchrun rank runs with: SOAP's eigh and QR on rank-deficient statistics fill the null
    # space by rounding, which another thread count does otherwise (and SOAP carries it to O(1e-3)).
    torch.set_num_threads(1)
    with counted_orthogonalizations() as calls:
        for name, args in matrix_variants().items():
            torch.manual_seed(0)
            model = GPT(GPTConfig(**model_args()))
            if sharded:
                fully_shard(model)
            optimizer, _ = build(args, model)
            gen = torch.Generator().manual_seed(1)
            steps = []
            for _ in range(STEPS):
                for p in model.parameters():
                    grad = torch.randn(p.shape, generator=gen) * 0.1
                    if sharded:  # (the same on every rank: each keeps its own rows, src_data_rank=None, no scatter)
                        grad = distribute_tensor(grad, p.device_mesh, p.placements, src_data_rank=None)
                    p.grad = grad
                with counted_calls(watched) as counts:
                    optimizer.step()
                steps.append(counts)
            per_step[name] = steps
            results[name] = [(p.full_tensor() if sharded else p).detach().clone() for p in model.parameters()]
    torch.set_num_threads(threads)
    return results, calls[0], per_step


def results_of_ranks(rt) -> dict:
    """A scenario of tests/ranks.py: run_on_fixed_gradients with plain and with sharded parameters; this rank's
    weights, and every rank's count of matrices orthogonalised and calls in each step (plain, then sharded)."""
    outcome = {}
    for layout in ("plain", "sharded"):
        weights, calls, per_step = run_on_fixed_gradients(sharded=layout == "sharded")
        all_calls, all_per_step = [None] * dist.get_world_size(), [None] * dist.get_world_size()
        dist.all_gather_object(all_calls, calls)
        dist.all_gather_object(all_per_step, per_step)
        outcome[layout] = {"weights": weights, "calls": all_calls, "per_step": all_per_step}
    return outcome


def two_rank_scenarios(tiny_dataset: str, folder) -> list[tuple]:
    return [("matrix_optimizers", "test_optim_ddp:results_of_ranks", {})]


def check_against_one_process(result: dict, world_size: int) -> None:
    expected, single_calls, single_steps = run_on_fixed_gradients()
    assert len(expected) >= 7, sorted(expected)  # Muon, Moonlight, MARS-M, MARS-Shampoo, Scion, SOAP, Kron, ...
    for layout in ("plain", "sharded"):
        for name, wanted in expected.items():
            for actual, want in zip(result[layout]["weights"][name], wanted):
                if layout == "sharded" and name in ROW_BLOCK_SUMS:
                    torch.testing.assert_close(actual, want, rtol=1e-6, atol=1e-8, msg=f"{layout} {name}")
                else:
                    assert torch.equal(actual, want), (layout, name, (actual - want).abs().max())
        calls = result[layout]["calls"]
        assert sum(calls) == single_calls, (layout, calls)  # no rank repeats another's work
        assert all(0 < c < single_calls for c in calls), (layout, calls)
        assert len(calls) == world_size
        # Each step: one exchange (sharded, one all-to-all there and one back; plain, one broadcast per owner)
        # and one batched Newton-Schulz call on each owner, whatever the number of matrices. Kron's
        # preconditioners also go through the owner exchange; Dion, SOAP and Shampoo never use it.
        for name in expected:
            orthogonalises = all(counts["batched"] == 1 for counts in single_steps[name])  # (one process)
            exchanges = name not in ROW_BLOCK_SUMS | {"soap", "shampoo"}
            for step in range(STEPS):
                ranks = [per_step[name][step] for per_step in result[layout]["per_step"]]
                owners = sum(counts["batched"] for counts in ranks)
                assert all(counts["batched"] <= 1 for counts in ranks), (layout, name, step, ranks)
                assert owners == (world_size if orthogonalises else 0), (layout, name, step, ranks)
                for counts in ranks:
                    if layout == "sharded":
                        assert counts["all_to_all"] == (2 if exchanges else 0), (name, step, ranks)
                    else:
                        assert counts["all_to_all"] == 0, (name, step, ranks)
                        assert counts["broadcast"] == (owners if orthogonalises else world_size if exchanges else 0), \
                            (name, step, ranks)


def test_two_ranks_equal_one_process(two_ranks):
    check_against_one_process(scenario_result(two_ranks, "matrix_optimizers"), 2)
