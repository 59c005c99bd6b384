"""
Schedule-Free AdamW against its algorithm restated in float64 (facebookresearch/schedule_free's
AdamWScheduleFree, the `schedulefree` package we depend on), on a tiny GPT built through the registry
(tests/parity.py): float32 to float32 rounding on the weights it evaluates; it saves and resumes them.
"""

import pytest
import torch

from conftest import run_train, tiny_run_args
from parity import check_element_wise_parity
from test_train import load_weights, read_metrics


def schedule_free_reference(p, g, state, lr, wd, hp, group_state):
    """One parameter's step; group_state holds the group's k, lr_max and weight_sum (advanced once per
    group and step by the caller, before its parameters)."""
    b1, b2, eps = hp["beta1"], hp["beta2"], hp["eps"]
    k, ckp1, scheduled_lr = group_state["k"] - 1, group_state["ckp1"], group_state["lr"]
    z, v = state.setdefault("z", p.clone()), state.setdefault("v", torch.zeros_like(p))
    v.mul_(b2).add_(g * g * (1 - b2))
    normalized = g / ((v / (1 - b2 ** (k + 1))).sqrt() + eps) + wd * p
    p.lerp_(z, ckp1)
    p.add_(scheduled_lr * (b1 * (1 - ckp1) - 1) * normalized)
    z.sub_(scheduled_lr * normalized)


def advance_schedule_free_group(group_state, lr, hp):
    k = group_state.setdefault("k", 0)
    warmup = hp["sf_warmup_steps"]
    scheduled = lr * ((k + 1) / warmup if k < warmup else 1.0)
    group_state["lr_max"] = max(scheduled, group_state.get("lr_max", -1.0))
    weight = (k + 1) ** hp["sf_r"] * group_state["lr_max"] ** hp["sf_weight_lr_power"]
    group_state["weight_sum"] = group_state.get("weight_sum", 0.0) + weight
    group_state.update(ckp1=weight / group_state["weight_sum"], lr=scheduled, k=k + 1)


OVERRIDES = dict(learning_rate=1e-2, weight_decay=0.1, beta2=0.95, sf_warmup_steps=3, lr_schedule="constant",
                 warmup_iters=0)


def test_schedule_free_adamw_matches_its_authors_reference():
    """What it evaluates and saves, x (from y and z), against the algorithm's; its schedule is its own warmup."""
    check_element_wise_parity("schedule-free-adamw", OVERRIDES, {}, torch.float32, 2e-6, schedule_free_reference,
                              scheduled=False, advance_group=advance_schedule_free_group,
                              evaluated=lambda p, state, hp: p.lerp_(state["z"], 1 - 1 / hp["beta1"]))


def test_schedule_free_evaluates_saves_and_resumes_its_averaged_weights(tiny_dataset, tmp_path):
    """Through train.py: the loop evaluates and saves x (eval_only on the checkpoint scores what the run
    logged), and a run stopped at step 6 and resumed (y restored from x and z) continues the
    uninterrupted one, to float32 rounding."""
    sf = dict(optimizer="schedule-free-adamw", lr_schedule="constant", warmup_iters=0, min_lr=0.0,
              sf_warmup_steps=3, learning_rate=1e-2, weight_decay=0.1)
    whole, halves = str(tmp_path / "whole"), str(tmp_path / "halves")
    run_train(tiny_run_args(tiny_dataset, whole, **sf))
    run_train(tiny_run_args(tiny_dataset, halves, **sf, max_iters=6))
    run_train(tiny_run_args(tiny_dataset, halves, **sf, init_from="resume"))
    logged = read_metrics(whole, "val")[-1]["val_loss"]
    scored = run_train(tiny_run_args(tiny_dataset, whole, **sf, eval_only=True)).stdout
    assert f"val loss {logged:.4f}" in scored
    for name, weight in load_weights(whole).items():
        resumed = load_weights(halves)[name]
        assert torch.allclose(resumed, weight, rtol=1e-5, atol=1e-6), name
    assert [r["loss"] for r in read_metrics(halves, "train")] == pytest.approx(
        [r["loss"] for r in read_metrics(whole, "train")], rel=1e-5)
