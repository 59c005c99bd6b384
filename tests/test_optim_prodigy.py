"""
Prodigy against its authors' package (konstmish/prodigy, the `prodigyopt` package, called directly), on a tiny
GPT built through the registry (tests/parity.py).
"""

import pytest
import torch

from model import GPT, GPTConfig
from optim import build_optimizer
from optim.adamw import decay_routing
from optim.routing import weight_decay_groups
from parity import gradients, lr_multiplier
from test_optim import TINY, tiny_config


# Prodigy (konstmish/prodigy) through its authors' package, prodigyopt 1.1.2 (prodigyopt/prodigy.py), on the
# same decay groups: its defaults, the benchmark's bias correction, and coupled decay with the safeguarded warmup.
# d0 1e-4 and gradients that pull the weights toward a target make d grow 39-489x in the 30 steps.
PRODIGY_SETTINGS = [pytest.param({}, marks=pytest.mark.quick), dict(prodigy_bias_correction=True),
                    dict(prodigy_decouple=False, prodigy_safeguard_warmup=True, prodigy_d_coef=0.5)]


@pytest.mark.parametrize("settings", PRODIGY_SETTINGS)
def test_prodigy_matches_its_authors_package(settings):
    """In float64 both, to float64 rounding; ours in float32 within 1e-4 of it, as the reference's own float32
    is: d's numerator sums <g, p0 - p>, whose difference of nearby weights cancels in float32."""
    prodigyopt = pytest.importorskip("prodigyopt")
    cfg = tiny_config(optimizer="prodigy", learning_rate=1.0, weight_decay=0.1, prodigy_d0=1e-4,
                      decay_embeddings=False, **settings)
    hp = cfg.hyperparameters
    for dtype, tolerance in ((torch.float64, 1e-12), (torch.float32, 1e-4)):
        torch.manual_seed(0)
        model = GPT(GPTConfig(**TINY)).to(dtype)
        theirs = GPT(GPTConfig(**TINY)).double()
        theirs.load_state_dict(model.state_dict())
        targets = [torch.randn_like(p) * 0.05 for p in theirs.parameters()]
        ours = build_optimizer(model, cfg, "cpu")
        reference = prodigyopt.Prodigy(
            weight_decay_groups(theirs, decay_routing("prodigy", False), hp.weight_decay), lr=1.0,
            betas=(hp.beta1, hp.beta2), eps=hp.eps, decouple=hp.prodigy_decouple,
            use_bias_correction=hp.prodigy_bias_correction, safeguard_warmup=hp.prodigy_safeguard_warmup,
            d0=hp.prodigy_d0, d_coef=hp.prodigy_d_coef)
        for step in range(30):
            for optimizer in (ours, reference):
                for group in optimizer.param_groups:  # (a first step at lr 0, as a warmup's, changes nothing)
                    group["lr"] = lr_multiplier(step) if step else 0.0
            noise = gradients(model, seed=step)
            for p, q, target, n in zip(model.parameters(), theirs.parameters(), targets, noise):
                q.grad = 0.5 * (q.detach() - target) + n
                p.grad = q.grad.to(dtype, copy=True)  # (the coupled decay adds to a gradient in place)
            ours.step()
            reference.step()
        assert ours.param_groups[0]["d"].item() > 30 * hp.prodigy_d0
        assert ours.param_groups[0]["d"].item() == pytest.approx(reference.param_groups[0]["d"], rel=tolerance)
        for (n, p), q in zip(model.named_parameters(), theirs.parameters()):
            error = ((p.detach().double() - q).norm() / q.norm()).item()
            assert error < tolerance, f"prodigy {dtype}: {n} relative error {error:.1e}"
