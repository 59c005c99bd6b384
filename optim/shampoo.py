"""
Distributed Shampoo (Shi et al., 2023, "A Distributed Data-Parallel PyTorch Implementation of the Distributed
Shampoo Optimizer for Training Neural Networks At-Scale", arXiv 2309.06497; the AlgoPerf winner), as the authors'
facebookresearch/optimizers at f606606 runs it by default on one process (distributed_shampoo/distributed_shampoo.py,
shampoo_types.py, preconditioner/shampoo_preconditioner_list.py, preconditioner/matrix_functions.py,
preconditioner/adagrad_preconditioner_list.py, distributor/shampoo_distributor.py, utils/shampoo_utils.py).

Each parameter is first merged and blocked: its dimensions of size 1 dropped, adjacent dimensions merged from the
last while their product stays within max_preconditioner_dim (down to one dimension: a 32 x 32 matrix under 1024 is
one vector of 1024), then cut into blocks of at most max_preconditioner_dim along every dimension. A block B of
order k (1: a vector, 2: a matrix) with gradient G keeps a factor per dimension and its root inverse; with the step
count t, per block:

    L <- beta2 L + w G G^T,  R <- beta2 R + w G^T G   (a vector: L <- beta2 L + w g g^T; w = 1 if beta2 = 1 else 1-beta2)
    every precondition_frequency steps (and at start_preconditioning_step):
        X^(-1/r) of X = L / (1 - beta2^t) (bias correction when beta2 < 1), by eigh of X + eps I, eigenvalues
        lambda shifted to lambda - min(lambda) + eps where min(lambda) < eps: Q diag(lambda^(-1/r)) Q^T;
        r = 1 / inverse_exponent, by default 2k (the -1/4 power of a matrix's factors, -1/2 of a vector's)
    m <- lerp(m, G, 1 - beta1);  M = m / (1 - beta1^t)   (the filtered gradient; beta3 as below)
    P = L^(-1/r)^T M R^(-1/r)                            (P = L^(-1/r)^T M for a vector; identity roots until the first)
    grafting: v <- beta2_g v + (1-beta2_g) G^2 (adam, rmsprop; adagrad: v + G^2), D = M / (sqrt(v / c) + eps_g)
        (c = 1 - beta2_g^t for adam, else 1; sgd: D = M); P <- P ||D|| / (||P|| + 1e-16) per block, and
        P = D instead while t < start_preconditioning_step
    W <- W - lr (P + weight_decay W)                     (decoupled decay)

beta3 (-1: beta1) filters the gradient of this step alone, M = lerp(m_{t-1}, G, 1 - beta3) / (1 - beta3 beta1^(t-1)).
Defaults are the package's: lr 1e-2, betas (0.9, 1.0), epsilon 1e-12, weight decay 0, max_preconditioner_dim 1024,
precondition_frequency 1, start_preconditioning_step -1 (= precondition_frequency), bias correction on, the
root-inverse preconditioner by eigendecomposition (DefaultShampooConfig: EigenConfig, perturbation before it), the
exponent 1/(2 order), no grafting, no iterate averaging or momentum (iterate_averaging_config None).

Routing: shampoo_routing "all" puts every parameter on Shampoo, as the package takes whatever it is given (decay
groups as SOAP's: the matrices decay, the embeddings with decay_embeddings, 1-D never); "blocks" puts only the
blocks' matrices on it and the embeddings and 1-D parameters on AdamW (lr_embeddings, lr_1d, betas *_1d, eps_1d,
weight_decay_1d), as modded-nanogpt's optimization-track Shampoo run (records/track_3_optimization/results/
20260513_shampoo_1_4_power).

The step is batched: the blocks of one shape (of one dtype and device) across the group's parameters are stacked,
and the factor updates, the root inverses (batched eigh, only on the steps that refresh them) and the
preconditioning products each run once per stack; at max_preconditioner_dim 1024 GPT-2 small's 48 blocks'
matrices are blocks of 4 shapes (its embeddings add one, 1024 x 768, and a last 128 x 768 block). A refresh leaves
each block's root inverses as views of their stack, which the preconditioning then takes as it is (no copy per step).
The filtered gradient and the grafting statistic are element-wise, in foreach ops over whole parameters; the grafting
norms are one foreach norm over the blocks. products() lists the stacked products.

Under data_parallel=fsdp (optim/sharding.py) blocks cut across ranks' rows, so, as SOAP does, every rank gathers each
parameter's gradient, m and v whole (one all-gather for all of them), runs the step on whole tensors as one process,
keeping the factors and root inverses whole (plain tensors, the same on every rank), and keeps its rows of p, m and
v. Under DDP every rank runs the same step on the same averaged gradients.

Where we differ (docs/optimizers.md, "Distributed Shampoo"): the factors and root inverses are kept in float32, or
float64 for float64 parameters (the package's factor_matrix_dtype float32 whatever the parameters), whole (the
package packs each symmetric matrix's upper triangle, use_symmetric_packing, half the memory, the same numbers); the
outer products are taken in the factors' dtype (the package's in the gradient's, then added); the bias corrections
and lr are Python floats (the package's 0-d float32 tensors, rounded to float32); the minimum eigenvalue is compared
on the device, with no host sync (the package reads it with .item()); an eigh that fails is retried in float64 for
the whole stack, and one that fails again raises (the package retries alone and then keeps the old root inverse, up
to 3 times); no check for non-finite factors (the package raises, after a host sync). Not supported: L2 and the
corrected and independent weight decay types, iterate averaging (momentum, Nesterov, GPA, Schedule-Free), the other
preconditioner configs (eigendecomposed, eigenvalue-corrected, KL, spectral and sign descent), per-order exponent
overrides (one inverse_exponent for every order), trace scaling, parameters of more than 2 dimensions.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Hashable, Iterable
from dataclasses import dataclass

import torch
import torch.nn as nn

from errors import ConfigError
from optim.adamw import SideAdamW
from optim.contract import Loop, MatrixProducts, Product, beta, positive, setting
from optim.routing import Route, routed_params, routing
from optim.rules import GroupwiseOptimizer, adamw_update
from optim.sharding import gather_whole, local, local_rows

Tensors = list[torch.Tensor]
GRAFTING = ("none", "sgd", "adagrad", "rmsprop", "adam")
ROUTINGS = ("all", "blocks")
GRAFTING_NORM_EPS = 1e-16  # the package's, added to the Shampoo direction's norm


@dataclass
class ShampooHyperparameters(SideAdamW):
    # The package's defaults (DistributedShampoo.__init__ and DefaultShampooConfig at f606606)
    weight_decay: float = setting(0.0, 0.0)
    beta1: float = beta(0.9)
    beta2: float = setting(1.0, 0.0, 1.0)  # the factors' EMA rate; 1: AdaGrad's sums
    beta3: float = setting(-1.0, -1.0, 1.0, high_open=True)  # this step's gradient filter; -1: beta1
    epsilon: float = positive(1e-12)
    max_preconditioner_dim: int = setting(1024, 1)
    precondition_frequency: int = setting(1, 1)
    start_preconditioning_step: int = setting(-1, -1)  # -1: precondition_frequency
    use_bias_correction: bool = True
    inverse_exponent: float = setting(-1.0, -1.0, 1.0)  # the root inverse's exponent; -1: 1 / (2 order)
    grafting: str = setting("none", choices=GRAFTING)  # grafting_config: None, SGD, AdaGrad, RMSprop or Adam
    grafting_beta2: float = setting(0.999, 0.0, 1.0)  # RMSprop's and Adam's (the package's Adam default)
    grafting_eps: float = positive(1e-10)
    decay_embeddings: bool = True
    shampoo_routing: str = setting("all", choices=ROUTINGS)  # "blocks": embeddings and 1-D on AdamW
    lr_embeddings: float = positive(3e-3)  # shampoo_routing "blocks": the embeddings' (and tied head's) AdamW lr
    eps_1d: float = positive(1e-8)  # shampoo_routing "blocks": the AdamW's eps

    state_keys = ("max_preconditioner_dim", "grafting", "decay_embeddings", "shampoo_routing")

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.beta3 != -1 and not 0.0 <= self.beta3 < 1.0:
            raise ConfigError(f"config key 'beta3' must be -1 (beta1) or in [0, 1), got {self.beta3}")
        if self.inverse_exponent != -1 and not 0.0 < self.inverse_exponent <= 1.0:
            raise ConfigError("config key 'inverse_exponent' must be -1 (1 / (2 order)) or in (0, 1], got "
                              f"{self.inverse_exponent}")
        if self.start_preconditioning_step != -1 and self.start_preconditioning_step < self.precondition_frequency:
            raise ConfigError("config key 'start_preconditioning_step' must be -1 or at least precondition_frequency "
                              f"({self.precondition_frequency}), got {self.start_preconditioning_step}")

    def display_name(self) -> str:
        return "Shampoo"


class Shampoo(MatrixProducts, GroupwiseOptimizer):
    """Param groups with use_shampoo=True take Shampoo, those with use_shampoo=False AdamW (their betas, eps,
    weight_decay). State per Shampoo parameter p: step, exp_avg (the filtered gradient m, when beta1 > 0) and
    grafting (v, for AdaGrad, RMSprop and Adam grafting), in p's layout; factors and roots, a list of matrices
    per block and dimension of it (in the order of the blocks), whole on every rank."""

    side_state_sharded = False  # the factors and root inverses whole on every rank under FSDP (bench.memory)

    def __init__(self, params: Iterable, lr: float = 1e-2, betas: tuple[float, float] = (0.9, 1.0), beta3: float = -1.0,
                 epsilon: float = 1e-12, weight_decay: float = 0.0, max_preconditioner_dim: int = 1024,
                 precondition_frequency: int = 1, start_preconditioning_step: int = -1, use_bias_correction: bool = True,
                 inverse_exponent: float = -1.0, grafting: str = "none", grafting_beta2: float = 0.999,
                 grafting_eps: float = 1e-10, *, adamw_betas: tuple[float, float] = (0.9, 0.95), adamw_eps: float = 1e-8,
                 compiled: bool = False):
        if grafting not in GRAFTING:
            raise ValueError(f"grafting {grafting!r}: choose one of {', '.join(GRAFTING)}")
        self.compiled = compiled
        self.shampoo_defaults = dict(
            lr=lr, betas=betas, beta3=beta3, epsilon=epsilon, weight_decay=weight_decay,
            max_preconditioner_dim=max_preconditioner_dim, precondition_frequency=precondition_frequency,
            start_preconditioning_step=start_preconditioning_step, use_bias_correction=use_bias_correction,
            inverse_exponent=inverse_exponent, grafting=grafting, grafting_beta2=grafting_beta2,
            grafting_eps=grafting_eps)
        self.adamw_defaults = dict(lr=lr, betas=adamw_betas, eps=adamw_eps, weight_decay=weight_decay)
        params = list(params)
        if params and not isinstance(params[0], dict):
            params = [dict(params=params, use_shampoo=True)]
        super().__init__(params, defaults={})

    def add_param_group(self, param_group: dict) -> None:
        param_group.setdefault("use_shampoo", True)
        for key, value in (self.shampoo_defaults if param_group["use_shampoo"] else self.adamw_defaults).items():
            param_group.setdefault(key, value)
        if param_group["use_shampoo"] and any(p.ndim > 2 for p in param_group["params"]):
            raise ValueError("Shampoo here takes parameters of at most 2 dimensions")
        super().add_param_group(param_group)

    # ------------------------------------------------------------------------- the step

    def update_group(self, group: dict, params: Tensors) -> None:
        if not group["use_shampoo"]:
            adamw_update(self.state, params, group["lr"], group["betas"], group["eps"], group["weight_decay"],
                         amsgrad=False, compiled=self.compiled)
            return
        for p in params:
            self._start_state(p, group)
        states = [self.state[p] for p in params]
        for state in states:
            state["step"] += 1
        step = states[0]["step"]
        # every parameter's gradient, m and v whole, in one all-gather for all of them
        kept = [self._moments(p) for p in params]
        gathered = gather_whole([t for p, moments in zip(params, kept) for t in (p.grad, *moments)])
        width = 1 + len(kept[0])
        grads = gathered[::width]
        moments = [gathered[i * width + 1: (i + 1) * width] for i in range(len(params))]
        blocks = [block_slices(p.shape, group["max_preconditioner_dim"]) for p in params]
        merged = [merged_shape(p.shape, group["max_preconditioner_dim"]) for p in params]

        def cut(tensors: Tensors) -> Tensors:
            """Each tensor's blocks (views), in order, the tensors in params' order."""
            return [t.view(shape)[s] for t, shape, slices in zip(tensors, merged, blocks) for s in slices]

        factors = [f for state in states for f in state["factors"]]
        root_slots = [(state["roots"], j) for state in states for j in range(len(state["roots"]))]
        block_stacks = stacks_of_blocks(cut(grads), factors, [lists[j] for lists, j in root_slots])
        beta1, beta2 = group["betas"]
        bias_correction2 = 1.0 - beta2**step if group["use_bias_correction"] and beta2 < 1.0 else 1.0
        start = group["start_preconditioning_step"]
        start = group["precondition_frequency"] if start == -1 else start
        refresh = (step % group["precondition_frequency"] == 0 and step > start) or step == start
        for _, stack in block_stacks:
            accumulate_factors(stack, beta2)
            if not refresh:
                continue
            # each block's new root inverses are views of their stack, which precondition then takes whole
            for slots, inverses in zip(stack.slots, refreshed_roots(stack, bias_correction2, group["epsilon"],
                                                                    group["inverse_exponent"])):
                for slot, inverse in zip(slots, inverses.unbind(0)):
                    lists, j = root_slots[slot]
                    lists[j] = inverse
        roots = [lists[j] for lists, j in root_slots]

        grafting = group["grafting"]
        if grafting in ("adagrad", "rmsprop", "adam"):
            v = [m[-1] for m in moments]
            if grafting == "adagrad":
                torch._foreach_addcmul_(v, grads, grads)
            else:
                torch._foreach_mul_(v, group["grafting_beta2"])
                torch._foreach_addcmul_(v, grads, grads, value=1.0 - group["grafting_beta2"])
        filtered = self._filtered_gradients(grads, [m[0] for m in moments] if beta1 > 0 else None, group, step)
        if grafting != "none":
            directions = grafting_directions(filtered, v if grafting != "sgd" else None, group, step)
        if grafting != "none" and step < start:
            updates = directions if grafting != "sgd" else [d.clone() for d in directions]  # (not m or p.grad)
        else:
            updates = [torch.empty_like(g) for g in grads]
            shampoo = precondition(stacks_of_blocks(cut(filtered), factors, roots), [b.dtype for b in cut(grads)])
            if grafting != "none":
                grafted = torch._foreach_norm(cut(directions))
                norms = torch._foreach_norm(shampoo)
                torch._foreach_add_(norms, GRAFTING_NORM_EPS)
                torch._foreach_div_(grafted, norms)
                torch._foreach_mul_(shampoo, grafted)
            torch._foreach_copy_(cut(updates), shampoo)
        blocks_here = local(params)
        updates = [u[local_rows(p)] for u, p in zip(updates, params)]
        if group["weight_decay"] > 0.0:
            torch._foreach_add_(updates, blocks_here, alpha=group["weight_decay"])
        torch._foreach_mul_(updates, -group["lr"])
        torch._foreach_add_(blocks_here, updates)
        self._keep_own_rows(params, moments)

    def _start_state(self, p: torch.Tensor, group: dict) -> None:
        state = self.state[p]
        if state:
            return
        state["step"] = 0
        if group["betas"][0] > 0.0:
            state["exp_avg"] = torch.zeros_like(p.grad)
        if group["grafting"] in ("adagrad", "rmsprop", "adam"):
            state["grafting"] = torch.zeros_like(p.grad)
        dtype = factor_dtype(p.dtype)
        sides = [n for block in block_shapes(p.shape, group["max_preconditioner_dim"]) for n in block]
        state["factors"] = [torch.zeros(n, n, dtype=dtype, device=p.device) for n in sides]
        state["roots"] = [torch.eye(n, dtype=dtype, device=p.device) for n in sides]

    def _moments(self, p: torch.Tensor) -> Tensors:
        return [self.state[p][key] for key in ("exp_avg", "grafting") if key in self.state[p]]

    def _filtered_gradients(self, grads: Tensors, exp_avgs: Tensors | None, group: dict, step: int) -> Tensors:
        """M: the filtered gradient, bias-corrected (the gradients themselves when beta1 is 0)."""
        beta1 = group["betas"][0]
        if exp_avgs is None:
            return grads
        beta3 = beta1 if group["beta3"] == -1 else group["beta3"]
        filtered = torch._foreach_lerp(exp_avgs, grads, 1.0 - beta3) if beta3 != beta1 else exp_avgs
        torch._foreach_lerp_(exp_avgs, grads, 1.0 - beta1)
        if group["use_bias_correction"]:
            return torch._foreach_div(filtered, 1.0 - beta3 * beta1 ** (step - 1))
        return filtered

    def _keep_own_rows(self, params: Tensors, moments: list[Tensors]) -> None:
        """Under FSDP, this rank's rows of the whole m and v into its blocks of them."""
        if not moments[0] or moments[0][0] is self._moments(params[0])[0]:
            return  # not sharded (or nothing kept): the state itself, updated in place
        blocks = local([t for p in params for t in self._moments(p)])
        torch._foreach_copy_(blocks, [whole[local_rows(p)] for p, kept in zip(params, moments) for whole in kept])

    # ------------------------------------------------------------------------- what it costs

    def products(self) -> list[Product]:
        """The stacked products of one step on one process, as update_group runs them: per stack of blocks of one
        shape, the factors' outer products and the preconditioning products every step, and on refresh steps (one
        in precondition_frequency) each root inverse's Q diag Q^T. Not counted: eigh (not a product)."""
        products = []
        for group in self.param_groups:
            if not group["use_shampoo"]:
                continue
            counts: dict[Hashable, int] = {}
            for p in group["params"]:
                for shape in block_shapes(p.shape, group["max_preconditioner_dim"]):
                    key = (shape, factor_dtype(p.dtype))
                    counts[key] = counts.get(key, 0) + 1
            for (shape, dtype), batch in counts.items():
                products += block_products(batch, shape, dtype, group["precondition_frequency"])
        return products


