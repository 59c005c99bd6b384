"""
Dion (optim/dion.py) against a float64 restatement of its authors' reference implementation: microsoft/dion at
0a059a4, dion/dion_reference.py (the single-device path of Dion.step: dion_update, power_iteration, orthogonalize
with its default "rcqr", fix_all_zero_or_nan; the init of Q and the rank in _init_opt_state_dion) and
dion/scalar_opts.py (adamw_update), with the routing of its train.py (the blocks' matrices on Dion, the embeddings
and the head on AdamW, undecayed, at the same learning rate) and the betas their Dion reads there: its own default
(0.9, 0.95) (AUTHORS_SCALAR_BETAS: train.py's betas=(0.95, 0.98) goes into a group key Dion never reads). Run through the registry on a
tiny GPT on the same gradients (tests/parity.py's) for several steps, at a changing learning rate.

Restated in float64 throughout: the reference casts to float32 inside orthogonalize() and for Q's column
normalisation (to upcast bf16; for float64 parameters that is a downcast, which ours does not make). Q starts
from our documented seed (the reference draws it from the global generator and broadcasts rank 0's).

Under FSDP2 on 2 gloo ranks (a scenario of the session's two-rank launch, conftest.two_ranks), a Dion step's
collectives, as torch's dispatcher sees them, are four all-reduces of r-wide matrices: no whole matrix gathered.
"""

import math

import pytest
import torch
import torch.distributed as dist
from torch.utils._python_dispatch import TorchDispatchMode

from conftest import scenario_result
from model import GPT, GPTConfig
from optim import build_optimizer
from optim.dion import Q_SEED, Dion
from parity import lr_multiplier, on_hidden_matrix, scheduled_step
from test_bench_floor import step_flops
from test_optim import TINY, tiny_config

STEPS = 6


def reference_orthogonalize(P, rng, oversample=1.25):
    """orthogonalize(P, "rcqr"): Householder QR if P is square or wide, else a random sketch's R and one more
    Cholesky QR."""
    m, n = P.shape
    if m <= n:
        return torch.linalg.qr(P)[0]
    k = math.ceil(oversample * n / 128.0) * 128
    S = torch.empty((k, m), dtype=P.dtype).normal_(std=math.sqrt(1.0 / k), generator=rng)
    _, R = torch.linalg.qr(S @ P, mode="r")
    Q = torch.linalg.solve_triangular(R, P, upper=True, left=False)
    R, _ = torch.linalg.cholesky_ex(Q.T @ Q, upper=True)
    return torch.linalg.solve_triangular(R, Q, upper=True, left=False)


def reference_dion(X, G, state, lr, mu, weight_decay, epsilon, rng):
    """dion_update with power_iters=1, on one matrix (transposed when it is wide)."""
    transpose = X.shape[0] < X.shape[1]
    M, Q = state["M"], state["Q"]
    M.add_(G)
    B = M.T if transpose else M
    P = reference_orthogonalize(B @ Q, rng)
    R = B.T @ P
    if (M == 0).all():  # fix_all_zero_or_nan
        P, R = torch.zeros_like(P), Q
    M.add_(R @ P.T if transpose else P @ R.T, alpha=-(1 - mu))
    state["Q"] = R / (R.norm(dim=0, keepdim=True) + epsilon)
    X.mul_(1 - lr * weight_decay)
    update = state["Q"] @ P.T if transpose else P @ state["Q"].T
    X.add_(update, alpha=-(X.size(0) / X.size(1)) ** 0.5 * lr)


# microsoft/dion at 0a059a4: Dion(betas=(0.9, 0.95)) in dion/dion.py, each group's beta1 and beta2 from it
AUTHORS_SCALAR_BETAS = (0.9, 0.95)


def reference_adamw(X, G, state, lr, beta1, beta2, epsilon, step):
    """scalar_opts.adamw_update, weight decay 0."""
    M = state.setdefault("M", torch.zeros_like(X))
    V = state.setdefault("V", torch.zeros_like(X))
    M.lerp_(G, 1 - beta1)
    V.mul_(beta2).addcmul_(G, G, value=1 - beta2)
    denom = V.sqrt() / math.sqrt(1 - beta2**step) + epsilon
    X.addcdiv_(M, denom, value=-lr / (1 - beta1**step))


