"""
SOAP against a float64 restatement of its authors' reference (nikhilvyas/SOAP soap.py), on a tiny GPT built through
the registry (tests/parity.py); its stacked matrices, their declared products and its state as views of one tensor.
"""

import io
import math

import pytest
import torch

from model import GPT, GPTConfig
from optim import build_optimizer
from parity import STEPS, lr_multiplier, scheduled_step
from test_optim import TINY, tiny_config


def soap_reference(p, g, state, lr, wd, hp):
    """nikhilvyas/SOAP soap.py for a 1-D or 2-D parameter, restated with explicit matrices: L = EMA(G G^T),
    R = EMA(G^T G), bases by eigh (float32, decreasing) then by power iteration + QR every `frequency`
    steps, Adam in the rotated coordinates; a side over max_precond_dim (and every 1-D side) unrotated."""
    b1, b2, eps, rate = hp["beta1"], hp["beta2"], hp["eps"], hp["beta2"]
    rotated = [p.ndim == 2 and n <= hp["max_precond_dim"] for n in p.shape]
    G = g if p.ndim == 2 else g[:, None]

    def bases_of(q):
        return [q[0] if q[0] is not None else None, q[1] if p.ndim == 2 and q[1] is not None else None]

    def into(x, q):  # Q_L^T X Q_R
        x = x if p.ndim == 2 else x[:, None]
        x = q[0].T @ x if q[0] is not None else x
        x = x @ q[1] if q[1] is not None else x
        return x if p.ndim == 2 else x[:, 0]

    def back(x, q):  # Q_L X Q_R^T
        x = x if p.ndim == 2 else x[:, None]
        x = q[0] @ x if q[0] is not None else x
        x = x @ q[1].T if q[1] is not None else x
        return x if p.ndim == 2 else x[:, 0]

    def accumulate():
        for side, outer in ((0, G @ G.T), (1, G.T @ G)):
            if side < p.ndim and rotated[side]:
                state["S"][side] = state["S"][side] * rate + outer * (1 - rate)

    if "Q" not in state:
        state.update(t=0, m=torch.zeros_like(p), v=torch.zeros_like(p),
                     S=[torch.zeros(n, n, dtype=p.dtype) if r else None for n, r in zip(p.shape, rotated)] + [None])
        accumulate()
        state["Q"] = [None if s is None else torch.linalg.eigh(s.float())[1].flip(1).double() for s in state["S"][:2]]
        return
    q = bases_of(state["Q"])
    state["t"] += 1
    t = state["t"]
    state["m"] = b1 * state["m"] + (1 - b1) * into(g, q)
    state["v"] = b2 * state["v"] + (1 - b2) * into(g, q) ** 2
    p.sub_(lr * math.sqrt(1 - b2**t) / (1 - b1**t) * back(state["m"] / (state["v"].sqrt() + eps), q))
    p.sub_(lr * wd * p)
    m = back(state["m"], q)
    accumulate()
    if t % hp["precondition_frequency"] == 0:
        for side in (0, 1):
            if q[side] is not None:
                s, old = state["S"][side].float(), q[side].float()
                order = torch.argsort(torch.diag(old.T @ s @ old), descending=True)
                state["v"] = state["v"].index_select(side, order)
                state["Q"][side] = torch.linalg.qr(s @ old[:, order])[0].double()
    state["m"] = into(m, bases_of(state["Q"]))


