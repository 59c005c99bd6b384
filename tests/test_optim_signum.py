"""
Signum against a float64 restatement of the Signum epfml/llm-optimizer-benchmark runs (at fdecd5d, src/optim/
sign.py), on a tiny GPT built through the registry (tests/parity.py): its momentum from the gradient (torch's SGD) or
from the weights (the benchmark's), with and without Nesterov, float32 to float32 rounding.
"""

import pytest
import torch

from parity import check_element_wise_parity


def signum_reference(p, g, state, lr, wd, hp):
    """The benchmark's Signum (llm-optimizer-benchmark src/optim/sign.py, sign_update=True, dampening 0), its
    buffer started as a copy of the decayed weights ("parameter") or, as torch's SGD starts it, at the first
    gradient ("gradient")."""
    b = hp["beta1"]
    p.mul_(1 - lr * wd)
    if "buf" not in state:
        state["buf"] = p.clone() if hp["signum_momentum_init"] == "parameter" else None
    if state["buf"] is None:
        state["buf"] = g.clone()
    else:
        state["buf"].mul_(b).add_(g)
    direction = g + b * state["buf"] if hp["signum_nesterov"] else state["buf"]
    p.add_(torch.sign(direction), alpha=-lr)


OVERRIDES = dict(learning_rate=0.003, weight_decay=0.5, beta1=0.9)


@pytest.mark.parametrize("settings, dtype, tolerance", [
    pytest.param({}, torch.float32, 2e-6, marks=pytest.mark.quick),
    pytest.param(dict(signum_momentum_init="parameter"), torch.float32, 2e-6),
    pytest.param(dict(signum_nesterov=True), torch.float32, 2e-6),
])
def test_signum_matches_its_authors_reference(settings, dtype, tolerance):
    check_element_wise_parity("signum", OVERRIDES, settings, dtype, tolerance, signum_reference)