def authors_rank(shape: tuple[int, ...], rank_fraction: float, rank_multiple_of: int) -> int:
    """r as _init_opt_state_dion computes it: the fraction of the shorter side, rounded up to a multiple of
    rank_multiple_of, at most the shorter side."""
    m, n = shape
    return min(rank_multiple_of * math.ceil(rank_fraction * min(m, n) / rank_multiple_of), m, n)


def run_against_reference(dtype: torch.dtype, **settings) -> tuple[float, float]:
    """STEPS steps of ours (in dtype) and the reference (float64) on the same gradients: the largest relative
    difference of a matrix on Dion, and of a parameter on AdamW."""
    cfg = tiny_config(optimizer="dion", learning_rate=2e-2, compile=False, **settings)
    hp = cfg.hyperparameters
    torch.manual_seed(0)
    model = GPT(GPTConfig(**TINY)).to(dtype)
    optimizer = build_optimizer(model, cfg, "cpu")
    assert isinstance(optimizer, Dion)
    named = list(model.named_parameters())
    on_dion = [on_hidden_matrix(n, p) for n, p in named]
    reference = [p.detach().double().clone() for p in model.parameters()]
    states, position = [], 0
    for p, dion in zip(reference, on_dion):
        if dion:  # Q as ours draws it: a generator seeded with the matrix's position (the Dion group comes first)
            r = authors_rank(p.shape, hp.rank_fraction, hp.rank_multiple_of)
            generator = torch.Generator().manual_seed(Q_SEED + position)
            Q = torch.randn((min(p.shape), r), generator=generator, dtype=dtype).double()
            states.append(dict(M=torch.zeros_like(p), Q=Q))
            position += 1
        else:
            states.append({})
    rng = torch.Generator().manual_seed(0)  # the reference's sketch generator
    for step in range(STEPS):
        grads = scheduled_step(model, optimizer, step)
        lr = cfg.learning_rate * lr_multiplier(step)
        for p, g, state, dion in zip(reference, grads, states, on_dion):
            if dion:
                reference_dion(p, g, state, lr, hp.dion_momentum, hp.weight_decay, hp.dion_eps, rng)
            else:
                reference_adamw(p, g, state, lr, *AUTHORS_SCALAR_BETAS, hp.dion_eps, step + 1)
    errors = [((p.detach().double() - q).norm() / q.norm()).item() for p, q in zip(model.parameters(), reference)]
    return (max(e for e, dion in zip(errors, on_dion) if dion), max(e for e, dion in zip(errors, on_dion) if not dion))


SETTINGS = [pytest.param(dict(), 2e-6, id="rank-half", marks=pytest.mark.quick),
            pytest.param(dict(rank_fraction=1.0), 5e-5, id="full-rank"),
            pytest.param(dict(rank_fraction=0.3, rank_multiple_of=4), 2e-6, id="rank-multiple")]


@pytest.mark.parametrize("settings, float32_tolerance", SETTINGS)
def test_dion_matches_its_authors_reference(settings, float32_tolerance):
    """Every matrix shape of a GPT block: c_attn (96 x 32, P taller than wide: the reference's sketch),
    attn.c_proj (square: at full rank P is square, Householder QR there), c_fc (128 x 32), mlp.c_proj (32 x 128,
    transposed); rank 16 of 32, 32 (full) and 0.3 * 32 rounded up to 12. In float64 ours is the reference's
    arithmetic to rounding. The AdamW side is rules.adamw_update, whose learning rate and bias corrections are
    float32 scalars (as for every optimizer here): float32 rounding even in float64. In float32 both land on the
    float64 trajectory to float32 rounding, amplified at full rank by the conditioning of M's trailing singular
    directions, which P's last columns follow (measured 2e-5; the reference itself in float32 lands 4e-5 from its
    float64 run there)."""
    dion, adamw = run_against_reference(torch.float64, **settings)
    assert dion < 1e-12 and adamw < 2e-6, (dion, adamw)
    dion, adamw = run_against_reference(torch.float32, **settings)
    assert dion < float32_tolerance and adamw < 2e-6, (dion, adamw)


