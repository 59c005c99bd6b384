"""
NAdamW against a float64 restatement of AlgoPerf's (mlcommons/algorithmic-efficiency, algorithms/baselines/
external_tuning/pytorch_nadamw_full_budget.py), op for op, on a tiny GPT built through the registry (tests/parity.py):
float32 to float32 rounding, float64 to float64 rounding; not torch's NAdam, whose checkpoints it refuses.
"""

import math

import pytest
import torch

from errors import InputError
from model import GPT, GPTConfig
from optim import build_optimizer
from optim.adamw import decay_routing
from optim.routing import weight_decay_groups
from parity import STEPS, check_element_wise_parity, gradients
from test_optim import TINY, tiny_config


def nadamw_reference(p, g, state, lr, wd, hp):
    """AlgoPerf's nadamw(), op for op: m updated twice in place for the numerator, then the second undone."""
    b1, b2, eps = hp["beta1"], hp["beta2"], hp["eps"]
    t = state["t"] = state.get("t", 0) + 1
    m, v = state.setdefault("m", torch.zeros_like(p)), state.setdefault("v", torch.zeros_like(p))
    p.mul_(1 - lr * wd)
    m.mul_(b1).add_(g, alpha=1 - b1)
    v.mul_(b2).addcmul_(g, g, value=1 - b2)
    m.mul_(b1).add_(g, alpha=1 - b1)
    denom = (v.sqrt() / math.sqrt(1 - b2**t)).add_(eps)
    p.addcdiv_(m, denom, value=-lr / (1 - b1**t))
    m.sub_(g, alpha=1 - b1).div_(b1)


OVERRIDES = dict(learning_rate=0.01, weight_decay=0.1, beta1=0.9, beta2=0.95)


@pytest.mark.parametrize("settings, dtype, tolerance", [
    pytest.param({}, torch.float32, 2e-6),
    pytest.param({}, torch.float64, 1e-10),
])
def test_nadamw_matches_its_authors_reference(settings, dtype, tolerance):
    check_element_wise_parity("nadamw", OVERRIDES, settings, dtype, tolerance, nadamw_reference)


def test_nadamw_is_not_torchs_nadam():
    """Negative control: torch's NAdam (Dozat's warmed-up momentum, what `nadamw` ran before) with the same
    groups, decoupled weight decay and gradients lands far from ours."""
    cfg = tiny_config(optimizer="nadamw", decay_embeddings=False, **OVERRIDES)
    torch.manual_seed(0)
    model = GPT(GPTConfig(**TINY))
    theirs = GPT(GPTConfig(**TINY))
    theirs.load_state_dict(model.state_dict())
    ours = build_optimizer(model, cfg, "cpu")
    hp = cfg.hyperparameters
    torchs = torch.optim.NAdam(weight_decay_groups(theirs, decay_routing("nadamw", False), hp.weight_decay),
                               lr=cfg.learning_rate, betas=(hp.beta1, hp.beta2), eps=hp.eps,
                               decoupled_weight_decay=True)
    for step in range(STEPS):
        for net, optimizer in ((model, ours), (theirs, torchs)):
            for p, g in zip(net.parameters(), gradients(net, seed=step)):
                p.grad = g.float()
            optimizer.step()
            optimizer.zero_grad()
    errors = [((p - q).norm() / q.norm()).item() for p, q in zip(model.parameters(), theirs.parameters())]
    assert max(errors) > 1e-3


def test_nadamw_refuses_a_checkpoint_of_torchs_nadam():
    """A checkpoint of the NAdamW before AlgoPerf's (torch's NAdam) would resume with its step count at 1."""
    model = GPT(GPTConfig(**TINY))
    old = torch.optim.NAdam(model.parameters(), decoupled_weight_decay=True)
    for p, g in zip(model.parameters(), gradients(model, seed=0)):
        p.grad = g.float()
    old.step()
    optimizer = build_optimizer(model, tiny_config(optimizer="nadamw"), "cpu")
    with pytest.raises(InputError, match="Dozat"):
        optimizer.load_state_dict(old.state_dict())
