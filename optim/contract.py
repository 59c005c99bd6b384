"""
The optimizer contract: what an optimizer declares, and what the training loop may ask of it.

Each optimizer module declares
  - its hyperparameters: a dataclass subclassing Hyperparameters whose fields are the config keys it
    reads (beyond the loop's learning_rate and compile), each with its type, default and allowed
    range (`setting(...)`), checked when a config is loaded;
  - its builder: build(model, hyperparameters, Loop) -> the optimizer, its param groups from the
    routing table (optim/routing.py).
The optimizer class declares what the loop may ask of it by inheriting these capabilities; the loop
checks them with isinstance, never by looking for attributes:
  - SecondGradient: before step t, the (clipped) gradient at the current weights on the batch of
    step t+1, given with stash_grad_for_next_step() (MARS-exact, MARS-M-exact);
  - VarianceReduction: variance_reduction_stats() of the gradients a step is about to use;
  - HessianEstimate: every hessian_interval steps, after the step, the gradient on labels sampled from
    the model itself, for update_hessian() (Sophia);
  - EvaluationWeights: the weights to evaluate and save differ from those gradients are taken at
    (Schedule-Free): eval_weights() swaps to them, train_weights() back;
  - GroupState: it keeps run state (step counts, averages) in its param groups, which a resume
    restores from the checkpoint (the groups' hyperparameters come from the config);
  - MatrixProducts: the matrix products its step performs, batched as it batches them, from which the
    benchmarks count its FLOPs and time its floor (bench/optimizer_step.py, bench/gpu.py).
Every param group carries "base_lr"; the schedule sets lr = base_lr * its multiplier.
"""

from __future__ import annotations

import abc
import dataclasses
import math
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, ClassVar, Iterator, NamedTuple

import torch

from config import check_types
from errors import ConfigError


def setting(default: Any, low: float | None = None, high: float | None = None, *, low_open: bool = False,
            high_open: bool = False, choices: tuple[str, ...] = ()) -> Any:
    """A hyperparameter with its allowed range [low, high] (open at an end with low_open/high_open), or
    its choices."""
    return field(default=default, metadata=dict(low=low, high=high, low_open=low_open, high_open=high_open,
                                                choices=choices))


def positive(default: float) -> Any:
    return setting(default, 0.0, low_open=True)


def beta(default: float) -> Any:
    """A decay rate in [0, 1)."""
    return setting(default, 0.0, 1.0, high_open=True)


@dataclass
class Hyperparameters:
    """The settings an optimizer reads from the config, besides the loop's learning_rate and compile."""

    state_keys: ClassVar[tuple[str, ...]] = ()  # the settings that shape the optimizer state: refused on resume
    # How mup scales the hidden matrices' learning rate with the width multiplier m (optim.build_optimizer):
    # "adam": lr / m, Tensor Programs V's rule for Adam, for every update whose element size is width-free (Adam's,
    # and the orthogonalised updates rescaled to AdamW's RMS: Moonlight, MARS-M, AdaMuon); "spectral": lr unchanged,
    # for an update whose spectral norm already scales as sqrt(fan_out / fan_in) (Muon's, Dion's, Scion's) or
    # that is relative to the weight's norm (the hyperball optimizers): Yang, Simon & Bernstein (arXiv 2310.17813).
    mup_hidden_rule: ClassVar[str] = "adam"

    def __post_init__(self) -> None:
        check_types(self)
        for f in dataclasses.fields(self):
            value, meta = getattr(self, f.name), f.metadata
            if meta.get("choices") and value not in meta["choices"]:
                raise ConfigError(f"config key '{f.name}' is {value!r}; choose one of {', '.join(meta['choices'])}")
            low, high = meta.get("low"), meta.get("high")
            too_low = low is not None and not (value > low if meta.get("low_open") else value >= low)
            too_high = high is not None and not (value < high if meta.get("high_open") else value <= high)
            if too_low or too_high or (isinstance(value, float) and not math.isfinite(value)):
                bounds = (f"{'(' if meta.get('low_open') else '['}{-math.inf if low is None else low:g}, "
                          f"{math.inf if high is None else high:g}{')' if meta.get('high_open') else ']'}")
                raise ConfigError(f"config key '{f.name}' must be in {bounds}, got {value}")

    def display_name(self) -> str:
        """How reports name a run of this optimizer."""
        raise NotImplementedError

    def check_loop(self, cfg: Any) -> None:
        """Refuse loop settings (a TrainConfig) this optimizer cannot run with, naming the fix."""

    def second_gradient(self) -> bool:
        """Whether each step also takes the gradient at the current weights on the next batch."""
        return False

    def gradients_per_step(self) -> float:
        """Forward-backward passes over the batch per optimizer step (on average: Sophia's Hessian estimate
        takes one every few steps)."""
        return 2 if self.second_gradient() else 1

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class Loop:
    """What a builder takes from the training loop's settings."""

    learning_rate: float  # the main group's peak lr (the schedule's)
    compiled: bool  # run element-wise rules as torch.compile'd kernels
    device_type: str
    total_iters: int  # the run's length in optimizer steps
    tokens_per_step: int  # the global batch, in tokens


