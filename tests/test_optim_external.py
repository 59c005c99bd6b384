"""
An optimizer from outside the project by its import path (--optimizer=package.module:Name, optim/external.py):
PyTorch's own torch.optim.Muon through it equals ours in float64 at the settings that should agree (and differs by
its bf16 iteration where it runs as shipped); an external run resumes bit-exact, and on two FSDP2 ranks equals one
process as an element-wise optimizer does; what does not follow the contract is named.
"""

import pytest
import torch

from config import ConfigError
from conftest import run_train, scenario_result, tiny_run_args
from model import GPT, GPTConfig
from optim import OPTIMIZERS, build_optimizer, load_config
from optim.routing import HIDDEN, parameter_kinds
from test_train import load_weights, read_metrics

TINY = ["--n_layer=2", "--n_head=2", "--n_embd=32", "--block_size=16", "--vocab_size=64", "--dropout=0.0",
        "--lr_schedule=constant", "--warmup_iters=0", "--micro_batch_size=4", "--total_batch_size=64", "--device=cpu"]
# the settings where ours and torch.optim.Muon should agree: Muon on the blocks' matrices, AdamW (torch's arithmetic)
# on the embeddings and the 1-D parameters
SHARED = ["--learning_rate=0.02", "--weight_decay=0.1", "--lr_1d=3e-3", "--weight_decay_1d=0.1"]
OURS = ["--optimizer=muon", "--muon_embeddings_on_adamw=True", "--muon_adamw=torch", "--muon_momentum=0.95", *SHARED]
THEIRS = ["--optimizer=torch.optim:Muon", "--external_params=matrices", "--momentum=0.95", *SHARED]


def float64_steps(args: list[str], steps: int = 3) -> dict[str, list[torch.Tensor]]:
    """The weights of a float64 model after `steps` steps on fixed random gradients: the blocks' matrices and the
    rest (the embeddings and the 1-D parameters)."""
    torch.manual_seed(0)
    cfg = load_config([*TINY, *args])
    model = GPT(GPTConfig(**cfg.model_args())).double()
    optimizer = build_optimizer(model, cfg, "cpu")
    gen = torch.Generator().manual_seed(1)
    for _ in range(steps):
        for p in model.parameters():
            p.grad = torch.randn(p.shape, generator=gen, dtype=torch.float64) * 0.1
        optimizer.step()
    hidden = {id(p) for kind in HIDDEN for p in parameter_kinds(model)[kind]}
    return {"matrices": [p.detach().clone() for p in model.parameters() if id(p) in hidden],
            "rest": [p.detach().clone() for p in model.parameters() if id(p) not in hidden]}


def largest_relative_difference(a: list[torch.Tensor], b: list[torch.Tensor]) -> float:
    return max(((x - y).norm() / y.norm()).item() for x, y in zip(a, b))


def test_torch_optim_muon_through_the_import_path_equals_ours_in_float64(monkeypatch):
    """torch.optim.Muon through --optimizer=torch.optim:Muon against our Muon, float64 weights and gradients, three
    steps. The blocks' matrices (Muon's): the same quintic coefficients, five steps, Nesterov momentum (theirs an
    average, ours a sum: the same direction, which the iteration's normalisation makes one update),
    max(1, rows/cols)^0.5 and decoupled decay, so with both iterations in float64 (ours runs in fp32 on CPU and bf16
    on CUDA; theirs casts to bf16 on every device) they differ only by where each puts its eps of 1e-7 (ours
    added to the norm, theirs its floor), and with the eps taken out, by float64's rounding. The embeddings and
    1-D parameters (the side AdamW, theirs torch.optim.AdamW): to 3e-7, our step sizes' 0-d fp32 scalars. As
    shipped, theirs differs by its bf16 iteration."""
    import optim.muon
    import optim.newton_schulz

    shipped = float64_steps(THEIRS)
    monkeypatch.setattr(optim.newton_schulz, "ns5_dtype", lambda device: torch.float64)
    ours = float64_steps(OURS)
    assert 1e-4 < largest_relative_difference(shipped["matrices"], ours["matrices"]) < 3e-2
    monkeypatch.setattr(torch.Tensor, "bfloat16", lambda self: self.double())  # (torch's iteration, in float64)
    theirs = float64_steps(THEIRS)
    assert largest_relative_difference(theirs["matrices"], ours["matrices"]) < 3e-8  # (measured 1.1e-8)
    assert largest_relative_difference(theirs["rest"], ours["rest"]) < 3e-7  # (measured 1.4e-7)
    monkeypatch.setattr(optim.muon, "NS5_EPS", 1e-300)  # the eps taken out of both iterations
    theirs, ours = float64_steps([*THEIRS, "--eps=1e-300"]), float64_steps(OURS)
    assert largest_relative_difference(theirs["matrices"], ours["matrices"]) < 1e-13  # (measured 1e-15)