# ----------------------------------------------------------------------------- blocks


def factor_dtype(dtype: torch.dtype) -> torch.dtype:
    """The factors' and root inverses' dtype: float32 (the package's), float64 for float64 parameters."""
    return torch.promote_types(dtype, torch.float32)


def merged_shape(shape: tuple[int, ...], max_dim: int) -> tuple[int, ...]:
    """The package's merge_small_dims to one dimension: sizes of 1 dropped, then from the last dimension, each
    merged into the one after it while their product stays within max_dim."""
    sizes = [n for n in reversed(shape) if n != 1] or [1]
    merged = [sizes[0]]
    for n in sizes[1:]:
        if merged[-1] * n <= max_dim:
            merged[-1] *= n
        else:
            merged.append(n)
    return tuple(reversed(merged))


def block_slices(shape: tuple[int, ...], max_dim: int) -> list[tuple[slice, ...]]:
    """The blocks of a parameter's merged shape: every dimension cut into pieces of max_dim, the first dimension's
    pieces outermost (the package's multi_dim_split)."""
    pieces = [[slice(i, min(i + max_dim, n)) for i in range(0, n, max_dim)] for n in merged_shape(shape, max_dim)]
    return list(itertools.product(*pieces))


def block_shapes(shape: tuple[int, ...], max_dim: int) -> list[tuple[int, ...]]:
    return [tuple(s.stop - s.start for s in block) for block in block_slices(shape, max_dim)]


