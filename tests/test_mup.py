"""
mup (--parametrization=mup, docs/scaling.md): equal to sp at its base width for every optimizer of the registry;
the coordinate check (each layer's activations move as much after a few steps at every width under mup, and
more the wider the model under sp), for AdamW's and Muon's rules; the per-layer learning rates and weight decay;
resume and two-rank FSDP2 unchanged; what cannot hold mup refused by name.
"""

import math
import os

import pytest
import torch

from conftest import PYTHON, REPO, run_train, scenario_result, tiny_run_args
from model import GPT, GPTConfig
from optim import OPTIMIZERS, build_optimizer, load_config
from optim.routing import HIDDEN, parameter_kinds
from test_train import load_weights, read_metrics

TINY = ["--n_layer=2", "--n_head=2", "--block_size=16", "--vocab_size=64", "--dropout=0.0", "--lr_schedule=constant",
        "--warmup_iters=0", "--micro_batch_size=4", "--total_batch_size=64", "--device=cpu"]
MUP = ["--parametrization=mup"]


def built(args: list[str]) -> tuple[GPT, torch.optim.Optimizer]:
    cfg = load_config([*TINY, *args])
    torch.manual_seed(0)
    model = GPT(GPTConfig(**cfg.model_args()))
    return model, build_optimizer(model, cfg, "cpu")


def stepped_weights(args: list[str], steps: int = 2) -> list[torch.Tensor]:
    """The weights after `steps` steps on fixed random gradients."""
    model, optimizer = built(args)
    gen = torch.Generator().manual_seed(1)
    for _ in range(steps):
        for p in model.parameters():
            p.grad = torch.randn(p.shape, generator=gen) * 0.1
        optimizer.step()
    return [p.detach().clone() for p in model.parameters()]


@pytest.mark.parametrize("optimizer", sorted(OPTIMIZERS))
def test_mup_at_its_base_width_is_sp(optimizer):
    """At mup_base_width, mup is sp: the same initial model, and the same steps of every optimizer, though mup's
    hidden matrices are a param group of their own (to float32 rounding where an optimizer reduces over a group)."""
    sp = stepped_weights([f"--optimizer={optimizer}", "--n_embd=32"])
    mup = stepped_weights([f"--optimizer={optimizer}", "--n_embd=32", *MUP, "--mup_base_width=32"])
    for a, b in zip(sp, mup):
        torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-7)


@pytest.mark.quick
def test_the_hidden_matrices_learning_rate_and_decay_follow_the_optimizers_rule():
    """Width 64 over a base of 16 (m = 4): AdamW's hidden matrices at lr / 4, Muon's at its lr with weight decay / 4;
    the embeddings and the 1-D parameters as sp has them; the hidden init's std / 2."""
    for name, lr_factor, decay_factor in (("adamw", 1 / 4, 1.0), ("muon", 1.0, 1 / 4)):
        args = [f"--optimizer={name}", "--n_embd=64", "--learning_rate=0.01", "--weight_decay=0.1"]
        sp_model, sp = built(args)
        mup_model, mup = built([*args, *MUP, "--mup_base_width=16"])
        hidden = {id(p) for kind in HIDDEN for p in parameter_kinds(mup_model)[kind]}
        sp_of = {id(q): g for g in sp.param_groups for q in g["params"]}
        sp_params = dict(zip(map(id, mup_model.parameters()), sp_model.parameters()))
        for group in mup.param_groups:
            first = group["params"][0]
            reference = sp_of[id(sp_params[id(first)])]
            scaled = all(id(p) in hidden for p in group["params"])
            assert scaled or not any(id(p) in hidden for p in group["params"])  # (hidden matrices: a group apart)
            assert group["lr"] == pytest.approx(reference["lr"] * (lr_factor if scaled else 1.0))
            assert group["base_lr"] == group["lr"]
            assert group["weight_decay"] == pytest.approx(reference["weight_decay"] * (decay_factor if scaled else 1.0))
    model, _ = built(["--n_embd=256", *MUP, "--mup_base_width=16"])  # (a wide model: the std measured to 2%)
    std = model.transformer.h[0].mlp.c_fc.weight.std().item()
    assert std == pytest.approx(0.02 / 4, rel=0.02)
    assert model.transformer.wte.weight.std().item() == pytest.approx(0.02, rel=0.02)


def activation_changes(width: int, args: list[str], steps: int = 5) -> dict[str, float]:
    """The RMS change, after `steps` steps on one batch, of the first block's attention output, the last block's MLP
    output and the logits, for a model of this width (the coordinate check of Yang et al., TP V, figure 5)."""
    model, optimizer = built([f"--n_embd={width}", "--weight_decay=0.0", *args])
    gen = torch.Generator().manual_seed(1)
    x, y = torch.randint(0, 64, (8, 16), generator=gen), torch.randint(0, 64, (8, 16), generator=gen)
    layers = {"attention": model.transformer.h[0].attn, "mlp": model.transformer.h[-1].mlp}
    seen: dict[str, torch.Tensor] = {}
    for name, layer in layers.items():
        layer.register_forward_hook(lambda module, inputs, out, name=name: seen.__setitem__(name, out.detach()))

    def outputs() -> dict[str, torch.Tensor]:
        with torch.no_grad():
            logits, _ = model(x, all_logits=True)
        return {**seen, "logits": logits}

    before = outputs()
    for _ in range(steps):
        model(x, y)[1].backward()
        optimizer.step()
        optimizer.zero_grad()
    after = outputs()
    return {name: (after[name] - before[name]).pow(2).mean().sqrt().item() for name in after}


