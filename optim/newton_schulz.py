"""
Orthogonalisation by the quintic Newton-Schulz iteration (NS5), shared by Muon,
Moonlight, MARS-M, MARS-Shampoo and Scion, batched by shape and shared out across ranks.

NS5 maps a matrix G = U S V^T to approximately U V^T without an SVD: five
iterations of X <- a X + b (X X^T) X + c (X X^T)^2 X on X = G / (||G||_F + eps),
with the coefficients (3.4445, -4.7750, 2.0315) of the official MARS and Muon code.
We evaluate each iteration as A = X X^T, X <- a X + (b A + c A A) X: for X of n x m
(n <= m), 4 n^2 m + 2 n^3 FLOPs where the official (A X, then A (A X)) costs 6 n^2 m,
a third less on the 768 x 50304 embedding; the same polynomial, equal up to rounding.

The matrices of one shape (after turning tall ones wide) are stacked and iterated as one
batch: one chain of batched products per shape, not one per matrix (GPT-2 small's 50
matrices are 6 shapes), which is what brings the step to its FLOP floor on a GPU. Each
matrix in a batch is computed as it would be alone: the batched product is the same
product for every member, and the normalising norm is each matrix's own.

The coefficients are a setting (the config key ns_coefficients of every orthogonalising optimizer), one entry
of NS_COEFFICIENTS, which the iteration reads:
  - "quintic" (the default): NS5's fixed (a, b, c) above at every iteration, X = G / (||G||_F + eps), any
    number of steps;
  - "polar_express": Polar Express (Amsel, Persson, Musco, Gower, arXiv 2505.16932), a (a_t, b_t, c_t) per
    iteration, each the optimal odd quintic for the interval the previous ones leave the singular values in,
    on X = G / (||G||_F * 1.02 + 1e-6) (the safety factor 1.02 and that 1e-6 replace the caller's eps), as
    modded-nanogpt's train_gpt.py has it at commit 91955ec65c7f08b9fbae5bacf1d9b2713e167784 (its
    polar_express and polar_express_coeffs: "Computed for num_iters=5, safety_factor=2e-2, cushion=2").
    Its table holds 5 iterations: ns_steps takes the first ns_steps of them (fewer stop early, on
    coefficients tuned for a later finish), more is an error. As with NS5, we take the norm in the input's
    precision (modded-nanogpt takes it on the bf16 copy) and iterate on the wide orientation (modded-nanogpt
    iterates a tall matrix with X^T X on the right: the same polynomial).
  - "simple": the fixed (2, -1.5, 0.5) of modded-nanogpt's optimization track (train_gpt_simple*.py, e.g.
    records/track_3_optimization/results/20260430_muonh at f411b3d, which runs 12 iterations, eps 1e-7), any
    number of steps: a gentler quintic (p'(1) = 0) that needs more iterations than NS5's.
  - "dion": microsoft/dion's five per-iteration triples (at 0a059a4: newton_schulz_triton, the Newton-Schulz of
    their train.py's runs), on X = G / (||G||_F + eps), at most 5 iterations.
"""

import functools
from dataclasses import dataclass
from typing import Any, NamedTuple

import torch

from optim.contract import Hyperparameters, Product, setting
from optim.sharding import on_owner_ranks

NS5_COEFFICIENTS = (3.4445, -4.7750, 2.0315)


class NSCoefficients(NamedTuple):
    """One choice of ns_coefficients: the per-iteration (a, b, c) and the normalisation X = G / (||G||_F * safety
    + eps)."""

    iterations: tuple[tuple[float, float, float], ...]  # iteration t takes iterations[t]
    repeats: bool  # a single triple for every iteration (any number of steps), not a finite list
    safety: float  # 1.0: none (the norm is not multiplied, bit for bit NS5's)
    eps: float | None  # None: the caller's eps (the optimizer's)


