"""
Sophia against a float64 restatement of its authors' SophiaG (Liuhong99/Sophia at a7e1572, sophia.py), on a tiny
GPT built through the registry (tests/parity.py); its Hessian estimate's labels, drawn from the model's own
softmax, through train.py on both cross-entropy paths.
"""

import os

import pytest
import torch

from config import ConfigError
from conftest import run_train, tiny_run_args
from data.loader import LABEL_DRAW_RANGE, TokenWindows, TrainBatches
from model import GPT, GPTConfig
from optim import build_optimizer, load_config
from optim.contract import HessianEstimate, needs_hessian_estimate
from optim.sophia import sampled_labels
from parity import gradients, lr_multiplier, scheduled_step
from test_optim import TINY, tiny_config


def sophia_reference(p, g, state, lr, wd, hp):
    """Liuhong99/Sophia sophia.py's _single_tensor_sophiag, for one tensor; bs is the run's tokens per step, as
    the authors' loop passes its own."""
    b1 = hp["beta1"]
    m, h = state.setdefault("m", torch.zeros_like(p)), state.setdefault("h", torch.zeros_like(p))
    p.mul_(1 - lr * wd)
    m.mul_(b1).add_(g, alpha=1 - b1)
    ratio = (m.abs() / (hp["sophia_rho"] * hp["bs"] * h + 1e-15)).clamp(None, 1)
    p.addcmul_(m.sign(), ratio, value=-lr)


def sophia_hessian_reference(g_hat, state, hp):
    """SophiaG.update_hessian, for one tensor."""
    b2 = hp["beta2"]
    state["h"].mul_(b2).addcmul_(g_hat, g_hat, value=1 - b2)


@pytest.mark.quick
def test_sophia_matches_its_authors_reference():
    """SophiaG's step and update_hessian (Liuhong99/Sophia at a7e1572, sophia.py) against their float64
    restatement, with an estimate (from gradients of its own) after every third step, as the loop's
    HessianEstimate contract calls it; rho is chosen so that the clip at 1 holds on some entries and not on
    others."""
    cfg = tiny_config(optimizer="sophia", decay_embeddings=False, learning_rate=1e-2, weight_decay=0.1,
                      sophia_rho=3e-4, sophia_hessian_interval=3)
    hp = cfg.hyperparameters.to_dict() | {"bs": cfg.total_batch_size}
    torch.manual_seed(0)
    model = GPT(GPTConfig(**TINY))
    reference = [p.detach().double().clone() for p in model.parameters()]
    optimizer = build_optimizer(model, cfg, "cpu")
    assert isinstance(optimizer, HessianEstimate) and optimizer.hessian_interval == 3
    decays = [p.ndim == 2 and ".wte." not in n and ".wpe." not in n for n, p in model.named_parameters()]
    states = [{} for _ in reference]
    clipped = []
    for step in range(12):
        grads = scheduled_step(model, optimizer, step)
        for p, g, state, decay in zip(reference, grads, states, decays):
            sophia_reference(p, g, state, cfg.learning_rate * lr_multiplier(step), hp["weight_decay"] if decay else 0.0,
                             hp)
            clipped.append((state["m"].abs() >= hp["sophia_rho"] * hp["bs"] * state["h"]).double().mean().item())
        if needs_hessian_estimate(optimizer, step):
            sampled = gradients(model, seed=100 + step)
            for p, g in zip(model.parameters(), sampled):
                p.grad = g.float()
            optimizer.update_hessian()
            optimizer.zero_grad()
            for g, state in zip(sampled, states):
                sophia_hessian_reference(g, state, hp)
    assert 0.2 < sum(clipped[-len(states):]) / len(states) < 0.8, clipped[-len(states):]  # both sides of the clip
    for (n, p), expected in zip(model.named_parameters(), reference):
        error = ((p.detach().double() - expected).norm() / expected.norm()).item()
        assert error < 2e-6, f"sophia: {n} relative error {error:.1e}"


def test_sophia_refuses_float16_by_name():
    with pytest.raises(ConfigError, match="cannot be combined with Sophia"):
        tiny_config(optimizer="sophia", dtype="float16")