def test_an_all_zero_momentum_keeps_q_and_moves_only_by_weight_decay():
    """The reference's fix_all_zero_or_nan: a matrix whose momentum is zero takes no update (only the decay), and
    its Q comes back column-normalised."""
    torch.manual_seed(0)
    X = torch.nn.Parameter(torch.randn(8, 5))
    optimizer = Dion([dict(params=[X])], lr=0.1, weight_decay=0.5, rank_fraction=0.6)
    X.grad = torch.zeros_like(X)
    before = X.detach().clone()
    optimizer.step()
    Q = optimizer.state[X]["Q"]
    generator = torch.Generator().manual_seed(Q_SEED)
    initial = torch.randn(Q.shape, generator=generator)
    torch.testing.assert_close(X.detach(), before * (1 - 0.1 * 0.5))
    torch.testing.assert_close(Q, initial / (initial.norm(dim=0, keepdim=True) + 1e-8))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_dion_stacks_matrices_and_declares_their_products(dtype):
    """The matrices of one shape run as one stack: each gets what it gets alone (to its dtype's rounding: a batched
    product need not round as one alone), tall, square and wide (transposed) ones. And products() is what a step
    computes, on these six matrices in three stacks (test_bench_floor's count, which every registry optimizer
    passes on the tiny GPT)."""

    shapes = [(48, 16), (16, 48), (48, 16), (24, 24), (16, 48), (48, 16)]
    torch.manual_seed(0)
    weights = [torch.randn(shape, dtype=dtype) * 0.1 for shape in shapes]
    together = [torch.nn.Parameter(w.clone()) for w in weights]
    alone = [torch.nn.Parameter(w.clone()) for w in weights]
    settings = dict(lr=2e-2, weight_decay=0.1, rank_fraction=0.5)
    optimizers = [Dion([dict(params=together)], **settings)]
    optimizers += [Dion([dict(params=[p])], **settings) for p in alone]
    for position, (optimizer, p) in enumerate(zip(optimizers[1:], alone)):  # each alone draws its Q of together
        optimizer._position[p] = position
    gen = torch.Generator().manual_seed(1)
    for _ in range(4):
        for p, q in zip(together, alone):
            p.grad = torch.randn(p.shape, generator=gen, dtype=dtype)
            q.grad = p.grad.clone()
        for optimizer in optimizers:
            optimizer.step()
    for shape, p, q in zip(shapes, together, alone):
        assert ((p - q).norm() / q.norm()).item() < 10 * torch.finfo(dtype).eps, shape

    declared = sum(product.flops() for product in optimizers[0].products())
    assert step_flops(optimizers[0], lambda: optimizers[0].step()) == pytest.approx(declared, rel=1e-12)


# ----------------------------------------------------------------------------- FSDP2: no whole matrix gathered


