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
"""

import functools

import torch

from optim.contract import Product
from optim.sharding import on_owner_ranks

NS5_COEFFICIENTS = (3.4445, -4.7750, 2.0315)


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


def _ns5_iterations(x: torch.Tensor, steps: int) -> torch.Tensor:
    """NS5's iterations on a batch of wide matrices (batch, n, m), n <= m."""
    a, b, c = NS5_COEFFICIENTS
    for _ in range(steps):
        gram = x @ x.mT
        x = a * x + (b * gram + c * gram @ gram) @ x
    return x


@functools.cache
def _compiled_ns5_iterations():
    # Compiled on CUDA, as the official code compiles NS5 (fuses the scalings into the products): one graph
    # per shape group. Wrapped on first use so that importing the optimizers does not import torch._dynamo.
    return torch.compile(_ns5_iterations)


def newton_schulz5_batched(matrices: list[torch.Tensor], steps: int = 5, eps: float = 1e-7) -> list[torch.Tensor]:
    """NS5 of each 2-D matrix, returned in ns5_dtype (bf16 on CUDA, fp32 elsewhere), each as a view of its
    shape group's stacked result. The matrices of one (wide) shape run as one batch."""
    results: list[torch.Tensor] = [None] * len(matrices)
    for members in shape_groups([tuple(matrix.shape) for matrix in matrices]).values():
        # Iterate on the wide orientation, so that X X^T is the smaller Gram matrix.
        wide = [matrices[i].mT if matrices[i].size(0) > matrices[i].size(1) else matrices[i] for i in members]
        norms = torch._foreach_norm([matrices[i] for i in members])  # each matrix's own, in its precision
        torch._foreach_add_(norms, eps)
        x = torch.stack(wide).div_(torch.stack(norms).view(-1, 1, 1)).to(ns5_dtype(wide[0].device))
        x = (_compiled_ns5_iterations() if x.is_cuda else _ns5_iterations)(x, steps)
        for i, result in zip(members, x.unbind()):
            results[i] = result.mT if matrices[i].size(0) > matrices[i].size(1) else result
    return results


def newton_schulz5(matrix: torch.Tensor, steps: int = 5, eps: float = 1e-7) -> torch.Tensor:
    """NS5 of one 2-D matrix, returned in ns5_dtype."""
    return newton_schulz5_batched([matrix], steps, eps)[0]


def muon_scale(rows: int, cols: int) -> float:
    """max(1, rows/cols)^0.5: Muon's and MARS-Shampoo's factor on NS5 of a rows x cols matrix."""
    return max(1.0, rows / cols) ** 0.5


def newton_schulz5_across_ranks(matrices: list[torch.Tensor], steps: int, eps: float,
                                pieces: list[int] | None = None) -> list[torch.Tensor]:
    """NS5 of every matrix (in its dtype), each on one owner rank (sharding.on_owner_ranks, balanced by NS5's
    FLOPs), each owner running its matrices batched by shape: sharded matrices (FSDP2) travel there and back
    as row blocks, plain ones (DDP) are computed by their owner and broadcast. Everything travels in
    ns5_dtype, which is what NS5 computes in: bf16 on CUDA (the official code's communication dtype), fp32 on
    CPU, exact either way, with no padding to the largest share (see sharding.exchanged_bytes).
    pieces[i] > 1 orthogonalises matrix i as that many blocks of rows, each on its own (Scion's fused q, k, v)."""
    if not matrices:
        return []
    pieces = pieces or [1] * len(matrices)

    def orthogonalize(indices: list[int], wholes: list[list[torch.Tensor]]) -> list[list[torch.Tensor]]:
        blocks = [whole.chunk(pieces[i]) for i, (whole,) in zip(indices, wholes)]
        orthogonal = iter(newton_schulz5_batched([block for parts in blocks for block in parts], steps, eps))
        return [[torch.cat([next(orthogonal) for _ in parts]) if len(parts) > 1 else next(orthogonal)]
                for parts in blocks]

    costs = [count * ns5_flops(m.shape[0] // count, m.shape[1], steps) for m, count in zip(matrices, pieces)]
    results = on_owner_ranks([[m] for m in matrices], orthogonalize, ns5_dtype(matrices[0].device), costs)
    return [result for (result,) in results]
