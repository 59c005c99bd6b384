"""
Adam-mini against its authors' package (the `adam-mini` package, called directly), on a tiny GPT built through
the registry.
"""

import pytest
import torch

from model import GPT, GPTConfig
from optim import build_optimizer
from parity import STEPS, lr_multiplier, scheduled_step
from test_optim import TINY, tiny_config


def package_names(name: str) -> str:
    """A parameter's name as Adam-mini's package reads a GPT-2's (its examples/gpt2: separate wq, wk, wv, wo)."""
    return name.removeprefix("transformer.").replace("attn.c_proj", "attn.wo")


@pytest.mark.quick
def test_adam_mini_matches_its_authors_package():
    """Against the `adam-mini` package 1.1.1 (zyushun/Adam-mini), on a float64 copy of the tiny GPT whose c_attn
    is split into the wq, wk and wv its GPT-2 has (so the package finds the blocks by its own names): heads for
    queries and keys, neurons for values and the other matrices, tokens for the tied embedding, one block for the
    position table and each norm weight, elements for biases; ours in float32 to float32 rounding."""
    adam_mini = pytest.importorskip("adam_mini")
    cfg = tiny_config(optimizer="adam-mini", learning_rate=1e-2, weight_decay=0.1, beta2=0.95)
    hp = cfg.hyperparameters
    torch.manual_seed(0)
    model = GPT(GPTConfig(**TINY))
    named = {}
    for name, p in model.named_parameters():
        if name.endswith("attn.c_attn.weight"):
            for part, piece in zip(("wq", "wk", "wv"), p.detach().double().chunk(3)):
                named[package_names(name).replace("c_attn", part)] = piece.clone().requires_grad_()
        else:
            named[package_names(name)] = p.detach().double().clone().requires_grad_()
    reference = adam_mini.Adam_mini(named.items(), lr=cfg.learning_rate, betas=(hp.beta1, hp.beta2), eps=hp.eps,
                                    weight_decay=hp.weight_decay, dim=TINY["n_embd"], n_heads=TINY["n_head"],
                                    verbose=False)
    optimizer = build_optimizer(model, cfg, "cpu")
    for step in range(STEPS):
        for group in reference.param_groups:
            group["lr"] = cfg.learning_rate * lr_multiplier(step)
        grads = scheduled_step(model, optimizer, step)
        for (name, _), g in zip(model.named_parameters(), grads):
            if name.endswith("attn.c_attn.weight"):
                for part, piece in zip(("wq", "wk", "wv"), g.chunk(3)):
                    named[package_names(name).replace("c_attn", part)].grad = piece.clone()
            else:
                named[package_names(name)].grad = g.clone()
        reference.step()
    for name, p in model.named_parameters():
        if name.endswith("attn.c_attn.weight"):
            expected = torch.cat([named[package_names(name).replace("c_attn", part)] for part in ("wq", "wk", "wv")])
        else:
            expected = named[package_names(name)]
        error = ((p.detach().double() - expected.detach()).norm() / expected.norm()).item()
        assert error < 2e-6, f"adam-mini: {name} relative error {error:.1e}"