NS_COEFFICIENTS = {
    "quintic": NSCoefficients((NS5_COEFFICIENTS,), repeats=True, safety=1.0, eps=None),
    # modded-nanogpt's optimization track, train_gpt_simple*.py's zeropower_via_newtonschulz5
    "simple": NSCoefficients(((2.0, -1.5, 0.5),), repeats=True, safety=1.0, eps=None),
    # modded-nanogpt train_gpt.py at 91955ec65c7f08b9fbae5bacf1d9b2713e167784, polar_express_coeffs
    "polar_express": NSCoefficients((
        (8.156554524902461, -22.48329292557795, 15.878769915207462),
        (4.042929935166739, -2.808917465908714, 0.5000178451051316),
        (3.8916678022926607, -2.772484153217685, 0.5060648178503393),
        (3.285753657755655, -2.3681294933425376, 0.46449024233003106),
        (2.3465413258596377, -1.7097828382687081, 0.42323551169305323),
    ), repeats=False, safety=1.02, eps=1e-6),
    # microsoft/dion at 0a059a4, dion/newton_schulz_triton.py's newton_schulz_triton (and dion/muon.py's
    # zeropower_via_newtonschulz5): what their train.py's Dion2, NorDion2 and Muon runs use
    "dion": NSCoefficients((
        (4.0848, -6.8946, 2.9270),
        (3.9505, -6.3029, 2.6377),
        (3.7418, -5.5913, 2.3037),
        (2.8769, -3.1427, 1.2046),
        (2.8366, -3.0525, 1.2012),
    ), repeats=False, safety=1.0, eps=None),
}


def ns_coefficients_setting(default: str = "quintic") -> Any:
    """The config key ns_coefficients, a field of each orthogonalising optimizer's Hyperparameters."""
    return setting(default, choices=tuple(NS_COEFFICIENTS))


def max_ns_steps(coefficients: str) -> int | None:
    """The most iterations a choice of ns_coefficients holds (None: any number)."""
    table = NS_COEFFICIENTS[coefficients]
    return None if table.repeats else len(table.iterations)


@dataclass
class NewtonSchulzSettings(Hyperparameters):
    """ns_steps and ns_coefficients, for the Hyperparameters of an optimizer that takes both (a base class): a
    config whose ns_steps is more than its ns_coefficients holds is refused as it loads."""

    ns_steps: int = setting(5, 1)
    ns_coefficients: str = ns_coefficients_setting()  # NS5's quintic, Polar Express's, or the modded track's simple

    def __post_init__(self) -> None:
        from errors import ConfigError

        super().__post_init__()
        most = max_ns_steps(self.ns_coefficients)
        if most is not None and self.ns_steps > most:
            raise ConfigError(f"ns_coefficients={self.ns_coefficients!r} holds {most} iterations: ns_steps must be at "
                              f"most {most}, got {self.ns_steps}")


def ns_iterations(coefficients: str, steps: int) -> tuple[tuple[float, float, float], ...]:
    """The (a, b, c) of each of `steps` iterations: a repeating triple `steps` times, or the first `steps` of a
    list; a ValueError for an unknown name or more steps than the list holds."""
    if coefficients not in NS_COEFFICIENTS:
        raise ValueError(f"ns_coefficients {coefficients!r}: choose one of {', '.join(NS_COEFFICIENTS)}")
    table, most = NS_COEFFICIENTS[coefficients], max_ns_steps(coefficients)
    if most is not None and steps > most:
        raise ValueError(f"ns_coefficients={coefficients!r} holds {most} iterations; ns_steps={steps} asks for more")
    return table.iterations * steps if table.repeats else table.iterations[:steps]


def ns5_dtype(device: torch.device) -> torch.dtype:
    """The iteration runs in bf16 on CUDA, as the official code does, and in fp32 elsewhere: on CPU,
    bf16 matrix products measured 50x slower than fp32."""
    return torch.bfloat16 if device.type == "cuda" else torch.float32


def ns5_flops(rows: int, cols: int, steps: int = 5) -> int:
    """The FLOPs of NS5 on one rows x cols matrix: steps x (4 n^2 m + 2 n^3), n <= m its sides."""
    n, m = sorted((rows, cols))
    return steps * (4 * n * n * m + 2 * n**3)


def shape_groups(shapes: list[tuple[int, int]]) -> dict[tuple[int, int], list[int]]:
    """The indices of the matrices of each wide shape (n, m), n <= m: what NS5 runs as one batch."""
    groups: dict[tuple[int, int], list[int]] = {}
    for i, shape in enumerate(shapes):
        groups.setdefault(tuple(sorted(shape)), []).append(i)
    return groups


def ns5_products(shapes: list[tuple[int, int]], steps: int, dtype: torch.dtype) -> list[Product]:
    """The batched products NS5 of these matrices performs, a shape group's batch at a time: per iteration
    A = X X^T, A A and (b A + c A A) X."""
    return [Product(len(members), rows, inner, cols, dtype, steps)
            for (n, m), members in shape_groups(shapes).items() for rows, inner, cols in ((n, m, n), (n, n, n), (n, n, m))]


def _ns5_iterations(x: torch.Tensor, steps: int, coefficients: str = "quintic") -> torch.Tensor:
    """NS5's iterations on a batch of wide matrices (batch, n, m), n <= m, with the coefficients of
    NS_COEFFICIENTS[coefficients] (a name, not numbers: compiled, the coefficients are the graph's constants)."""
    for a, b, c in ns_iterations(coefficients, steps):
        gram = x @ x.mT
        x = a * x + (b * gram + c * gram @ gram) @ x
    return x