@pytest.mark.quick
def test_the_labels_sophia_draws_follow_the_models_distribution_whatever_the_split(tiny_dataset):
    """optim.sophia.sampled_labels draws each label with its probability (20,000 draws a row); TrainBatches' draws (integers:
    a float input would be cast to bf16 by FSDP) for a step's rows are the same split over 1 rank and 2 micro-steps as
    over 4 ranks, and differ by step."""
    batches = TrainBatches(TokenWindows(tiny_dataset, "train", 32, 128), seed=3, sequences_per_step=8)
    cpu = torch.device("cpu")
    whole = torch.cat([batches.label_draws(5, micro_step, 4, 0, 1, cpu) for micro_step in range(2)])
    split = torch.cat([batches.label_draws(5, 0, 2, rank, 4, cpu) for rank in range(4)])
    assert whole.shape == (8, 32) and torch.equal(whole, split)
    assert whole.dtype == torch.int32  # (FSDP's mixed precision would cast floats to bf16 on their way in)
    assert not torch.equal(whole, torch.cat([batches.label_draws(6, m, 4, 0, 1, cpu) for m in range(2)]))
    torch.manual_seed(0)
    probs = torch.randn(3, 10).mul(2).softmax(-1)
    draws = 20_000
    labels = sampled_labels(probs.repeat_interleave(draws, 0), torch.randint(0, LABEL_DRAW_RANGE, (3 * draws,)))
    labels = labels.view(3, draws)
    frequencies = torch.stack([torch.bincount(row, minlength=10) for row in labels]).double() / draws
    assert (frequencies - probs).abs().max() < 0.015, (frequencies, probs)


@pytest.mark.parametrize("fused_cross_entropy", [False, True])
def test_sophias_hessian_estimate_is_the_gradient_on_labels_the_model_draws(tiny_dataset, tmp_path,
                                                                          fused_cross_entropy):
    """Through train.py, a Hessian estimate every 2 steps: after step 2 the checkpoint's h is (1 - beta2) g^2,
    g the gradient, at the step-2 weights, of the mean loss over the second step's batch (two micro-steps) on labels drawn
    from the model's own softmax by inverse CDF at TrainBatches.label_draws' numbers (sampled here by counting
    the cumulative probabilities below each), clipped at grad_clip; both cross-entropy paths."""
    out = str(tmp_path / "run")
    args = tiny_run_args(tiny_dataset, out, optimizer="sophia", sophia_hessian_interval=2, max_iters=2,
                         eval_interval=2, micro_batch_size=4, grad_clip=0.05, grad_multiplier=1.0, dropout=0.0,
                         fused_cross_entropy=fused_cross_entropy)
    run_train(args)
    cfg = load_config(args)
    ckpt = torch.load(os.path.join(out, "ckpt.pt"), weights_only=True)
    model = GPT(GPTConfig(**cfg.model_args()))
    model.load_state_dict(ckpt["model"])
    optimizer = build_optimizer(model, cfg, "cpu")
    optimizer.load_state_dict(ckpt["optimizer"])
    batches = TrainBatches(TokenWindows(tiny_dataset, "train", cfg.block_size, cfg.vocab_size), cfg.seed,
                           cfg.total_batch_size // cfg.block_size)
    for micro_step in range(2):
        x, _ = batches.micro_batch(1, micro_step, 4, 0, 1)
        numbers = batches.label_draws(1, micro_step, 4, 0, 1, torch.device("cpu"))
        logits = model(x, all_logits=True)[0].float()
        cumulative = logits.detach().softmax(-1).cumsum(-1)
        labels = (cumulative <= numbers[..., None] / 2**24 * cumulative[..., -1:]).sum(-1).clamp_max(cfg.vocab_size - 1)
        (torch.nn.functional.cross_entropy(logits.flatten(0, 1), labels.flatten()) / 2).backward()
    norm = torch.stack([p.grad.double().norm() for p in model.parameters()]).norm()
    scale = min(1.0, cfg.grad_clip / (norm.item() + 1e-6))
    assert scale < 0.5  # the clip is part of what is checked
    beta2 = cfg.hyperparameters.beta2
    for name, p in model.named_parameters():
        expected = (1 - beta2) * (p.grad * scale) ** 2
        error = ((optimizer.state[p]["hessian"] - expected).norm() / expected.norm()).item()
        assert error < 1e-4, f"{name}: relative error {error:.1e}"
