"""weight_averaging (optim/averaging.py): the model evaluated and saved is an average of the weights the optimizer
visits. For every registry optimizer, the evaluation weights equal the uniform mean of the due steps' weights
(float64 from float32 weights, to float32 rounding), and the training weights come back exactly; an EMA equals its
recursion in float64, and both averages equal epfml/llm-optimizer-benchmark's averagers (restated) in float64 under
the declared mapping of their settings to ours; a train.py run saves the average as its model, resumes bit for bit
where the straight run lands, refuses a resume that changes the averaging, and gives the same numbers under FSDP2 on
two ranks as in one process."""

import os

import pytest
import torch

from checkpoint import load_checkpoint
from conftest import (
    cut_back, random_gradient_step, relative_difference, run_train, scenario_result, step_weights, tiny_run_args,
    without_key_bias,
)
from config import ConfigError
from model import GPT, GPTConfig
from optim import OPTIMIZERS, build_optimizer, load_config
from optim.averaging import AVERAGE

TINY = dict(model="small", n_layer=2, n_head=2, n_embd=32, block_size=16, vocab_size=96)


def averaged_run(name: str, averaging: str, steps: int = 6, dtype: torch.dtype = torch.float32, **settings):
    """A tiny model trained `steps` steps on random gradients with weight averaging (a point every 2 steps from
    step 1): the model, its optimizer, and the weights after each step."""
    cfg = load_config([], base={**dict(TINY, optimizer=name, learning_rate=1e-2, weight_averaging=averaging,
                                       averaging_interval=2, averaging_start=1), **settings})
    torch.manual_seed(0)
    model = GPT(GPTConfig(**cfg.model_args())).to(dtype)
    optimizer = build_optimizer(model, cfg, "cpu")
    generator, visited = torch.Generator().manual_seed(1), []
    for _ in range(steps):
        random_gradient_step(model, optimizer, generator)
        visited.append([p.detach().clone() for p in model.parameters()])
    return model, optimizer, visited


@pytest.mark.parametrize("name", list(OPTIMIZERS))
def test_every_optimizer_evaluates_the_uniform_mean_of_its_weights(name):
    """Points at steps 1, 3 and 5 of 6 (averaging_start 1, interval 2): inside eval_weights the parameters are their
    mean (computed in float64 from the float32 weights: to float32 rounding); train_weights puts back the weights of
    step 6 exactly. Schedule-Free, which evaluates an average of its own, is refused."""
    if name == "schedule-free-adamw":
        with pytest.raises(ConfigError, match="already evaluates weights of its own"):
            averaged_run(name, "uniform", lr_schedule="constant")
        return
    model, optimizer, visited = averaged_run(name, "uniform")
    mean = [sum(visited[step][i].double() for step in (0, 2, 4)) / 3 for i in range(len(visited[0]))]
    optimizer.eval_weights()
    worst = max(((p.detach().double() - m).abs().max() / m.abs().max()).item()
                for p, m in zip(model.parameters(), mean))
    assert worst < 1e-6, worst  # (of each tensor's largest entry)
    optimizer.train_weights()
    assert all(torch.equal(p.detach(), last) for p, last in zip(model.parameters(), visited[-1]))
    assert not all(torch.equal(m, last) for m, last in zip(mean, visited[-1]))  # (an average, not the weights)


def test_an_ema_follows_its_recursion():
    """ema_decay 0.8: the points at steps 1, 3, 5 give average = w1, then 0.8 a + 0.2 w3, then 0.8 a + 0.2 w5."""
    model, optimizer, visited = averaged_run("adamw", "ema", dtype=torch.float64, ema_decay=0.8)
    expected = [0.8 * (0.8 * w1 + 0.2 * w3) + 0.2 * w5 for w1, w3, w5 in zip(visited[0], visited[2], visited[4])]
    optimizer.eval_weights()
    assert max((p.detach() - e).abs().max().item() for p, e in zip(model.parameters(), expected)) < 1e-12
    optimizer.eval_weights()  # (a second call changes nothing: the parameters already hold the average)
    assert max((p.detach() - e).abs().max().item() for p, e in zip(model.parameters(), expected)) < 1e-12


