"""The optimizer diagnostics of the logs (optim/diagnostics.py) against a direct computation on a tiny
model: update and weight RMS per parameter kind, and MARS's variance-reduction statistics."""

import json
import math
import os
from contextlib import nullcontext

import pytest
import torch

import train
from conftest import run_train, tiny_run_args
from model import GPT, GPTConfig
from optim import build_optimizer, load_config
from optim.routing import parameter_kinds
from runtime import Runtime
from experiments import report


@pytest.mark.parametrize("optimizer", ["adamw", "mars", "mars-m"])
@pytest.mark.quick
def test_diagnostics_match_a_direct_computation(optimizer, tiny_dataset):
    cfg = load_config([], base=dict(data_dir=tiny_dataset, device="cpu", n_layer=2, n_head=2, n_embd=16, block_size=16,
                                     vocab_size=128, total_batch_size=4 * 16, micro_batch_size=4, optimizer=optimizer,
                                     learning_rate=1e-2, grad_clip=0.0, compile=False))
    rt = Runtime(rank=0, local_rank=0, world_size=1, device=torch.device("cpu"))
    data = train.load_data(cfg, rt)
    torch.manual_seed(0)
    model = GPT(GPTConfig(**cfg.model_args()))
    opt = build_optimizer(model, cfg, "cpu")
    scaler = torch.amp.GradScaler("cpu", enabled=False)
    named = dict(model.named_parameters())
    kinds = parameter_kinds(model)
    assert [n for n, p in named.items() if any(p is q for q in kinds["embeddings"])] == [
        "transformer.wte.weight", "transformer.wpe.weight"]
    assert all(".attn." in n for n, p in named.items() if any(p is q for q in kinds["attention"]))
    assert all(p.ndim == 1 for p in kinds["1d"])

    steps = train.StepContext(model, list(model.parameters()), opt, scaler, data.train_batches, cfg, rt, nullcontext())
    for step in range(3):
        before = {n: p.detach().clone() for n, p in named.items()}
        grads, last = {}, {}
        if step == 2:  # the gradients the step uses, and MARS's g_prev, to restate the statistics
            steps.forward_backward(step)
            grads = {n: p.grad.clone() for n, p in named.items()}
            last = {n: opt.state[p]["last_grad"].clone() for n, p in named.items() if "last_grad" in opt.state[p]}
            opt.zero_grad()
        _, _, diagnostics = steps.optimizer_step(step, kinds)
    for kind, params in kinds.items():
        names = [n for n, p in named.items() if any(p is q for q in params)]
        count = sum(named[n].numel() for n in names)
        update = math.sqrt(sum(((named[n] - before[n]) ** 2).sum().item() for n in names) / count)
        weight = math.sqrt(sum((named[n] ** 2).sum().item() for n in names) / count)
        assert diagnostics[f"update_rms/{kind}"].item() == pytest.approx(update, rel=1e-5)
        assert diagnostics[f"weight_rms/{kind}"].item() == pytest.approx(weight, rel=1e-5)
    count = sum(p.numel() for p in named.values())
    update = math.sqrt(sum(((p - before[n]) ** 2).sum().item() for n, p in named.items()) / count)
    assert diagnostics["update_rms"].item() == pytest.approx(update, rel=1e-5)

    if optimizer == "adamw":
        assert not any(k.startswith("mars/") for k in diagnostics)
        return
    k = 0.025 * cfg.hyperparameters.beta1 / (1 - cfg.hyperparameters.beta1)
    g = torch.cat([grads[n].flatten() for n in last]).double()
    g_prev = torch.cat([last[n].flatten() for n in last]).double()
    clipped = [(grads[n] + k * (grads[n] - last[n])).norm().item() > 1 for n in last]
    assert diagnostics["mars/clipped_fraction"].item() == pytest.approx(sum(clipped) / len(clipped))
    assert diagnostics["mars/grad_change"].item() == pytest.approx(((g - g_prev).norm() / g.norm()).item(), rel=1e-5)
    cos = (g @ g_prev / (g.norm() * g_prev.norm())).item()
    assert diagnostics["mars/grad_cos"].item() == pytest.approx(cos, rel=1e-4, abs=1e-6)


def test_diagnostics_reach_metrics_on_log_steps_only(tiny_dataset, tmp_path):
    out = str(tmp_path / "run")
    run_train(tiny_run_args(tiny_dataset, out, optimizer="mars", max_iters=6, log_interval=3))
    with open(os.path.join(out, "metrics.jsonl")) as f:
        rows = [r for r in map(json.loads, f) if r["type"] == "train"]
    assert [r["step"] for r in rows] == [3, 6]
    for key in ("update_rms", "weight_rms", "update_rms/attention", "weight_rms/1d", "mars/clipped_fraction",
                "mars/grad_change", "mars/grad_cos"):
        assert all(math.isfinite(r[key]) for r in rows), key
    assert 0 < rows[-1]["update_rms"] < rows[-1]["weight_rms"]
    text = report.main([out, "--out", str(tmp_path / "report")])  # and report.py plots them
    assert "![diagnostics](diagnostics.png)" in text
    assert os.path.getsize(tmp_path / "report" / "diagnostics.png") > 10_000