@pytest.mark.parametrize("optimizer", [["--optimizer=adamw", "--learning_rate=1e-2"],
                                       ["--optimizer=muon", "--learning_rate=2e-2", "--lr_1d=3e-3",
                                        "--weight_decay_1d=0.0", "--muon_embeddings_on_adamw=True"],
                                       ["--optimizer=adamw", "--learning_rate=1e-2", "--model=llama-124m"]],
                         ids=["adamw", "muon", "llama-adamw"])
def test_coordinate_check(optimizer):
    """Widths 32 to 256 (8x): under mup every activation's change grows or shrinks by less than 8^0.3 = 1.9x (measured:
    at most 1.4x); under sp the hidden layers' and the logits' grow by more than 8^0.35 = 2.1x (measured: AdamW's
    hidden layers 50-209x, Muon's 3.1-4.8x; docs/scaling.md's table)."""
    widths = (32, 64, 128, 256)
    slopes = {}
    for parametrization, args in (("sp", []), ("mup", [*MUP, "--mup_base_width=32"])):
        changes = [activation_changes(width, [*optimizer, *args]) for width in widths]
        slopes[parametrization] = {name: math.log(changes[-1][name] / changes[0][name]) / math.log(8)
                                   for name in changes[0]}
    assert all(abs(slope) < 0.3 for slope in slopes["mup"].values()), slopes
    assert all(slope > 0.35 for slope in slopes["sp"].values()), slopes


@pytest.mark.quick
def test_mup_settings_that_cannot_hold_are_refused_by_name():
    from config import ConfigError

    with pytest.raises(ConfigError, match="needs mup_base_width"):
        load_config([*TINY, *MUP])
    with pytest.raises(ConfigError, match="read only with parametrization='mup'"):
        load_config([*TINY, "--mup_base_width=32"])
    with pytest.raises(ConfigError, match="parametrization"):
        load_config([*TINY, "--parametrization=mu-p"])


def mup_run_args(tiny_dataset: str, out_dir: str, **overrides) -> list[str]:
    """A tiny run at width 64 under mup over a base width of 32 (TINY_MODEL's)."""
    return tiny_run_args(tiny_dataset, out_dir, **overrides) + ["--n_embd=64", *MUP, "--mup_base_width=32"]


def test_a_mup_run_resumes_bit_exact_and_refuses_sp(tiny_dataset, tmp_path):
    straight, halves = str(tmp_path / "straight"), str(tmp_path / "halves")
    common = dict(lr_decay_iters=8, eval_interval=4, optimizer="muon")
    run_train(mup_run_args(tiny_dataset, straight, max_iters=8, **common))
    run_train(mup_run_args(tiny_dataset, halves, max_iters=4, **common))
    run_train(mup_run_args(tiny_dataset, halves, max_iters=8, init_from="resume", **common))
    a, b = load_weights(straight), load_weights(halves)
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert read_metrics(straight, "val")[-1]["val_loss"] == read_metrics(halves, "val")[-1]["val_loss"]
    sp_resume = tiny_run_args(tiny_dataset, halves, max_iters=12, init_from="resume", n_embd=64,
                              parametrization="sp", mup_base_width=0, **common)  # (asked for: the run's is mup)
    proc = run_train(sp_resume, check=False)
    assert proc.returncode == 2 and "parametrization" in proc.stderr and "Traceback" not in proc.stderr


def test_a_mup_model_is_not_exported_to_hugging_face(tiny_dataset, tmp_path):
    """A Hugging Face GPT-2 cannot compute mup's 1/d attention and logits / m: the export says so, writes nothing."""
    import subprocess

    run = str(tmp_path / "run")
    run_train(mup_run_args(tiny_dataset, run, max_iters=2, eval_interval=2))
    out = tmp_path / "hf"
    proc = subprocess.run([PYTHON, "-m", "eval.export_hf", "--checkpoint", os.path.join(run, "ckpt.pt"), "--out", str(out)],
                          capture_output=True, text=True, cwd=REPO)
    assert proc.returncode == 2 and "mup" in proc.stderr and "Traceback" not in proc.stderr
    assert not out.exists()


def two_rank_scenarios(tiny_dataset: str, folder) -> list[tuple]:
    """For conftest.two_ranks: a mup run under FSDP2 on two ranks."""
    args = mup_run_args(tiny_dataset, str(folder / "mup_fsdp"), micro_batch_size=4, max_iters=6, eval_interval=3,
                        data_parallel="fsdp", optimizer="muon")
    return [("mup_fsdp", "ranks:train", dict(args=args))]


def test_a_mup_run_on_two_fsdp_ranks_equals_one_process(tiny_dataset, tmp_path, two_ranks, two_ranks_folder):
    single = str(tmp_path / "single")
    run_train(mup_run_args(tiny_dataset, single, micro_batch_size=8, max_iters=6, eval_interval=3, optimizer="muon"))
    assert scenario_result(two_ranks, "mup_fsdp")["status"] == 0
    sharded = str(two_ranks_folder / "mup_fsdp")
    for kind, key in (("train", "loss"), ("val", "val_loss")):
        a, b = read_metrics(single, kind), read_metrics(sharded, kind)
        assert [r["step"] for r in a] == [r["step"] for r in b] and len(a) >= 2
        assert [r[key] for r in b] == pytest.approx([r[key] for r in a], rel=1e-4)
