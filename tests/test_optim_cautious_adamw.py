"""
Cautious AdamW against a float64 restatement of its authors' reference, kyleliang919/C-Optim at 2c0517c
(c_adamw.py), on a tiny GPT built through the registry (tests/parity.py): float32 to float32 rounding.
"""

import math

import pytest
import torch

from parity import check_element_wise_parity


def cautious_adamw_reference(p, g, state, lr, wd, hp):
    """kyleliang919/C-Optim c_adamw.py's default (foreach) update, for one tensor."""
    b1, b2, eps = hp["beta1"], hp["beta2"], hp["eps"]
    t = state["t"] = state.get("t", 0) + 1
    m, v = state.setdefault("m", torch.zeros_like(p)), state.setdefault("v", torch.zeros_like(p))
    m.lerp_(g, 1 - b1)
    v.lerp_(g * g, 1 - b2)
    denom = v.sqrt() / math.sqrt(1 - b2**t) + eps
    mask = (m * g > 0).to(g.dtype)
    kept = mask.mean().clamp(min=1e-3)
    p.mul_(1 - lr * wd)
    p.sub_((lr / (1 - b1**t)) * (m * mask) / denom / kept)


OVERRIDES = dict(learning_rate=0.01, weight_decay=0.1, beta1=0.9, beta2=0.95)


@pytest.mark.parametrize("settings, dtype, tolerance", [
    pytest.param({}, torch.float32, 2e-6, marks=pytest.mark.quick),
])
def test_cautious_adamw_matches_its_authors_reference(settings, dtype, tolerance):
    check_element_wise_parity("cautious-adamw", OVERRIDES, settings, dtype, tolerance, cautious_adamw_reference)
