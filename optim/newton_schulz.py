"""
Orthogonalisation by the quintic Newton-Schulz iteration (NS5), shared by Muon,
Moonlight, MARS-M and MARS-Shampoo, and its work shared out across ranks.

NS5 maps a matrix G = U S V^T to approximately U V^T without an SVD: five
iterations of X <- a X + b (X X^T) X + c (X X^T)^2 X on X = G / (||G||_F + eps),
with the coefficients (3.4445, -4.7750, 2.0315) of the official MARS and Muon code.
We evaluate each iteration as A = X X^T, X <- a X + (b A + c A A) X: for X of n x m
(n <= m), 4 n^2 m + 2 n^3 FLOPs where the official (A X, then A (A X)) costs 6 n^2 m,
a third less on the 768 x 50304 embedding; the same polynomial, equal up to rounding.
"""

import functools

import torch

from optim.sharding import on_owner_ranks

NS5_COEFFICIENTS = (3.4445, -4.7750, 2.0315)


def ns5_dtype(device: torch.device) -> torch.dtype:
    """The iteration runs in bf16 on CUDA, as the official code does, and in fp32 elsewhere: on CPU,
    bf16 matrix products measured 50x slower than fp32."""
    return torch.bfloat16 if device.type == "cuda" else torch.float32


def _ns5_iterations(x: torch.Tensor, steps: int) -> torch.Tensor:
    a, b, c = NS5_COEFFICIENTS
    for _ in range(steps):
        gram = x @ x.mT
        x = a * x + (b * gram + c * gram @ gram) @ x
    return x


@functools.cache
def _compiled_ns5_iterations():
    # Compiled on CUDA, as the official code compiles NS5 (fuses the scalings into the products);
    # wrapped on first use so that importing the optimizers does not import torch._dynamo.
    return torch.compile(_ns5_iterations)


def newton_schulz5(matrix: torch.Tensor, steps: int = 5, eps: float = 1e-7) -> torch.Tensor:
    """NS5 of a 2-D matrix, returned in ns5_dtype (bf16 on CUDA, fp32 elsewhere)."""
    x = matrix.to(ns5_dtype(matrix.device)) / (matrix.norm() + eps)
    # Iterate on the wide orientation, so that X X^T is the smaller Gram matrix.
    tall = matrix.size(0) > matrix.size(1)
    if tall:
        x = x.mT
    x = (_compiled_ns5_iterations() if matrix.is_cuda else _ns5_iterations)(x, steps)
    return x.mT if tall else x


def muon_scale(rows: int, cols: int) -> float:
    """max(1, rows/cols)^0.5: Muon's and MARS-Shampoo's factor on NS5 of a rows x cols matrix."""
    return max(1.0, rows / cols) ** 0.5


def newton_schulz5_across_ranks(matrices: list[torch.Tensor], steps: int, eps: float) -> list[torch.Tensor]:
    """NS5 of every matrix (in its dtype), each on one owner rank (sharding.on_owner_ranks): sharded matrices
    (FSDP2) travel there and back as row blocks, plain ones (DDP) are computed by their owner and broadcast.
    Everything travels in ns5_dtype, which is what NS5 computes in: bf16 on CUDA (the official code's
    communication dtype), fp32 on CPU, exact either way, with no padding to the largest share (see
    sharding.exchanged_bytes)."""
    if not matrices:
        return []
    results = on_owner_ranks([[m] for m in matrices], lambda i, whole: [newton_schulz5(whole[0], steps, eps)],
                             ns5_dtype(matrices[0].device))
    return [result for (result,) in results]
