"""
Kron against a float64 restatement of levanter's algorithm, on a tiny GPT built through the registry
(tests/parity.py); its noise a hash of (step, index, element), each parameter's numbers its own in a batch.
"""

import itertools

import numpy as np
import pytest
import torch

from model import GPT, GPTConfig
from optim import build_optimizer
from optim.contract import Product
from parity import STEPS, lr_multiplier, scheduled_step
from test_optim import TINY, tiny_config


def kron_lower_bound(s):
    """levanter's _lb, for one symmetric matrix."""
    top = s.abs().max()
    if top == 0:
        return top
    s = s / top
    x = s[:, (s * s).sum(0).argmax()] @ s
    return top * ((x / x.norm()) @ s.T).norm()


def kron_reference_step(p, g, state, lr, wd, hp, t, update, balance, index, layout):
    """levanter's Kron for one parameter, restated in float64 block by block (optim/kron.py's docstring), the blocks
    cut, padded and put back with loops, each diagonal preconditioner as its diagonal matrix."""
    from optim.kron import kron_noise

    b1, tiny = hp["beta1"], float(torch.finfo(torch.float32).tiny)
    m = state.setdefault("m", torch.zeros_like(p))
    m.mul_(b1).add_(g, alpha=1 - b1)
    full = (m / (1 - b1**t)).reshape(layout.shape)
    starts = [[sum(sizes[:k]) for k in range(len(sizes))] for sizes in layout.pieces]
    cells = list(itertools.product(*[range(len(sizes)) for sizes in layout.pieces]))
    scale = hp["kron_precond_init_scale"] ** (1 / len(layout.shape))
    qs = state.setdefault("q", [[scale * torch.eye(n, dtype=torch.float64) for n in layout.padded] for _ in cells])
    padded = []
    for cell in cells:
        block = torch.zeros(layout.padded, dtype=torch.float64)
        where = tuple(slice(starts[d][k], starts[d][k] + layout.pieces[d][k]) for d, k in enumerate(cell))
        block[tuple(slice(0, w.stop - w.start) for w in where)] = full[where]
        padded.append((where, block))
    if balance:
        for j in range(len(cells)):
            norms = torch.stack([q.abs().max() for q in qs[j]])
            qs[j] = [q * norms.log().mean().exp() / n for q, n in zip(qs[j], norms)]
    if update:
        noise = kron_noise(t, index, (len(cells), *layout.padded), torch.device("cpu")).double()
        damping = 2**-11.5 * torch.stack([block for _, block in padded]).abs().mean()
        for j, (_, block) in enumerate(padded):
            g_j, v = block + damping * noise[j], noise[j]
            if len(layout.shape) == 2:
                a, b = qs[j][0] @ g_j @ qs[j][1].T, torch.linalg.inv(qs[j][0]).T @ v @ torch.linalg.inv(qs[j][1])
                terms = [(a @ a.T, b @ b.T), (a.T @ a, b.T @ b)]
            else:
                a, b = qs[j][0] @ g_j, torch.linalg.inv(qs[j][0]).T @ v
                terms = [(torch.outer(a, a), torch.outer(b, b))]
            for d, (ta, tb) in enumerate(terms):
                q = qs[j][d]
                if layout.diagonal[d]:  # only the diagonal of the statistics enters
                    ta, tb = torch.diag(torch.diag(ta)), torch.diag(torch.diag(tb))
                    qs[j][d] = q - hp["kron_precond_lr"] * (ta - tb) @ q / ((ta + tb).abs().max() + tiny)
                else:
                    qs[j][d] = q - hp["kron_precond_lr"] / (kron_lower_bound(ta + tb) + tiny) * torch.triu(ta - tb) @ q
    direction = torch.zeros(layout.shape, dtype=torch.float64)
    for j, (where, block) in enumerate(padded):
        left = qs[j][0].T @ qs[j][0]
        pre = left @ block @ (qs[j][1].T @ qs[j][1]) if len(layout.shape) == 2 else left @ block
        direction[where] = pre[tuple(slice(0, w.stop - w.start) for w in where)]
    direction = direction.reshape(p.shape)
    direction /= max(1.0, (direction.square().mean().sqrt() / 1.1).item())
    p.sub_(lr * (direction + wd * p))