class BlockStack:
    """The blocks of one shape and dtypes: their stacked tensor (in the factors' dtype) and, per dimension, each
    block's factor and root inverse (the state's own tensors) and their indices in the lists given."""

    def __init__(self, blocks: Tensors, factors: list[Tensors], roots: list[Tensors], slots: list[list[int]]):
        self.dtype = factors[0][0].dtype
        self.stacked = torch.stack([b.to(self.dtype) for b in blocks]) if len(blocks) > 1 else blocks[0][None].to(
            self.dtype)
        self.factors, self.roots, self.slots = factors, roots, slots
        self.order = blocks[0].ndim


def stacks_of_blocks(blocks: Tensors, factors: Tensors, roots: Tensors) -> list[tuple[list[int], BlockStack]]:
    """The blocks grouped into stacks by shape, dtype and device (each with the indices of its blocks); factors
    and roots are every block's, dimension by dimension, in the blocks' order."""
    by_key: dict[Hashable, list[int]] = {}
    for i, b in enumerate(blocks):
        by_key.setdefault((tuple(b.shape), b.dtype, b.device), []).append(i)
    first_side = list(itertools.accumulate([b.ndim for b in blocks], initial=0))
    result = []
    for members in by_key.values():
        order = blocks[members[0]].ndim
        sides = [[first_side[i] + d for i in members] for d in range(order)]
        result.append((members, BlockStack([blocks[i] for i in members], [[factors[j] for j in side] for side in sides],
                                           [[roots[j] for j in side] for side in sides], sides)))
    return result