# epfml/llm-optimizer-benchmark's two averagers (src/optim/weight_averaging.py at fdecd5d) restated on a list of
# tensors: step() after each optimizer step, with a count from 0 (their count 0 is our step 1), as their
# src/optim/base.py calls them.


class ExponentialWeightAverager:
    """The weights at count == warmup, then lerp(average, weights, 1 - decay) at every later count the interval
    divides."""

    def __init__(self, weights: list[torch.Tensor], interval: int, decay: float, warmup: int = 0):
        self.average, self.count = [w.clone() for w in weights], 0
        self.interval, self.decay, self.warmup = interval, decay, warmup

    def step(self, weights: list[torch.Tensor]) -> None:
        if self.count == self.warmup:
            self.average = [w.clone() for w in weights]
        elif self.count > self.warmup and self.count % self.interval == 0:
            self.average = [torch.lerp(a, w, 1 - self.decay) for a, w in zip(self.average, weights)]
        self.count += 1


class WeightAverager:
    """lerp(average, weights, 1 / ((count % horizon) // interval + 1)) at every count the interval divides: a mean
    that restarts every horizon."""

    def __init__(self, weights: list[torch.Tensor], interval: int, horizon: int):
        self.average, self.count = [w.clone() for w in weights], 0
        self.interval, self.horizon = interval, horizon

    def step(self, weights: list[torch.Tensor]) -> None:
        if self.count % self.interval == 0:
            rate = 1 / ((self.count % self.horizon) // self.interval + 1)
            self.average = [torch.lerp(a, w, rate) for a, w in zip(self.average, weights)]
        self.count += 1


@pytest.mark.parametrize("averaging", ["ema", "uniform"])
def test_the_averages_are_epfmls(averaging):
    """Ours against epfml's averagers restated, float64, 12 steps with a point every 2: their EMA after a warmup of 4
    steps is ours from step 5 (averaging_start = warmup + 1, warmup a multiple of the interval: theirs counts the
    interval from their count 0, our step 1, ours from averaging_start), and their last window of 6 steps (horizon 6,
    dividing the 12 steps: the final average they evaluate) is our tail average from step 7 (averaging_start =
    steps - horizon + 1)."""
    start = {"ema": 5, "uniform": 7}[averaging]
    model, optimizer, visited = averaged_run("adamw", averaging, steps=12, dtype=torch.float64, ema_decay=0.8,
                                             averaging_start=start)
    theirs = (ExponentialWeightAverager(visited[0], interval=2, decay=0.8, warmup=4) if averaging == "ema"
              else WeightAverager(visited[0], interval=2, horizon=6))
    for weights in visited:
        theirs.step(weights)
    optimizer.eval_weights()
    assert max((p.detach() - a).abs().max().item() for p, a in zip(model.parameters(), theirs.average)) < 1e-12
    assert max((w - a).abs().max().item() for w, a in zip(visited[-1], theirs.average)) > 1e-4  # (an average)


def run_args(tiny_dataset: str, out, max_iters: int, **more) -> list[str]:
    return tiny_run_args(tiny_dataset, str(out), max_iters=max_iters, eval_interval=4, lr_decay_iters=8,
                         weight_averaging="ema", ema_decay=0.5, averaging_interval=1, averaging_start=2, **more)


def test_a_run_saves_the_average_and_resumes_bit_for_bit(tiny_dataset, tmp_path):
    """The checkpoint's model is the average (the training weights are in the optimizer's state), a run stopped at
    step 4 and resumed lands at step 8 where the straight run does, and a resume that changes the averaging is refused
    by name (its state holds the training weights beside an average of the old kind)."""
    run_train(run_args(tiny_dataset, tmp_path / "straight", 8))
    run_train(run_args(tiny_dataset, tmp_path / "halves", 4))
    run_train(run_args(tiny_dataset, tmp_path / "halves", 8, init_from="resume"))
    straight, halves = step_weights(str(tmp_path / "straight"), 8), step_weights(str(tmp_path / "halves"), 8)
    assert all(torch.equal(straight[k], halves[k]) for k in straight)

    ckpt = load_checkpoint(os.path.join(tmp_path / "straight", "ckpt_0000008.pt"))
    training = sorted(s[AVERAGE].double().sum().item() for s in ckpt["optimizer"]["state"].values())
    model = sorted({v.double().sum().item() for v in ckpt["model"].values()})  # (the tied head once)
    assert len(training) == len(model) and training != model

    refused = run_train(tiny_run_args(tiny_dataset, str(tmp_path / "halves"), max_iters=10, eval_interval=4,
                                      lr_decay_iters=8, init_from="resume", weight_averaging="uniform"), check=False)
    assert refused.returncode == 2 and "weight_averaging" in refused.stderr, refused.stderr[-2000:]


def two_rank_scenarios(tiny_dataset: str, folder) -> list[tuple]:
    """For conftest.two_ranks: the FSDP2 half of test_fsdp_on_two_ranks_averages_as_one_process."""
    return [("averaging_fsdp", "ranks:train", dict(args=run_args(tiny_dataset, folder / "averaging_fsdp", 8,
                                                                 micro_batch_size=4, data_parallel="fsdp")))]


def test_fsdp_on_two_ranks_averages_as_one_process(tiny_dataset, tmp_path, two_ranks, two_ranks_folder):
    """The average is per-parameter optimizer state: under FSDP2 each rank keeps its shard's, checkpointed through
    DCP, and the saved model (the average) is the one-process run's; the sharded checkpoint of step 4 resumed in one
    process (DCP resharding the average and the training weights) lands at step 8 there too."""
    run_train(run_args(tiny_dataset, tmp_path / "one", 8, micro_batch_size=4))
    assert scenario_result(two_ranks, "averaging_fsdp")["status"] == 0
    fsdp_run = str(two_ranks_folder / "averaging_fsdp")
    one, fsdp = step_weights(str(tmp_path / "one"), 8), step_weights(fsdp_run, 8)
    assert relative_difference(without_key_bias(fsdp), without_key_bias(one)) < 1e-5
    resumed = cut_back(fsdp_run, 4, str(tmp_path / "resumed"))
    run_train(run_args(tiny_dataset, resumed, 8, micro_batch_size=4, init_from="resume", data_parallel="ddp"))
    assert relative_difference(without_key_bias(step_weights(resumed, 8)), without_key_bias(one)) < 1e-5


def test_bench_memory_counts_the_average():
    """bench.memory's profile of the optimizer's state: an average adds one fp32 word per parameter element of every
    kind, over AdamW's two."""
    from bench.memory import optimizer_profile

    base = dict(TINY, optimizer="adamw")
    plain = optimizer_profile(load_config([], base=base)).state
    averaged = optimizer_profile(load_config([], base=dict(base, weight_averaging="ema"))).state
    assert plain.keys() == averaged.keys()
    assert all(averaged[kind].own - plain[kind].own == pytest.approx(4.0) for kind in plain)
    assert all(plain[kind].own == pytest.approx(8.0) for kind in plain)


def test_a_checkpoint_from_before_the_setting_resumes_only_without_averaging():
    """A checkpoint whose config predates weight_averaging had none: resuming it with an average is refused (its
    state has no training weights beside an average), resuming it without goes on."""
    from checkpoint.file import CheckpointError
    from checkpoint.resume import check_resumable

    config = load_config([], base=dict(TINY, weight_averaging="ema")).to_dict()
    model_args = load_config([], base=TINY).model_args()
    old = {"model_args": model_args, "data_fingerprint": [],
           "config": {k: v for k, v in config.items() if k != "weight_averaging"}}
    with pytest.raises(CheckpointError, match="weight_averaging"):
        check_resumable(old, "old/ckpt.pt", config, model_args, [], ())
    assert check_resumable(old, "old/ckpt.pt", config | {"weight_averaging": ""}, model_args, [], ()) == {}
