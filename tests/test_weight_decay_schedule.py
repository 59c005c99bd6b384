"""weight_decay_schedule="lr", schedule-coupled weight decay (AdamC / Muon-C, Defazio, arXiv 2506.02285): each
group's weight_decay follows its learning rate (weight_decay x lr / peak lr). Proven: AdamW under warmup and cosine
equals the rule written out in float64 (a step decays by lr^2 / peak x wd); every registry optimizer whose groups
carry weight_decay reads it at each step (so the schedule reaches it), and one whose groups carry none is refused;
a run stopped and resumed lands where the straight run does, and Muon's run under FSDP2 on two ranks where one
process's does."""

import math

import pytest
import torch

from conftest import (
    random_gradient_step, relative_difference, run_train, scenario_result, step_weights, tiny_run_args,
    without_key_bias,
)
from config import ConfigError
from model import GPT, GPTConfig
from optim import OPTIMIZERS, build_optimizer, load_config
from optim.schedule import set_learning_rates

TINY = dict(model="small", n_layer=2, n_head=2, n_embd=32, block_size=16, vocab_size=96)


def tiny_config(**overrides):
    return load_config([], base=dict(TINY, **overrides))


def test_adamw_decays_by_the_square_of_the_learning_rate_over_its_peak():
    """Eight steps of warmup and cosine: our AdamW with weight_decay_schedule=lr against Adam written out in float64,
    whose decoupled decay at step t is lr_t * (lr_t / lr_peak) * wd."""
    cfg = tiny_config(optimizer="adamw", learning_rate=1e-2, min_lr=1e-3, warmup_iters=3, max_iters=8,
                      weight_decay=0.5, weight_decay_schedule="lr", decay_embeddings=True)
    torch.manual_seed(0)
    model = GPT(GPTConfig(**cfg.model_args())).double()
    optimizer = build_optimizer(model, cfg, "cpu")
    hp = cfg.hyperparameters
    reference = {name: p.detach().clone() for name, p in model.named_parameters()}
    moments = {name: (torch.zeros_like(p), torch.zeros_like(p)) for name, p in reference.items()}
    decayed = {id(p) for g in optimizer.param_groups if g["weight_decay"] > 0 for p in g["params"]}
    names = {id(p): name for name, p in model.named_parameters()}
    generator = torch.Generator().manual_seed(1)
    for step in range(8):
        lr = set_learning_rates(optimizer, step, cfg, 8)
        grads = {name: torch.randn(p.shape, generator=generator, dtype=torch.float64) for name, p in reference.items()}
        for name, p in model.named_parameters():
            p.grad = grads[name].clone()
        optimizer.step()
        for group in optimizer.param_groups:
            group_lr = group["lr"]
            for p in group["params"]:
                name = names[id(p)]
                m, v = moments[name]
                m.mul_(hp.beta1).add_(grads[name], alpha=1 - hp.beta1)
                v.mul_(hp.beta2).addcmul_(grads[name], grads[name], value=1 - hp.beta2)
                m_hat, v_hat = m / (1 - hp.beta1 ** (step + 1)), v / (1 - hp.beta2 ** (step + 1))
                wd = hp.weight_decay * group_lr / group["base_lr"] if id(p) in decayed else 0.0
                reference[name] = reference[name] * (1 - group_lr * wd) - group_lr * m_hat / (v_hat.sqrt() + hp.eps)
        assert lr == pytest.approx(optimizer.param_groups[0]["lr"])
    worst = max((p.detach() - reference[name]).abs().max().item() for name, p in model.named_parameters())
    assert worst < 1e-12, worst
    # the decay really followed the schedule: at the last step lr / peak is well below 1
    assert optimizer.param_groups[0]["weight_decay"] == pytest.approx(0.5 * optimizer.param_groups[0]["lr"] / 1e-2)
    assert optimizer.param_groups[0]["weight_decay"] < 0.25


# the setting that makes each optimizer's groups decay (the hyperball's matrices carry no decay: its side Adam's)
DECAY = dict(adamh=dict(adam_weight_decay=0.1), muonh=dict(adam_weight_decay=0.1), scion={})
NO_DECAY_KEY = ("scion",)  # its learning rate is its decay (the constrained update): refused


