"""
Lion against a float64 restatement of its authors' reference, google/automl lion/lion_pytorch.py, on a tiny
GPT built through the registry (tests/parity.py): float32 to float32 rounding.
"""

import pytest
import torch

from parity import check_element_wise_parity


def lion_reference(p, g, state, lr, wd, hp):
    b1, b2 = hp["beta1"], hp["beta2"]
    m = state.setdefault("m", torch.zeros_like(p))
    p.mul_(1 - lr * wd)
    p.sub_(lr * torch.sign(m * b1 + g * (1 - b1)))
    state["m"] = m * b2 + g * (1 - b2)


OVERRIDES = dict(learning_rate=0.003, weight_decay=0.5, beta1=0.9, beta2=0.99)


@pytest.mark.parametrize("settings, dtype, tolerance", [
    pytest.param({}, torch.float32, 2e-6),
])
def test_lion_matches_its_authors_reference(settings, dtype, tolerance):
    check_element_wise_parity("lion", OVERRIDES, settings, dtype, tolerance, lion_reference)