def test_an_external_element_wise_optimizer_equals_the_registrys():
    """torch.optim.AdamW through the import path, on every parameter (the official decay groups), is our AdamW
    (torch's own, fused)."""
    ours = float64_steps(["--optimizer=adamw", "--decay_embeddings=False", "--learning_rate=1e-3"])
    theirs = float64_steps(["--optimizer=torch.optim:AdamW", "--learning_rate=1e-3", "--betas=(0.9, 0.95)",
                            "--weight_decay=0.1"])
    for part in ours:
        assert largest_relative_difference(theirs[part], ours[part]) < 1e-12


class NotAnOptimizer:
    def __init__(self, params, lr=1e-3):
        pass


class SeedTaking(torch.optim.SGD):
    def __init__(self, params, lr=1e-3, seed=0):
        super().__init__(params, lr=lr)


@pytest.mark.quick
def test_what_does_not_follow_the_contract_is_named():
    for path, message in (("torch.optim:Muonn", "torch.optim has no 'Muonn'"),
                          ("no_such_package.optim:X", "cannot import no_such_package.optim"),
                          ("torch.optim", "a registry name.*package.module:Name"),
                          ("test_optim_external:NotAnOptimizer", "neither a torch.optim.Optimizer subclass"),
                          ("test_optim_external:SeedTaking", "keyword argument 'seed' has the name of a setting")):
        with pytest.raises(ConfigError, match=message):
            load_config([*TINY, f"--optimizer={path}"])
    with pytest.raises(ConfigError, match="'momentum' must be float"):
        load_config([*TINY, "--optimizer=torch.optim:Muon", "--momentum=high"])
    with pytest.raises(ConfigError, match="external_params"):
        load_config([*TINY, "--optimizer=torch.optim:Muon", "--external_params=embeddings"])
    assert "torch.optim:Muon" not in list(OPTIMIZERS)  # (resolved when named, never listed with the registry's)


def test_an_external_run_resumes_bit_exact(tiny_dataset, tmp_path):
    """torch.optim.Muon (matrices) through train.py: halves, the second a resume from the run folder alone (its
    config.json read back: the tuple ns_coefficients a list there), land where the straight run does."""
    straight, halves = str(tmp_path / "straight"), str(tmp_path / "halves")
    common = dict(lr_decay_iters=8, eval_interval=4, optimizer="torch.optim:Muon", external_params="matrices",
                  learning_rate=0.02)
    run_train(tiny_run_args(tiny_dataset, straight, max_iters=8, **common))
    run_train(tiny_run_args(tiny_dataset, halves, max_iters=4, **common))
    run_train([f"--out_dir={halves}", "--init_from=resume", "--max_iters=8"])
    a, b = load_weights(straight), load_weights(halves)
    assert all(torch.equal(a[k], b[k]) for k in a)


def two_rank_scenarios(tiny_dataset: str, folder) -> list[tuple]:
    """For conftest.two_ranks: an external element-wise optimizer (torch.optim.Adam) under FSDP2 on two ranks."""
    args = tiny_run_args(tiny_dataset, str(folder / "external_fsdp"), micro_batch_size=4, max_iters=6,
                         eval_interval=3, data_parallel="fsdp", optimizer="torch.optim:Adam")
    return [("external_fsdp", "ranks:train", dict(args=args))]


def test_an_external_run_on_two_fsdp_ranks_equals_one_process(tiny_dataset, tmp_path, two_ranks, two_ranks_folder):
    single = str(tmp_path / "single")
    run_train(tiny_run_args(tiny_dataset, single, micro_batch_size=8, max_iters=6, eval_interval=3,
                            optimizer="torch.optim:Adam"))
    assert scenario_result(two_ranks, "external_fsdp")["status"] == 0
    for kind, key in (("train", "loss"), ("val", "val_loss")):
        a, b = read_metrics(single, kind), read_metrics(str(two_ranks_folder / "external_fsdp"), kind)
        assert [r["step"] for r in a] == [r["step"] for r in b] and len(a) >= 2
        assert [r[key] for r in b] == pytest.approx([r[key] for r in a], rel=1e-4)