def outer_products(stack: torch.Tensor, order: int) -> Tensors:
    """Per dimension, the stacked contractions of each block with itself over its other dimensions: G G^T and
    G^T G for matrices, g g^T for vectors."""
    if order == 1:
        return [stack[:, :, None] @ stack[:, None, :]]
    return [stack @ stack.mT, stack.mT @ stack]


def accumulate_factors(stack: BlockStack, beta2: float) -> None:
    """L <- beta2 L + w G G^T (per dimension), w = 1 when beta2 is 1, else 1 - beta2, into each block's factors."""
    weight = 1.0 if beta2 == 1.0 else 1.0 - beta2
    for factors, outer in zip(stack.factors, outer_products(stack.stacked, stack.order)):
        if beta2 != 1.0:
            torch._foreach_mul_(factors, beta2)
        torch._foreach_add_(factors, list(outer.unbind(0)), alpha=weight)


def refreshed_roots(stack: BlockStack, bias_correction2: float, epsilon: float, inverse_exponent: float) -> Tensors:
    """The blocks' root inverses from their factors, a stack per dimension."""
    exponent = 1.0 / (2 * stack.order) if inverse_exponent == -1 else inverse_exponent
    return [root_inverse(torch.stack(factors) / bias_correction2, exponent, epsilon) for factors in stack.factors]