@functools.cache
def _compiled_ns5_iterations():
    # Compiled on CUDA, as the official code compiles NS5 (fuses the scalings into the products): one graph
    # per shape group. Wrapped on first use so that importing the optimizers does not import torch._dynamo.
    return torch.compile(_ns5_iterations)


def newton_schulz5_batched(matrices: list[torch.Tensor], steps: int = 5, eps: float = 1e-7,
                           coefficients: str = "quintic") -> list[torch.Tensor]:
    """NS5 of each 2-D matrix, returned in ns5_dtype (bf16 on CUDA, fp32 elsewhere), each as a view of its
    shape group's stacked result. The matrices of one (wide) shape run as one batch. coefficients: a key of
    NS_COEFFICIENTS (its normalisation's eps, where it has one, replaces eps)."""
    ns_iterations(coefficients, steps)  # (refuses a bad choice before any work)
    table = NS_COEFFICIENTS[coefficients]
    eps = eps if table.eps is None else table.eps
    results: list[torch.Tensor] = [None] * len(matrices)
    for members in shape_groups([tuple(matrix.shape) for matrix in matrices]).values():
        # Iterate on the wide orientation, so that X X^T is the smaller Gram matrix.
        wide = [matrices[i].mT if matrices[i].size(0) > matrices[i].size(1) else matrices[i] for i in members]
        norms = torch._foreach_norm([matrices[i] for i in members])  # each matrix's own, in its precision
        if table.safety != 1.0:
            torch._foreach_mul_(norms, table.safety)
        torch._foreach_add_(norms, eps)
        x = torch.stack(wide).div_(torch.stack(norms).view(-1, 1, 1)).to(ns5_dtype(wide[0].device))
        x = (_compiled_ns5_iterations() if x.is_cuda else _ns5_iterations)(x, steps, coefficients)
        for i, result in zip(members, x.unbind()):
            results[i] = result.mT if matrices[i].size(0) > matrices[i].size(1) else result
    return results


def newton_schulz5(matrix: torch.Tensor, steps: int = 5, eps: float = 1e-7,
                   coefficients: str = "quintic") -> torch.Tensor:
    """NS5 of one 2-D matrix, returned in ns5_dtype."""
    return newton_schulz5_batched([matrix], steps, eps, coefficients)[0]


def muon_scale(rows: int, cols: int) -> float:
    """max(1, rows/cols)^0.5: Muon's and MARS-Shampoo's factor on NS5 of a rows x cols matrix."""
    return max(1.0, rows / cols) ** 0.5


def newton_schulz5_across_ranks(matrices: list[torch.Tensor], steps: int, eps: float,
                                pieces: list[int] | None = None, coefficients: str = "quintic") -> list[torch.Tensor]:
    """NS5 of every matrix (in its dtype), each on one owner rank (sharding.on_owner_ranks, balanced by NS5's
    FLOPs), each owner running its matrices batched by shape: sharded matrices (FSDP2) travel there and back
    as row blocks, plain ones (DDP) are computed by their owner and broadcast. Everything travels in
    ns5_dtype, which is what NS5 computes in: bf16 on CUDA (the official code's communication dtype), fp32 on
    CPU, exact either way, with no padding to the largest share (see sharding.on_owner_ranks).
    pieces[i] > 1 orthogonalises matrix i as that many blocks of rows, each on its own (Scion's fused q, k, v).
    coefficients: a key of NS_COEFFICIENTS (newton_schulz5_batched)."""
    if not matrices:
        return []
    ns_iterations(coefficients, steps)  # (refuses a bad choice on every rank, before any exchange)
    pieces = pieces or [1] * len(matrices)

    def orthogonalize(indices: list[int], wholes: list[list[torch.Tensor]]) -> list[list[torch.Tensor]]:
        blocks = [whole.chunk(pieces[i]) for i, (whole,) in zip(indices, wholes)]
        orthogonal = iter(newton_schulz5_batched([block for parts in blocks for block in parts], steps, eps,
                                                          coefficients))
        return [[torch.cat([next(orthogonal) for _ in parts]) if len(parts) > 1 else next(orthogonal)]
                for parts in blocks]

    costs = [count * ns5_flops(m.shape[0] // count, m.shape[1], steps) for m, count in zip(matrices, pieces)]
    results = on_owner_ranks([[m] for m in matrices], orthogonalize, ns5_dtype(matrices[0].device), costs)
    return [result for (result,) in results]