class SecondGradient(abc.ABC):
    """An optimizer whose step t uses the gradient at x_t on the batch of step t+1 (taken before step t)."""

    needs_grad_on_next_batch: bool

    @abc.abstractmethod
    def stash_grad_for_next_step(self) -> None:
        """Keep p.grad (the clipped gradient at x_t on the next batch) for step t+1; call it before step t."""


class VarianceReduction(abc.ABC):
    @abc.abstractmethod
    def variance_reduction_stats(self) -> dict[str, torch.Tensor]:
        """optim.diagnostics.variance_reduction_stats of the gradients the step is about to use."""


class HessianEstimate(abc.ABC):
    """An optimizer that keeps a Hessian estimate (Sophia's Gauss-Newton-Bartlett): after every step t with
    t + 1 a multiple of hessian_interval, the loop leaves in p.grad the (clipped) gradient of the loss on labels
    drawn from the model's own next-token distribution, over that step's global batch, and calls
    update_hessian()."""

    hessian_interval: int
    clip_hessian_gradient: bool  # clip that gradient at grad_clip, as the step's own

    @abc.abstractmethod
    def update_hessian(self) -> None:
        """Fold p.grad (the sampled labels' gradient) into the Hessian estimate."""


class EvaluationWeights(abc.ABC):
    @abc.abstractmethod
    def eval_weights(self) -> None:
        """Put the weights to evaluate and save in the parameters."""

    @abc.abstractmethod
    def train_weights(self) -> None:
        """Put back the weights gradients are taken at."""


class GroupState:
    """An optimizer that keeps run state in its param groups, under these keys."""

    __slots__ = ()  # (no instance layout of its own: optim/averaging.py mixes it into a built optimizer's class)

    group_state_keys: ClassVar[tuple[str, ...]]


class Product(NamedTuple):
    """A batched matrix product a step performs: batch x (rows x inner) @ (inner x cols) in dtype, per_step times
    a step on average (NS5's five iterations: 5; SOAP's refresh every 10 steps: 0.1)."""

    batch: int
    rows: int
    inner: int
    cols: int
    dtype: torch.dtype
    per_step: float = 1.0

    def flops(self) -> float:
        """Per step, on average."""
        return 2.0 * self.batch * self.rows * self.inner * self.cols * self.per_step


class MatrixProducts(abc.ABC):
    """An optimizer whose step is mostly matrix products (the matrix optimizers)."""

    @abc.abstractmethod
    def products(self) -> list[Product]:
        """The matrix products one step performs over the whole model, on one process, as it batches them (under
        torch.distributed the same work is shared out over owner ranks: bench.optimizer_step counts each rank's)."""


@contextmanager
def evaluation_weights(optimizer: torch.optim.Optimizer) -> Iterator[None]:
    """The parameters hold the optimizer's evaluation weights inside (a no-op for most optimizers)."""
    if not isinstance(optimizer, EvaluationWeights):
        yield
        return
    optimizer.eval_weights()
    try:
        yield
    finally:
        optimizer.train_weights()


def needs_second_gradient(optimizer: torch.optim.Optimizer) -> bool:
    return isinstance(optimizer, SecondGradient) and optimizer.needs_grad_on_next_batch


def needs_hessian_estimate(optimizer: torch.optim.Optimizer, step: int) -> bool:
    """Whether the loop takes the Hessian estimate's gradient after step `step` (counted from 0)."""
    return isinstance(optimizer, HessianEstimate) and (step + 1) % optimizer.hessian_interval == 0


Builder = Callable[[torch.nn.Module, Hyperparameters, Loop], torch.optim.Optimizer]
