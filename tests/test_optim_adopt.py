"""
ADOPT against a float64 restatement of its authors' reference, iShohei220/adopt at 6468572 (src/adopt/adopt.py),
on a tiny GPT built through the registry (tests/parity.py): float32 to float32 rounding, decoupled and coupled decay.
"""

import pytest
import torch

from parity import check_element_wise_parity


def adopt_reference(p, g, state, lr, wd, hp):
    """iShohei220/adopt's _single_tensor_adopt: v from the first gradient alone, then the clipped normalised
    gradient averaged, v updated last."""
    b1, b2, eps = hp["beta1"], hp["beta2"], hp["eps"]
    k = state.get("k", 0)
    m, v = state.setdefault("m", torch.zeros_like(p)), state.setdefault("v", torch.zeros_like(p))
    if not hp["adopt_decoupled"]:
        g = g.add(p, alpha=wd)
    state["k"] = k + 1
    if k == 0:
        v.addcmul_(g, g)
        return
    if hp["adopt_decoupled"]:
        p.add_(p, alpha=-lr * wd)
    normalised = g.div(torch.clamp(v.sqrt(), min=eps)).clamp_(-(k ** 0.25), k ** 0.25)
    m.lerp_(normalised, 1 - b1)
    p.add_(m, alpha=-lr)
    v.mul_(b2).addcmul_(g, g, value=1 - b2)


OVERRIDES = dict(learning_rate=0.01, weight_decay=0.1, beta1=0.9, beta2=0.95)


@pytest.mark.parametrize("settings, dtype, tolerance", [
    pytest.param({}, torch.float32, 2e-6, marks=pytest.mark.quick),
    pytest.param(dict(adopt_decoupled=False), torch.float32, 2e-6),
])
def test_adopt_matches_its_authors_reference(settings, dtype, tolerance):
    check_element_wise_parity("adopt", OVERRIDES, settings, dtype, tolerance, adopt_reference)