def root_inverse(matrices: torch.Tensor, exponent: float, epsilon: float) -> torch.Tensor:
    """A^(-exponent) of a stack of symmetric matrices as the package's EigenConfig: eigh of A + eps I (in float64
    if it fails, for the whole stack), eigenvalues below eps shifted up by eps - their minimum, Q diag(l^-e) Q^T."""
    n = matrices.shape[-1]
    ridged = matrices + epsilon * torch.eye(n, dtype=matrices.dtype, device=matrices.device)
    try:
        values, vectors = eigh(ridged)
    except torch.linalg.LinAlgError:
        values, vectors = eigh(ridged.double())
        values, vectors = values.to(matrices.dtype), vectors.to(matrices.dtype)
    smallest = values.amin(-1, keepdim=True)
    values = torch.where(smallest < epsilon, values - smallest + epsilon, values)
    return vectors * values.pow(-exponent).unsqueeze(-2) @ vectors.mT


def eigh(matrices: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """torch.linalg.eigh of a stack: one batched call on an accelerator; on the CPU matrix by matrix, as LAPACK
    (which has no batched eigh) runs them anyway, since torch's batched CPU path was measured 10-30x slower than
    its calls one at a time (a 2 x 64 x 64 stack: 25 ms against 0.7 ms)."""
    if matrices.device.type != "cpu":
        return torch.linalg.eigh(matrices)
    values, vectors = zip(*(torch.linalg.eigh(m) for m in matrices.unbind(0)))
    return torch.stack(values), torch.stack(vectors)


def precondition(indexed_stacks: list[tuple[list[int], BlockStack]], dtypes: list[torch.dtype]) -> Tensors:
    """Each block's L^T M R (L^T m for a vector) with its root inverses, batched per stack, in the blocks' order,
    each in its block's dtype (dtypes)."""
    results: list[torch.Tensor | None] = [None] * len(dtypes)
    for members, stack in indexed_stacks:
        x = stack.stacked
        left = as_stack(stack.roots[0])
        if stack.order == 1:
            x = (x[:, None, :] @ left)[:, 0, :]
        else:
            x = left.mT @ x @ as_stack(stack.roots[1])
        for i, block in zip(members, x.unbind(0)):
            results[i] = block.to(dtypes[i])
    return results


def as_stack(matrices: Tensors) -> torch.Tensor:
    """The matrices stacked: the stack they are views of, in order, when they are (the root inverses since their
    last refresh), else a copy (torch.stack: the first root inverses, or those a checkpoint restored)."""
    base, size = matrices[0]._base, matrices[0].numel()
    if (base is not None and base.shape == (len(matrices), *matrices[0].shape) and base.is_contiguous()
            and all(m._base is base and m.storage_offset() == base.storage_offset() + i * size
                    for i, m in enumerate(matrices))):
        return base
    return torch.stack(matrices)


def grafting_directions(filtered: Tensors, v: Tensors | None, group: dict, step: int) -> Tensors:
    """D = M / (sqrt(v / c) + eps_g) (c = 1 - beta2_g^t for Adam grafting, else 1); M itself for SGD grafting."""
    if v is None:
        return filtered
    correction = 1.0 - group["grafting_beta2"] ** step if group["grafting"] == "adam" else 1.0
    denominators = torch._foreach_div(v, correction)
    torch._foreach_sqrt_(denominators)
    torch._foreach_add_(denominators, group["grafting_eps"])
    return torch._foreach_div(filtered, denominators)


def block_products(batch: int, shape: tuple[int, ...], dtype: torch.dtype, precondition_frequency: int) -> list[Product]:
    """The stacked products of one step for `batch` blocks of this shape (n x k; a vector n): the factors' outer
    products and the preconditioning L^T M, then . R, every step; on refresh steps each factor's Q diag Q^T."""
    if len(shape) == 1:
        (n,) = shape
        return [Product(batch, n, 1, n, dtype), Product(batch, 1, n, n, dtype),
                Product(batch, n, n, n, dtype, 1.0 / precondition_frequency)]
    n, k = shape
    return [Product(batch, n, k, n, dtype), Product(batch, k, n, k, dtype),
            Product(batch, n, n, k, dtype), Product(batch, n, k, k, dtype),
            Product(batch, n, n, n, dtype, 1.0 / precondition_frequency),
            Product(batch, k, k, k, dtype, 1.0 / precondition_frequency)]


def build_shampoo(model: nn.Module, hp: ShampooHyperparameters, loop: Loop) -> Shampoo:
    """shampoo_routing "all": every parameter on Shampoo (the decay groups of decay_routing); "blocks": the blocks'
    matrices on Shampoo, the embeddings (lr_embeddings) and 1-D parameters (lr_1d) on AdamW."""
    if hp.shampoo_routing == "all":
        table = routing(Route("shampoo", True), Route("shampoo", hp.decay_embeddings), Route("shampoo", False))
    else:
        table = routing(Route("shampoo", True), Route("adamw", True, lr="lr_embeddings"), Route("adamw", True, lr="lr_1d"))
    groups = []
    for route, params in routed_params(model, table):
        if route.rule == "shampoo":
            groups.append(dict(params=params, use_shampoo=True, weight_decay=hp.weight_decay if route.decay else 0.0))
        else:
            groups.append(dict(params=params, use_shampoo=False, lr=getattr(hp, route.lr),
                               weight_decay=hp.weight_decay_1d))
    return Shampoo(groups, lr=loop.learning_rate, betas=(hp.beta1, hp.beta2), beta3=hp.beta3, epsilon=hp.epsilon,
                   weight_decay=hp.weight_decay, max_preconditioner_dim=hp.max_preconditioner_dim,
                   precondition_frequency=hp.precondition_frequency,
                   start_preconditioning_step=hp.start_preconditioning_step, use_bias_correction=hp.use_bias_correction,
                   inverse_exponent=hp.inverse_exponent, grafting=hp.grafting, grafting_beta2=hp.grafting_beta2,
                   grafting_eps=hp.grafting_eps, adamw_betas=(hp.beta1_1d, hp.beta2_1d), adamw_eps=hp.eps_1d,
                   compiled=loop.compiled)
