"""
Muon's and NorMuon's settings from karpathy/nanochat's Muon (nanochat/optim.py at 92d63d4, muon_step_fused):
MuonEq's row equilibration before Newton-Schulz (muon_eq), Muon+'s norm snap after it (muon_plus) and cautious weight
decay (cautious_weight_decay), each against nanochat's arithmetic restated in float64 around our Muon's step
(restated too: b = mu b + g, u = g + mu b, NS5, max(1, rows/cols)^0.5, decoupled decay), on a tiny GPT built through
the registry; each setting changes the run (a test that cannot fail is a defect); under FSDP2 on two ranks, Muon and
NorMuon with all three land where one process does.
"""

import pytest
import torch

import optim.newton_schulz
from conftest import relative_difference, run_train, scenario_result, step_weights, tiny_run_args, without_key_bias
from model import GPT, GPTConfig
from optim import build_optimizer
from parity import (
    STEPS, cautious_decay, lr_multiplier, muon_eq_reference, muon_plus_reference, newton_schulz_reference,
    scheduled_step,
)
from test_optim import TINY, tiny_config

SETTINGS = {"muon_eq": dict(muon_eq=True), "muon_plus": dict(muon_plus=True),
            "cautious": dict(cautious_weight_decay=True),
            "all": dict(muon_eq=True, muon_plus=True, cautious_weight_decay=True)}


def reference_step(w, g, state, lr, wd, mu, settings):
    """Our Muon's step with nanochat's three settings as its muon_step_fused writes them."""
    b = state["b"] = mu * state.get("b", torch.zeros_like(w)) + g
    x = g + mu * b
    if settings.get("muon_eq"):
        x = muon_eq_reference(x)
    o = newton_schulz_reference(x)
    if settings.get("muon_plus"):
        o = muon_plus_reference(o)
    o = o * max(1.0, w.size(0) / w.size(1)) ** 0.5
    return w - lr * o - lr * wd * w * cautious_decay(o, w, settings.get("cautious_weight_decay", False))


@pytest.mark.parametrize("newton_schulz_dtype, tolerance", [(torch.float32, 1e-5), (torch.float64, 1e-12)],
                         ids=["newton_schulz_float32", "newton_schulz_float64"])
@pytest.mark.parametrize("setting", list(SETTINGS))
def test_muon_takes_nanochats_settings_as_nanochat_computes_them(setting, newton_schulz_dtype, tolerance, monkeypatch):
    """STEPS steps of ours (float64 weights; Newton-Schulz in float32 on the CPU, as always, or in float64) against
    the reference on the matrices Muon updates (the gradients are given, so the AdamW side cannot change them): to
    float32's Newton-Schulz rounding, and to float64 rounding with Newton-Schulz in float64 too; and the setting
    moves the weights away from plain Muon's."""
    monkeypatch.setattr(optim.newton_schulz, "ns5_dtype", lambda device: newton_schulz_dtype)
    cfg = tiny_config(optimizer="muon", learning_rate=2e-2, weight_decay=0.5, **SETTINGS[setting])
    plain = tiny_config(optimizer="muon", learning_rate=2e-2, weight_decay=0.5)
    runs = {}
    for name, config in (("ours", cfg), ("plain", plain)):
        torch.manual_seed(0)
        model = GPT(GPTConfig(**TINY)).double()
        optimizer = build_optimizer(model, config, "cpu")
        matrices = {id(p) for g in optimizer.param_groups if g["use_muon"] for p in g["params"]}
        if name == "ours":
            reference = {n: p.detach().clone() for n, p in model.named_parameters() if id(p) in matrices}
            states = {n: {} for n in reference}
        for step in range(STEPS):
            grads = scheduled_step(model, optimizer, step)
            if name == "ours":
                for (n, _), g in zip(model.named_parameters(), grads):
                    if n in reference:
                        reference[n] = reference_step(reference[n], g, states[n], cfg.learning_rate * lr_multiplier(step),
                                                      0.5, cfg.hyperparameters.muon_momentum, SETTINGS[setting])
        runs[name] = {n: p.detach() for n, p in model.named_parameters() if id(p) in matrices}
    assert relative_difference(runs["ours"], reference) < tolerance
    assert relative_difference(runs["plain"], reference) > 1e-3


def two_rank_scenarios(tiny_dataset: str, folder) -> list[tuple]:
    """For conftest.two_ranks: the FSDP2 halves of test_fsdp_takes_the_settings_as_one_process."""
    return [(f"nanochat_settings_{name}", "ranks:train", dict(args=settings_run(tiny_dataset, folder / name, name,
                                                                                 data_parallel="fsdp")))
            for name in ("muon", "normuon")]


def settings_run(tiny_dataset: str, out, optimizer: str, **more) -> list[str]:
    return tiny_run_args(tiny_dataset, str(out), max_iters=6, eval_interval=6, optimizer=optimizer, micro_batch_size=4,
                         learning_rate=2e-2, weight_decay=0.5, muon_eq=True, muon_plus=True,
                         cautious_weight_decay=True, **more)


@pytest.mark.parametrize("optimizer", ["muon", "normuon"])
def test_fsdp_takes_the_settings_as_one_process(optimizer, tiny_dataset, tmp_path, two_ranks, two_ranks_folder):
    """The whole matrices' norms summed over the shard group, the rows' and the mask each rank's own: FSDP2 on two
    ranks ends where one process does."""
    run_train(settings_run(tiny_dataset, tmp_path / "one", optimizer))
    assert scenario_result(two_ranks, f"nanochat_settings_{optimizer}")["status"] == 0
    one, fsdp = step_weights(str(tmp_path / "one"), 6), step_weights(str(two_ranks_folder / optimizer), 6)
    assert relative_difference(without_key_bias(fsdp), without_key_bias(one)) < 1e-4