@pytest.mark.parametrize("merge", [pytest.param(False, marks=pytest.mark.quick), True])
def test_kron_matches_levanters_algorithm(monkeypatch, merge):
    """Kron's batched, owner-rank step against levanter's algorithm restated block by block in float64, on the tiny
    GPT with 64-wide blocks and a 100-wide triangular limit: unmerged, 2-D blocks with triangular and diagonal sides
    and diagonal vectors; merged (levanter's heuristic turns every tiny matrix into a vector), 1-D triangular blocks.
    An update schedule that skips steps (probability floor 0.4 after 2 steps) and a rebalancing every second update."""
    import optim.kron

    monkeypatch.setattr(optim.kron, "BALANCE_EVERY", 2)
    settings = dict(learning_rate=1e-2, weight_decay=0.1, beta1=0.9, kron_precond_lr=0.2, kron_block_size=64,
                    kron_max_size_triangular=100, kron_merge_small_dims=merge, kron_update_prob_min=0.4,
                    kron_update_prob_flat_start=2)
    cfg = tiny_config(optimizer="kron", **settings)
    hp = cfg.hyperparameters.to_dict()
    torch.manual_seed(0)
    model = GPT(GPTConfig(**TINY))
    optimizer = build_optimizer(model, cfg, "cpu")
    reference = [p.detach().double().clone() for p in model.parameters()]
    decays = [p.ndim == 2 and ".wte." not in n and ".wpe." not in n for n, p in model.named_parameters()]
    layouts = [optimizer.layouts[id(p)] for p in model.parameters()]
    if merge:
        assert all(len(l.shape) == 1 for l in layouts) and any(False in l.diagonal for l in layouts)
    else:
        assert {len(l.shape) for l in layouts} == {1, 2} and any(True in l.diagonal for l in layouts if len(l.shape) == 2)
    states, counter, balances, updates = [{} for _ in reference], 0, 0, []
    for step in range(STEPS):
        t = step + 1
        probability = float(np.clip(np.exp(np.float32(-0.001) * np.float32(t - 2)), np.float32(0.4), np.float32(1.0)))
        counter += 1
        update = counter >= np.float32(1) / np.float32(probability)
        counter = 0 if update else counter
        balances += update
        balance = update and balances >= 2
        balances = 0 if balance else balances
        updates.append((update, balance))
        grads = scheduled_step(model, optimizer, step)
        for i, (p, g, state, decay) in enumerate(zip(reference, grads, states, decays)):
            kron_reference_step(p, g, state, cfg.learning_rate * lr_multiplier(step), hp["weight_decay"] if decay else 0.0,
                                hp, t, update, balance, optimizer.index[id(list(model.parameters())[i])], layouts[i])
    assert (False, False) in updates and (True, True) in updates  # the schedule skipped and rebalanced
    for (n, p), expected in zip(model.named_parameters(), reference):
        error = ((p.detach().double() - expected).norm() / expected.norm()).item()
        assert error < 1e-5, f"kron: {n} relative error {error:.1e}"


