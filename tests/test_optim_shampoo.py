"""
Distributed Shampoo (optim/shampoo.py) against a float64 restatement of its authors' default, non-distributed step:
facebookresearch/optimizers at f606606, distributed_shampoo/distributed_shampoo.py (DistributedShampoo.step,
_per_group_step_impl, _compute_search_directions: factors, filtered gradient, preconditioning and grafting, decoupled
weight decay, -lr), distributor/shampoo_distributor.py (Distributor: merge_small_dims, multi_dim_split),
utils/shampoo_utils.py (merge_small_dims, multi_dim_split), preconditioner/shampoo_preconditioner_list.py
(RootInvShampooPreconditionerList: the factors' update, bias correction, amortized root inverse, _precondition_grad),
preconditioner/matrix_functions.py (matrix_inverse_root with EigenConfig and PerturbationConfig),
preconditioner/adagrad_preconditioner_list.py (the AdaGrad, RMSprop and Adam grafting), shampoo_types.py (the
defaults: DefaultShampooConfig, AdamPreconditionerConfig). The package is not on PyPI, so it is restated here, block by
block, with tensordot as the package contracts; ours runs through the registry on a tiny GPT on the same gradients.

Two settings: the package's defaults (betas 0.9/1.0, epsilon 1e-12, max_preconditioner_dim 1024, which merges the
32 x 32 and 16 x 32 matrices into vectors of 1024 and 512, the root inverses every step from the first); and
modded-nanogpt's optimization-track recipe (records/track_3_optimization/results/20260513_shampoo_1_4_power: betas
0.9/0.95, weight decay, Adam grafting with beta2 0.95 and eps 1e-10, root inverses every 3 steps from step 3 with
grafting alone before, the embeddings and 1-D parameters on torch's AdamW), with max_preconditioner_dim 48 so that the
tiny model's matrices and vectors are cut into blocks of several shapes.
"""

import math

import pytest
import torch

from model import GPT, GPTConfig
from optim import build_optimizer
from parity import lr_multiplier, scheduled_step
from test_optim import TINY, tiny_config

STEPS = 6
RECORD = dict(beta1=0.9, beta2=0.95, weight_decay=0.2, grafting="adam", grafting_beta2=0.95, grafting_eps=1e-10,
              precondition_frequency=3, max_preconditioner_dim=48, shampoo_routing="blocks", lr_embeddings=2e-3,
              lr_1d=1e-2, beta1_1d=0.8, beta2_1d=0.95, eps_1d=1e-10, weight_decay_1d=0.0, learning_rate=1.5e-3)


# ----------------------------------------------------------------------------- the package, restated in float64


def merge_small_dims(shape, threshold):
    """utils/shampoo_utils.py merge_small_dims with target_tensor_dimensionality 1 (the default)."""
    squeezed = [n for n in reversed(shape) if n != 1] or [1]
    merged = [squeezed[0]]
    for processed, n in enumerate(squeezed[1:], start=1):
        if len(merged) + len(squeezed) - processed > 1 and merged[-1] * n <= threshold:
            merged[-1] *= n
        else:
            merged.append(n)
    return tuple(reversed(merged))


def multi_dim_split(tensor, size):
    pieces = (tensor,)
    for dim in range(tensor.dim()):
        pieces = tuple(s for t in pieces for s in torch.split(t, size, dim=dim))
    return pieces


def matrix_inverse_root(A, root, epsilon):
    """matrix_functions.py matrix_inverse_root, EigenConfig, PerturbationConfig(perturb_before_computation=True)."""
    L, Q = torch.linalg.eigh(A + epsilon * torch.eye(A.shape[0], dtype=A.dtype))
    lambda_min = torch.min(L).item()
    if lambda_min < epsilon:
        L = L + (-lambda_min)
        L = L + epsilon
    return Q * L.pow(-1.0 / root).unsqueeze(0) @ Q.T