class Collectives(TorchDispatchMode):
    """Every collective dispatched while active, as (op, elements of its tensors): torch.distributed's calls (the
    c10d ops) and the functional collectives that DTensor's full_tensor() and redistribute() run."""

    NAMESPACES = ("c10d", "_c10d_functional", "c10d_functional")

    def __init__(self):
        super().__init__()
        self.calls: list[tuple[str, int]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = str(func)
        if func.namespace in self.NAMESPACES and name.split(".")[1] not in ("wait_tensor", "_wrap_tensor_autograd"):
            tensors = [t for a in args for t in (a if isinstance(a, (list, tuple)) else [a])
                       if isinstance(t, torch.Tensor)]
            self.calls.append((name, sum(t.numel() for t in tensors)))
        return func(*args, **(kwargs or {}))


FSDP_STEPS = 2


def collectives_of_fsdp_steps(rt) -> dict:
    """A scenario of tests/ranks.py: the tiny GPT under FSDP2 over every rank, Dion (and, as the probe's control,
    Shampoo, which gathers each parameter whole) through the registry, FSDP_STEPS real steps on random sharded
    gradients: each rank's collectives of each step, and whether every weight is finite and the Dion matrices
    moved."""
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor import distribute_tensor

    outcome = {}
    for name in ("dion", "shampoo"):
        torch.manual_seed(0)
        model = GPT(GPTConfig(**TINY))
        fully_shard(model)
        optimizer = build_optimizer(model, tiny_config(optimizer=name, compile=False), "cpu")
        before = [p.detach().full_tensor() for p in model.parameters()]
        gen, steps = torch.Generator().manual_seed(1), []
        for _ in range(FSDP_STEPS):
            for p in model.parameters():
                grad = torch.randn(p.shape, generator=gen) * 0.1  # (the same on every rank: no scatter)
                p.grad = distribute_tensor(grad, p.device_mesh, p.placements, src_data_rank=None)
            with Collectives() as collectives:
                optimizer.step()
            steps.append(collectives.calls)
        after = [p.detach().full_tensor() for p in model.parameters()]
        ranks = [None] * dist.get_world_size()
        dist.all_gather_object(ranks, steps)
        moved = [not torch.equal(a, b) for (n, p), a, b in zip(model.named_parameters(), after, before)
                 if on_hidden_matrix(n, p)]
        outcome[name] = dict(ranks=ranks, finite=all(torch.isfinite(a).all().item() for a in after),
                             moved=all(moved))
    return outcome


def two_rank_scenarios(tiny_dataset: str, folder) -> list[tuple]:
    return [("dion_fsdp_collectives", "test_optim_dion:collectives_of_fsdp_steps", {})]


def test_dion_under_fsdp_never_gathers_a_matrix(two_ranks):
    """Dion's own FSDP2 sharding: each step's only collectives are its four all-reduces (P of the wide matrices,
    the two Cholesky passes' Grams of the others, R of all), of exactly the r-wide matrices the algorithm sums over
    the ranks' row blocks: per matrix (m x n, r < min(m, n)) max(m, n) x r for P (wide), r x r twice (tall or
    square), min(m, n) x r for R; none holds a whole matrix, and no all-gather, all-to-all or broadcast (nor
    DTensor's full_tensor) runs. The probe sees the whole-matrix gathers of Shampoo's FSDP path."""
    result = scenario_result(two_ranks, "dion_fsdp_collectives")
    hp = tiny_config(optimizer="dion").hyperparameters
    shapes = [tuple(p.shape) for n, p in GPT(GPTConfig(**TINY)).named_parameters() if on_hidden_matrix(n, p)]
    ranks = [authors_rank(shape, hp.rank_fraction, hp.rank_multiple_of) for shape in shapes]
    assert all(r < min(shape) for shape, r in zip(shapes, ranks))
    wide = [(shape, r) for shape, r in zip(shapes, ranks) if shape[0] < shape[1]]
    tall = [(shape, r) for shape, r in zip(shapes, ranks) if shape[0] >= shape[1]]
    assert wide and tall  # both orientations are exercised (mlp.c_proj is wide)
    expected = [("c10d.allreduce_.default", sum(max(shape) * r for shape, r in wide)),
                ("c10d.allreduce_.default", sum(r * r for _, r in tall)),
                ("c10d.allreduce_.default", sum(r * r for _, r in tall)),
                ("c10d.allreduce_.default", sum(min(shape) * r for shape, r in zip(shapes, ranks)))]
    dion = result["dion"]
    assert len(dion["ranks"]) == 2 and dion["finite"] and dion["moved"]
    for steps in dion["ranks"]:
        assert steps == [expected] * FSDP_STEPS, steps
    shampoo = result["shampoo"]
    assert shampoo["finite"]
    gathered = [elements for steps in shampoo["ranks"] for step in steps for name, elements in step
                if "allgather" in name or "all_gather" in name]
    assert gathered and max(gathered) >= max(m * n for m, n in shapes), shampoo["ranks"]