def test_soap_matches_its_authors_reference():
    """In float64 (the reference computes its bases in float32 whatever the parameters' dtype), with sides
    over max_precond_dim unrotated and a basis refresh every 3 steps."""
    cfg = tiny_config(optimizer="soap", decay_embeddings=False, learning_rate=1e-2, weight_decay=0.1,
                      max_precond_dim=40, precondition_frequency=3)
    hp = cfg.hyperparameters.to_dict()
    torch.manual_seed(0)
    model = GPT(GPTConfig(**TINY)).double()
    reference = [p.detach().clone() for p in model.parameters()]
    optimizer = build_optimizer(model, cfg, "cpu")
    decays = [p.ndim == 2 and ".wte." not in n and ".wpe." not in n for n, p in model.named_parameters()]
    states = [{} for _ in reference]
    for step in range(STEPS):
        grads = scheduled_step(model, optimizer, step)
        for p, g, state, decay in zip(reference, grads, states, decays):
            soap_reference(p, g, state, cfg.learning_rate * lr_multiplier(step), hp["weight_decay"] if decay else 0.0, hp)
    for (n, p), expected in zip(model.named_parameters(), reference):
        error = ((p.detach() - expected).norm() / expected.norm()).item()
        assert error < 1e-9, f"soap: {n} relative error {error:.1e}"


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_soap_stacks_matrices_and_declares_their_products(dtype):
    """SOAP runs the parameters of one shape and rotated sides as one stack: on CPU each matrix gets, bit for bit,
    what it gets alone, through two refreshes of its bases (a side over max_precond_dim too), and so does an unrotated
    vector; a rotated vector, to its dtype's rounding (MKL rounds the batched product of a matrix and an n x 1 matrix
    otherwise than one alone: measured 7e-8 in float32). And products() is what a step computes: torch's FLOP counter
    over a period of precondition_frequency steps counts the FLOPs it declares (statistics, projections in and out;
    on refresh steps the power iteration and m's round trip, which float64 parameters make every step)."""
    from torch.utils.flop_counter import FlopCounterMode

    from optim.soap import SOAP

    shapes = [(48, 32), (32, 48), (48, 32), (120, 16), (48, 32), (32, 48), (48,), (150,), (48,)]
    settings = dict(lr=1e-2, weight_decay=0.1, precondition_frequency=3, max_precond_dim=100, precondition_1d=True)
    torch.manual_seed(0)
    weights = [torch.randn(shape, dtype=dtype) * 0.1 for shape in shapes]
    together = [torch.nn.Parameter(w.clone()) for w in weights]
    alone = [torch.nn.Parameter(w.clone()) for w in weights]
    optimizers = [SOAP(together, **settings)] + [SOAP([p], **settings) for p in alone]
    gen = torch.Generator().manual_seed(1)
    for _ in range(7):
        for p, q in zip(together, alone):
            p.grad = torch.randn(p.shape, generator=gen, dtype=dtype) + p.detach()
            q.grad = p.grad.clone()
        for optimizer in optimizers:
            optimizer.step()
    for shape, p, q in zip(shapes, together, alone):
        if len(shape) == 2 or shape[0] > settings["max_precond_dim"]:
            assert torch.equal(p, q), shape
        else:
            assert ((p - q).norm() / q.norm()).item() < 10 * torch.finfo(dtype).eps, shape
    with FlopCounterMode(display=False) as counter:
        for _ in range(settings["precondition_frequency"]):
            optimizers[0].step()
    declared = sum(product.flops() for product in optimizers[0].products())
    assert counter.get_total_flops() == pytest.approx(settings["precondition_frequency"] * declared, rel=1e-12)


def test_soap_keeps_each_stacks_statistics_and_bases_as_views_of_one_tensor():
    """A stack's L, R, Q_L and Q_R are views of one tensor per side, which the step takes as it is: a step that does
    not refresh the bases makes no new stack, one that does makes the new bases the stack, and a restored
    checkpoint's separate tensors are made views again by the next step (then left as they are)."""
    from optim.soap import SOAP

    torch.manual_seed(0)
    params = [torch.nn.Parameter(torch.randn(24, 16)) for _ in range(3)]
    optimizer = SOAP(params, lr=1e-2, precondition_frequency=3)

    def step():
        for p in params:
            p.grad = torch.randn_like(p)
        optimizer.step()

    def stacks():  # each side's L and Q stacks' addresses, after checking every parameter's entries view them
        found = []
        for side in (0, 1):
            for key in ("GG", "Q"):
                bases = [optimizer.state[p][key][side]._base for p in params]
                assert bases[0] is not None and all(b is bases[0] for b in bases), (side, key)
                found.append(bases[0].data_ptr())
        return found

    step()  # the first step: the statistics and the bases from them
    first = stacks()
    step()
    assert stacks() == first  # no refresh (step 1): the same tensors
    step(), step()  # step 3 refreshes: new bases, the statistics' stack kept
    refreshed = stacks()
    assert refreshed[0::2] == first[0::2] and refreshed[1] != first[1] and refreshed[3] != first[3]
    buffer = io.BytesIO()
    torch.save(optimizer.state_dict(), buffer)
    buffer.seek(0)
    optimizer.load_state_dict(torch.load(buffer))
    assert optimizer.state[params[0]]["Q"][0]._base is None  # restored: no longer views of the stack
    step()
    restacked = stacks()
    step()
    assert stacks() == restacked