class PackageShampoo:
    """DistributedShampoo(params, lr, betas, beta3, epsilon, weight_decay, max_preconditioner_dim, precondition_frequency,
    start_preconditioning_step, use_bias_correction, grafting_config) on one device, in float64: the state per block."""

    def __init__(self, params, hp, decays):
        self.params, self.hp, self.decays = params, hp, decays
        self.step_count = 0
        max_dim = hp["max_preconditioner_dim"]
        self.blocks = [multi_dim_split(p.view(merge_small_dims(tuple(p.shape), max_dim)), max_dim) for p in params]
        self.state = [[dict(factors=[torch.zeros(n, n, dtype=b.dtype) for n in b.shape],
                            inverses=[torch.eye(n, dtype=b.dtype) for n in b.shape],
                            filtered=torch.zeros_like(b), grafting=torch.zeros_like(b)) for b in blocks]
                      for blocks in self.blocks]

    def step(self, grads, lr):
        hp = self.hp
        self.step_count += 1
        step = self.step_count
        beta1, beta2 = hp["beta1"], hp["beta2"]
        beta3 = beta1 if hp["beta3"] == -1 else hp["beta3"]
        frequency = hp["precondition_frequency"]
        start = frequency if hp["start_preconditioning_step"] == -1 else hp["start_preconditioning_step"]
        perform_amortized_computation = (step % frequency == 0 and step > start) or step == start
        grafting = hp["grafting"]
        use_grafting_method = step < start and grafting != "none"
        updates = []
        for p, g, blocks, states, decay in zip(self.params, grads, self.blocks, self.state, self.decays):
            max_dim = hp["max_preconditioner_dim"]
            grad_blocks = multi_dim_split(g.view(merge_small_dims(tuple(p.shape), max_dim)), max_dim)
            for block, grad, state in zip(blocks, grad_blocks, states):
                order = grad.dim()
                # _update_preconditioners: the factors, then (amortized) their root inverses; the grafting's
                for k in range(order):
                    outer = torch.tensordot(grad, grad, dims=[[d for d in range(order) if d != k]] * 2)
                    if beta2 != 1.0:
                        state["factors"][k].mul_(beta2)
                    state["factors"][k].add_(outer, alpha=1.0 if beta2 == 1.0 else 1 - beta2)
                bias_correction2 = 1.0 - beta2**step if hp["use_bias_correction"] and beta2 < 1.0 else 1.0
                if perform_amortized_computation:
                    exponent = 1 / (2 * max(order, 1)) if hp["inverse_exponent"] == -1 else hp["inverse_exponent"]
                    for k in range(order):
                        state["inverses"][k] = matrix_inverse_root(state["factors"][k] / bias_correction2,
                                                                   1 / exponent, hp["epsilon"])
                if grafting == "adagrad":
                    state["grafting"].addcmul_(grad, grad)
                elif grafting in ("rmsprop", "adam"):
                    state["grafting"].mul_(hp["grafting_beta2"]).addcmul_(grad, grad, value=1 - hp["grafting_beta2"])
                # _compute_filtered_grad_list
                if beta1 != 0.0:
                    filtered = torch.lerp(state["filtered"], grad, 1 - beta3) if beta3 != beta1 else None
                    state["filtered"].lerp_(grad, 1 - beta1)
                    filtered = state["filtered"] if filtered is None else filtered
                    if hp["use_bias_correction"]:
                        filtered = filtered / (1.0 - beta3 * beta1 ** (step - 1))
                else:
                    filtered = grad
                # _precondition_and_grafting
                if grafting in ("adagrad", "rmsprop", "adam"):
                    correction = 1.0 - hp["grafting_beta2"] ** step if grafting == "adam" else 1.0
                    grafted = filtered / ((state["grafting"] / correction).sqrt() + hp["grafting_eps"])
                else:
                    grafted = filtered
                if use_grafting_method:
                    direction = grafted
                else:
                    direction = filtered
                    for k in range(order):
                        direction = torch.tensordot(direction, state["inverses"][k], dims=([0], [0]))
                    if grafting != "none":
                        direction = direction * (grafted.norm() / (direction.norm() + 1e-16))
                # _apply_weight_decay (decoupled), then -lr; the distributor adds it to the block
                if decay and hp["weight_decay"] != 0.0:
                    direction = direction + hp["weight_decay"] * block
                updates.append((block, direction * -lr))
        for block, update in updates:
            block.add_(update)


