"""
AdEMAMix against a float64 restatement of its authors' reference, apple/ml-ademamix pytorch/ademamix.py, on a
tiny GPT built through the registry (tests/parity.py): float32 to float32 rounding.
"""

import math

import pytest
import torch

from parity import check_element_wise_parity


def ademamix_reference(p, g, state, lr, wd, hp):
    b1, b2, b3_final, eps = hp["beta1"], hp["beta2"], hp["beta3"], hp["eps"]
    t = state["t"] = state.get("t", 0) + 1
    warm = hp["warmup"]
    alpha = hp["alpha"] * t / warm if t < warm else hp["alpha"]

    def half_life(b):
        return math.log(0.5) / math.log(b + 1e-8) - 1

    b3 = 0.5 ** (1 / ((1 - t / warm) * half_life(b1) + t / warm * half_life(b3_final) + 1)) if t < warm else b3_final
    m1, m2, v = (state.setdefault(k, torch.zeros_like(p)) for k in ("m1", "m2", "v"))
    m1.mul_(b1).add_(g * (1 - b1))
    m2.mul_(b3).add_(g * (1 - b3))
    v.mul_(b2).add_(g * g * (1 - b2))
    update = (m1 / (1 - b1**t) + alpha * m2) / (v.sqrt() / math.sqrt(1 - b2**t) + eps)
    p.sub_(lr * (update + wd * p))


OVERRIDES = dict(learning_rate=0.01, weight_decay=0.1, alpha_warmup=5, beta3_warmup=5, beta3=0.999)


@pytest.mark.parametrize("settings, dtype, tolerance", [
    pytest.param({}, torch.float32, 2e-6),
])
def test_ademamix_matches_its_authors_reference(settings, dtype, tolerance):
    check_element_wise_parity("ademamix", OVERRIDES, settings, dtype, tolerance, ademamix_reference)
