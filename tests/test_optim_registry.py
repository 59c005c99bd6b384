"""
The registry's contract, for every optimizer in it (read from optim.OPTIMIZERS, not a sample): the capabilities
each declares are those the loop asks of it, its state saved as the loop saves and restored as resume restores lands
where not stopping does, and a step reads no tensor on the host.
"""

import io

import pytest
import torch
from torch.utils._pytree import tree_leaves

from checkpoint import restore_training_state
from model import GPT, GPTConfig
from optim import HYPERPARAMETERS, OPTIMIZERS, build_optimizer
from optim.contract import (
    EvaluationWeights, HessianEstimate, SecondGradient, VarianceReduction, evaluation_weights, needs_second_gradient,
)
from parity import gradients, lr_multiplier
from test_optim import TINY, tiny_config


@pytest.mark.parametrize("name", list(OPTIMIZERS))
def test_every_optimizer_declares_what_the_loop_asks_of_it(name):
    """The contract: the capabilities are declared by type, and the registry's passes per step follow
    from the hyperparameters as the built optimizer's capability does."""
    model = GPT(GPTConfig(**TINY))
    overrides = dict(lr_schedule="constant") if name == "schedule-free-adamw" else {}
    for second in ([False, True] if "is_approx" in HYPERPARAMETERS[name].__dataclass_fields__ else [False]):
        extra = dict(is_approx=not second) if second or "is_approx" in HYPERPARAMETERS[name].__dataclass_fields__ else {}
        cfg = tiny_config(optimizer=name, **overrides, **extra)
        optimizer = build_optimizer(model, cfg, "cpu")
        assert needs_second_gradient(optimizer) == cfg.hyperparameters.second_gradient() == second
        hessian = isinstance(optimizer, HessianEstimate)
        assert hessian == (name == "sophia")
        assert cfg.hyperparameters.gradients_per_step() == (2 if second else 1 + 1 / optimizer.hessian_interval
                                                            if hessian else 1)
        assert isinstance(optimizer, SecondGradient) == isinstance(optimizer, VarianceReduction) == (
            name in ("mars", "mars-m"))
        assert isinstance(optimizer, EvaluationWeights) == (name == "schedule-free-adamw")
        assert cfg.hyperparameters.display_name()


@pytest.mark.parametrize("name", list(OPTIMIZERS))
@pytest.mark.quick
def test_every_optimizer_resumes_from_its_checkpointed_state(name):
    """Saved as the loop saves (inside evaluation_weights) and restored as resume restores
    (checkpoint.restore_training_state, then train_weights), three more steps land where not stopping
    does: the moments and the run state kept in param groups (step counts, averages) come back."""
    overrides = dict(lr_schedule="constant") if name == "schedule-free-adamw" else {}
    cfg = tiny_config(optimizer=name, learning_rate=1e-2, **overrides)

    def step(model, optimizer, seed):
        for group in optimizer.param_groups:
            group["lr"] = group["base_lr"] * lr_multiplier(seed)
        if needs_second_gradient(optimizer):
            for p, g in zip(model.parameters(), gradients(model, seed + 100)):
                p.grad = g.float()
            optimizer.stash_grad_for_next_step()
            optimizer.zero_grad()
        for p, g in zip(model.parameters(), gradients(model, seed)):
            p.grad = g.float()
        optimizer.step()
        optimizer.zero_grad()

    torch.manual_seed(0)
    model = GPT(GPTConfig(**TINY))
    optimizer = build_optimizer(model, cfg, "cpu")
    for seed in range(3):
        step(model, optimizer, seed)
    buffer = io.BytesIO()
    with evaluation_weights(optimizer):
        torch.save(dict(model=model.state_dict(), optimizer=optimizer.state_dict(), scaler={}, step=3,
                        best_val_loss=0.0), buffer)
    for seed in range(3, 6):
        step(model, optimizer, seed)

    torch.manual_seed(1)  # other initial weights: everything must come from the checkpoint
    resumed = GPT(GPTConfig(**TINY))
    resumed_optimizer = build_optimizer(resumed, cfg, "cpu")
    buffer.seek(0)
    restore_training_state(torch.load(buffer, weights_only=True), resumed, resumed_optimizer,
                           torch.amp.GradScaler("cpu", enabled=False))
    if isinstance(resumed_optimizer, EvaluationWeights):
        resumed_optimizer.train_weights()
    for seed in range(3, 6):
        step(resumed, resumed_optimizer, seed)
    for (n, p), q in zip(model.named_parameters(), resumed.parameters()):
        assert torch.allclose(p, q, rtol=1e-6, atol=1e-7), f"{name}: {n}"


@pytest.mark.parametrize("name", ["nadamw", "prodigy", "sophia", "adam-mini", "scion", "kron", "soap", "muonclip",
                                  "adamh", "muonh", "normuon", "adamuon", "dion", "shampoo"])
def test_a_step_reads_no_tensor_on_the_host(name):
    """On the meta device a tensor has no value to read: a step that synced with the host (.item(), a
    tensor in an if) would fail there, as it would stall a GPU. Prodigy's one step size over the whole model
    stays a tensor (its reference reads each parameter's dot product with .item()); Adam-mini's block statistics,
    Scion's whole-tensor rms, NorMuon's and AdaMuon's whole-matrix norms and Dion's all-zero check too (its
    reference's is arithmetic too; cholesky_ex's info is not read)."""
    with torch.device("meta"):
        model = GPT(GPTConfig(**TINY))
    optimizer = build_optimizer(model, tiny_config(optimizer=name), "cpu")
    for step in range(2):
        for p in model.parameters():
            p.grad = torch.empty_like(p)
        optimizer.step()
    states = [t for s in optimizer.state.values() for t in tree_leaves(s) if torch.is_tensor(t)]  # (SOAP's lists)
    assert len(optimizer.state) == len(list(model.parameters())) and all(t.device.type == "meta" for t in states)