@pytest.mark.quick
def test_kron_noise_is_a_hash_of_step_index_and_element():
    """The update's noise V, restated with Python's integers: each element's a lowbias32 hash of (step, parameter
    index, row within the parameter, column) made normal by ndtri (so int32's wrapping products are the unsigned
    arithmetic); a stack of parameters draws each one's noise as it draws alone; it is N(0, 1) to sampling error
    and other at another step or index."""
    from optim.kron import block_noise, kron_noise

    mask = 0xFFFFFFFF

    def mix(x):
        x ^= x >> 16
        x = (x * 0x21F0AAAD) & mask
        x ^= x >> 15
        x = (x * 0x735A2D97) & mask
        return x ^ (x >> 15)

    def element(step, index, row, column):
        key = mix(mix(step) ^ index)
        h = mix(mix((mix(row ^ key) + key) & mask) ^ ((column * 0x2545F491) & mask))
        return torch.special.ndtri(torch.tensor(((h >> 9) + 0.5) * 2.0**-23)).item()

    cpu = torch.device("cpu")
    matrix, vector = kron_noise(123456, 7, (3, 64, 32), cpu), kron_noise(5, 2, (2, 300), cpu)
    cells = itertools.product(range(3), range(0, 64, 9), range(0, 32, 5))
    assert all(matrix[b, r, c].item() == element(123456, 7, 64 * b + r, c) for b, r, c in cells)
    assert all(vector[b, c].item() == element(5, 2, b, c) for b in range(2) for c in range(0, 300, 11))
    stack = block_noise(9, [4, 1, 6], [2, 1, 3], (64, 32), cpu)
    assert all(torch.equal(part, kron_noise(9, index, (count, 64, 32), cpu))
               for part, index, count in zip(stack.split([2, 1, 3]), [4, 1, 6], [2, 1, 3]))
    v = kron_noise(3, 0, (16, 128, 128), cpu)
    assert abs(v.mean().item()) < 5e-3 and abs(v.var().item() - 1) < 5e-3 and abs(v.pow(4).mean().item() - 3) < 0.05
    for other in (kron_noise(4, 0, (16, 128, 128), cpu), kron_noise(3, 1, (16, 128, 128), cpu)):
        assert abs((v * other).mean().item()) < 5e-3


@pytest.mark.quick
def test_kron_batches_give_each_parameter_its_numbers_alone():
    """Kron preconditions the parameters whose blocks share a signature as one stack of blocks: each one's P and
    preconditioners are, bit for bit, what it gets alone, wherever it sits in the batch (owner ranks batch
    different parameters: the resume matrix's one process against 2 ranks), with the update and the rebalancing;
    and products() lists one stack's products per signature, the update's at the probability's floor."""
    from optim.kron import Kron, batches, layout_of, precondition

    torch.manual_seed(0)
    for merge in (False, True):  # 2-D blocks with triangular and diagonal sides; vector blocks, some of one block
        shapes = [(96, 32), (32, 96), (300, 32), (96, 32), (8, 8), (32, 96), (7, 5), (300, 32), (96,)]
        layouts = [layout_of(shape, 64, 100, merge) for shape in shapes]
        for run in batches(layouts):
            momenta = [torch.randn(shapes[i]) for i in run]
            qs = [[torch.rand(layouts[i].blocks, n) + 0.5 if diagonal else
                   torch.eye(n) + 0.1 * torch.randn(layouts[i].blocks, n, n).triu()
                   for n, diagonal in zip(layouts[i].padded, layouts[i].diagonal)] for i in run]
            for update, balance in [(True, True), (False, False)]:
                together = precondition(momenta, qs, [layouts[i] for i in run], 7, run, update, balance, 0.2)
                for k, i in enumerate(run):
                    alone = precondition([momenta[k]], [qs[k]], [layouts[i]], 7, [i], update, balance, 0.2)[0]
                    assert all(torch.equal(a, b) for a, b in zip(alone, together[k])), (shapes[i], merge, update)
    # Two 96 x 32 matrices, 2 blocks of 64 x 64 each: one stack of 4, both sides triangular; 300 x 32, one block
    # of 320 x 64 with a diagonal left side; a vector, diagonal: no products.
    params = [torch.zeros(shape) for shape in [(96, 32), (96, 32), (300, 32), (32,)]]
    products = Kron(params, block_size=64, max_size_triangular=100, merge_small_dims=False).products()
    every, floor = 1.0, 0.05  # the application every step; the update's at kron_update_prob_min

    def side(batch, applied, statistics):  # Q M and Q^T (Q M); A, B, T_A, T_B, the lower bound's, triu(..) Q
        n = statistics[0]
        return [Product(batch, *applied, torch.float32, every)] * 2 + [
            Product(batch, *shape, torch.float32, floor) for shape in
            [applied] * 2 + [statistics] * 2 + [(1, n, n)] * 2 + [(n, n, n)]]

    assert products == (side(4, (64, 64, 64), (64, 64, 64)) * 2 + side(1, (320, 64, 64), (64, 320, 64)))