def run(settings, dtype, steps=STEPS, model_args=TINY):
    """Ours through the registry and the package restated, on the tiny GPT from the same weights and gradients: each
    parameter's relative difference, by name, of those on Shampoo and of those on AdamW."""
    cfg = tiny_config(optimizer="shampoo", **settings, **{k: v for k, v in model_args.items() if k not in TINY})
    hp = cfg.hyperparameters.to_dict()
    torch.manual_seed(0)
    model = GPT(GPTConfig(**model_args)).to(dtype)
    reference = [p.detach().double().clone() for p in model.parameters()]
    optimizer = build_optimizer(model, cfg, "cpu")
    named = dict(model.named_parameters())
    shampoo_group = {id(p) for g in optimizer.param_groups if g["use_shampoo"] for p in g["params"]}
    on_shampoo = [id(p) in shampoo_group for p in model.parameters()]
    decays = [p.ndim == 2 for p in model.parameters()]  # (decay_embeddings True: the embeddings decay)
    package = PackageShampoo([r for r, s in zip(reference, on_shampoo) if s], hp, [d for d, s in zip(decays, on_shampoo) if s])
    # the record's AdamW (torch.optim.AdamW) on the embeddings (lr_embeddings) and 1-D parameters (lr_1d)
    kinds = [("embeddings" if ".wte." in n or ".wpe." in n else "1d") for n in named]
    side = [dict(params=[r], lr=hp["lr_embeddings"] if kind == "embeddings" else hp["lr_1d"])
            for r, s, kind in zip(reference, on_shampoo, kinds) if not s]
    adamw = torch.optim.AdamW(side, betas=(hp["beta1_1d"], hp["beta2_1d"]), eps=hp["eps_1d"],
                              weight_decay=hp["weight_decay_1d"], foreach=False) if side else None
    for group in side:
        group["base_lr"] = group["lr"]
    for step in range(steps):
        grads = scheduled_step(model, optimizer, step)
        package.step([g for g, s in zip(grads, on_shampoo) if s], cfg.learning_rate * lr_multiplier(step))
        if adamw:
            for group in adamw.param_groups:
                group["lr"] = group["base_lr"] * lr_multiplier(step)
                group["params"][0].grad = grads[[id(r) for r in reference].index(id(group["params"][0]))]
            adamw.step()
    errors = {n: ((p.detach().double() - expected).norm() / expected.norm()).item()
              for (n, p), expected in zip(model.named_parameters(), reference)}
    return ({n: e for (n, e), s in zip(errors.items(), on_shampoo) if s},
            {n: e for (n, e), s in zip(errors.items(), on_shampoo) if not s})


# Float64 parity is to 1e-10, not float64's 1e-16: a vector's factor, a sum of t outer products g g^T, has rank t, and
# epsilon 1e-12 makes its root inverse's eigenvalues in the null space ~1e6, so that the rounding of Q diag Q^T (ours
# a batched product, the package's one matrix at a time) reaches the vector's update at ~1e-11 (measured 3e-11; the
# matrices' blocks 2e-13 and below).
FLOAT64_TOLERANCE = 1e-10


@pytest.mark.quick
def test_shampoo_matches_the_package_defaults_in_float64():
    """The package's defaults: AdaGrad sums (beta2 1), root inverses every step, no grafting, no decay, every
    parameter on Shampoo; but the tiny GPT 16 wide over 8 positions and max_preconditioner_dim 128 (a 1024 x 1024
    eigh takes seconds on a CPU): its 8 x 16 position embedding merges into a vector of 128, as a 32 x 32 matrix
    would at 1024."""
    errors, _ = run(dict(max_preconditioner_dim=128), torch.float64, steps=4,
                    model_args=dict(TINY, n_embd=16, block_size=8))
    assert max(errors.values()) < FLOAT64_TOLERANCE, errors