@pytest.mark.parametrize("name", list(OPTIMIZERS))
def test_every_optimizer_reads_its_groups_weight_decay_at_each_step(name):
    """The schedule changes group["weight_decay"] between steps: an optimizer that read it once, at construction,
    would silently keep a constant decay. For every registry optimizer whose groups carry weight_decay, one step
    after setting it to 0 differs from one at its value on the decayed parameters; one whose groups carry none
    (its decay is its own rule) is refused with weight_decay_schedule=lr."""
    extra = dict(lr_schedule="constant") if name == "schedule-free-adamw" else {}
    cfg = tiny_config(optimizer=name, learning_rate=1e-2, weight_decay_schedule="lr",
                      **DECAY.get(name, dict(weight_decay=0.1)), **extra)
    torch.manual_seed(0)
    model = GPT(GPTConfig(**cfg.model_args()))
    if name in NO_DECAY_KEY:
        with pytest.raises(ConfigError, match="weight_decay_schedule=lr: .* no weight_decay"):
            build_optimizer(model, cfg, "cpu")
        return
    results = []
    for decay_now in (True, False):
        torch.manual_seed(0)
        # (Prodigy's first steps decay by ~1e-9, below float32's resolution; Shampoo's float64 root inverses take a
        # minute on the CPU)
        model = GPT(GPTConfig(**cfg.model_args())).to(torch.float64 if name == "prodigy" else torch.float32)
        optimizer = build_optimizer(model, cfg, "cpu")
        decayed = [p for g in optimizer.param_groups if g.get("weight_decay", 0) > 0 for p in g["params"]]
        assert decayed, f"{name}: no group decays"
        if not decay_now:
            for group in optimizer.param_groups:
                if "weight_decay" in group:
                    group["weight_decay"] = 0.0
        generator = torch.Generator().manual_seed(1)
        for _ in range(2):
            random_gradient_step(model, optimizer, generator)
        results.append([p.detach().clone() for p in decayed])
    differences = [(a - b).abs().max().item() for a, b in zip(*results)]
    assert max(differences) > 0, f"{name} ignored a change of its groups' weight_decay after construction"


def test_a_run_with_the_coupled_decay_resumes_bit_for_bit(tiny_dataset, tmp_path):
    """Stopped at step 3 of a cosine schedule and resumed, the weights at step 6 are the straight run's: the decay
    of each step is recomputed from the group's base_weight_decay, never carried in the checkpoint."""
    def args(out, max_iters, **more):
        return tiny_run_args(tiny_dataset, str(out), max_iters=max_iters, eval_interval=3, warmup_iters=2,
                             lr_decay_iters=6, optimizer="adamw", weight_decay=0.5, weight_decay_schedule="lr",
                             **more)
    run_train(args(tmp_path / "straight", 6))
    run_train(args(tmp_path / "halves", 3))
    run_train(args(tmp_path / "halves", 6, init_from="resume"))
    straight, halves = step_weights(str(tmp_path / "straight"), 6), step_weights(str(tmp_path / "halves"), 6)
    assert all(torch.equal(straight[k], halves[k]) for k in straight)
    assert math.isfinite(sum(v.float().sum().item() for v in straight.values()))


def sharded_run_args(tiny_dataset: str, out, schedule: str = "lr", **more) -> list[str]:
    return tiny_run_args(tiny_dataset, str(out), max_iters=6, eval_interval=3, warmup_iters=2, lr_decay_iters=6,
                         optimizer="muon", weight_decay=0.5, weight_decay_schedule=schedule, micro_batch_size=4,
                         **more)


def two_rank_scenarios(tiny_dataset: str, folder) -> list[tuple]:
    """For conftest.two_ranks: the FSDP2 half of test_fsdp_on_two_ranks_decays_as_one_process."""
    return [("coupled_decay_fsdp", "ranks:train",
             dict(args=sharded_run_args(tiny_dataset, folder / "coupled_decay_fsdp", data_parallel="fsdp")))]


def test_fsdp_on_two_ranks_decays_as_one_process(tiny_dataset, tmp_path, two_ranks, two_ranks_folder):
    """The schedule rewrites each group's weight_decay on every rank alike: Muon (its matrices' decay on their
    row shards, the 1-D groups' on AdamW) under FSDP2 on two ranks ends where one process does, far nearer than the
    schedule moves the run (measured 1.2e-3)."""
    run_train(sharded_run_args(tiny_dataset, tmp_path / "one"))
    run_train(sharded_run_args(tiny_dataset, tmp_path / "constant", schedule="constant"))
    assert scenario_result(two_ranks, "coupled_decay_fsdp")["status"] == 0
    one = without_key_bias(step_weights(str(tmp_path / "one"), 6))
    fsdp = without_key_bias(step_weights(str(two_ranks_folder / "coupled_decay_fsdp"), 6))
    assert relative_difference(fsdp, one) < 1e-5
    assert relative_difference(without_key_bias(step_weights(str(tmp_path / "constant"), 6)), one) > 1e-4