def test_shampoo_matches_the_package_on_the_modded_nanogpt_recipe_in_float64():
    """Shampoo's parameters to float64 rounding; the AdamW's to 1e-6, the shared AdamW rule's step sizes being
    float32 scalars (optim/rules.py)."""
    errors, adamw = run(RECORD, torch.float64)
    assert max(errors.values()) < FLOAT64_TOLERANCE, errors
    assert max(adamw.values()) < 1e-6, adamw


def test_shampoo_in_float32_lands_on_the_package_in_float64():
    """Float32 (the factors and root inverses in float32, as the package keeps them) against the float64
    restatement, to float32 rounding (measured 2.1e-7)."""
    errors, adamw = run(RECORD, torch.float32)
    assert max(errors.values()) < 2e-6, errors
    assert max(adamw.values()) < 2e-6, adamw


def test_shampoo_blocks_as_the_package():
    """The merge and split of the parameters of GPT-2 small at max_preconditioner_dim 1024: few shapes."""
    from optim.shampoo import block_shapes, merged_shape

    assert merged_shape((32, 32), 1024) == (1024,) and merged_shape((64, 32), 1024) == (64, 32)
    assert merged_shape((1, 5, 1, 2), 10) == (10,) and merged_shape((1, 1), 4) == (1,)
    for shape in [(32, 32), (64, 32), (16, 32), (1, 5, 1, 2), (50304, 768), (2304, 768), (3000,)]:
        assert merge_small_dims(shape, 1024) == merged_shape(shape, 1024), shape
    assert block_shapes((2304, 768), 1024) == [(1024, 768), (1024, 768), (256, 768)]
    assert block_shapes((768, 3072), 1024) == [(768, 1024)] * 3
    shapes = {s for shape in [(768, 768), (2304, 768), (3072, 768), (768, 3072)] for s in block_shapes(shape, 1024)}
    assert shapes == {(768, 768), (1024, 768), (256, 768), (768, 1024)}


def test_shampoo_declares_its_products():
    """products() is what a step computes: torch's FLOP counter over precondition_frequency steps."""
    from torch.utils.flop_counter import FlopCounterMode

    cfg = tiny_config(optimizer="shampoo", **RECORD)
    model = GPT(GPTConfig(**TINY))
    optimizer = build_optimizer(model, cfg, "cpu")
    for step in range(3):
        scheduled_step(model, optimizer, step)
    with FlopCounterMode(display=False) as counter:
        for step in range(3, 6):
            scheduled_step(model, optimizer, step)
    declared = sum(product.flops() for product in optimizer.products())
    assert counter.get_total_flops() == pytest.approx(3 * declared, rel=1e-12)
    assert math.isfinite(declared)


@pytest.mark.parametrize("model", ["config/gpt2_small.py", "config/llama_720m.py"])
def test_bench_memory_counts_the_factors_and_root_inverses(model):
    """python -m bench.memory on the paper recipe over 8 ranks (DDP: every rank holds the whole state): to the
    byte, a float32 factor and root inverse per dimension of every block of the blocks' matrices (at
    max_preconditioner_dim 8192 GPT-2 small's are unblocked, 2.60 GB; llama-720m's 15.2 GB), their m and Adam
    grafting's v, and the AdamW's m, v and step count on the embeddings and 1-D parameters."""
    from bench.memory import Run, memory, model_tensors
    from optim import load_config
    from optim.shampoo import block_shapes

    cfg = load_config([model, "config/paper_shampoo.py"])
    expected = 0
    for t in model_tensors(cfg):
        expected += 2 * 4 * t.numel
        if t.kind in ("attention", "mlp"):
            sides = [n for shape in block_shapes(t.shape, cfg.hyperparameters.max_preconditioner_dim) for n in shape]
            expected += 2 * 4 * sum(n * n for n in sides)
        else:
            expected += 4  # (AdamW's step count, a float32 scalar)
    predicted = next(item.bytes for item in memory(Run(cfg, 8)) if item.key == "optimizer state")
    assert predicted == expected
