"""
MARS (Yuan et al., 2024, arXiv 2411.10438): variance reduction for preconditioned
optimizers, in its three instances MARS-AdamW, MARS-Lion and MARS-Shampoo.

A drop-in replacement for the official implementation (AGI-Arena/MARS): the same
constructor, defaults and update arithmetic, so a run follows the official
trajectory up to float rounding. For a parameter at its t-th update:

  2-D parameters (every parameter with optimize_1d):
    c = g + gamma * beta1/(1-beta1) * (g - g_prev);  c = c / ||c||_2 if ||c||_2 > 1
    m = beta1 m + (1-beta1) c
    mars-adamw:   v = beta2 v + (1-beta2) c^2,  u = m / ((sqrt(v)/sqrt(1-beta2^t) + eps) (1-beta1^t))
    mars-lion:    u = sign(m)
    mars-shampoo: u = NS5(m / (1-beta1)) * max(1, rows/cols)^0.5  (1-D parameters: the mars-adamw u)
    p = p - lr * (u + weight_decay * p)
  other parameters: AdamW on the raw gradient with betas_1d, learning rate
    lr * lr_1d / lr_initial (so the schedule scales it too) and weight_decay_1d.

Where we deliberately follow the official code:
  - weight_decay_1d applies to the AdamW-handled parameters whatever their group's
    weight_decay says (a "no decay" group of biases and LayerNorm weights still
    decays with weight_decay_1d);
  - lr_initial is the constructor's lr; parameters are "2-D" when p.ndim == 2;
  - step counts are per parameter; NS5 takes the optimizer's eps;
Where we fix its defects:
  - g_prev of MARS-approx is kept as the previous gradient tensor, never as an
    alias of a live p.grad: with zero_grad(set_to_none=False) the official g_prev
    is zeroed with p.grad, g - g_prev is always 0 and MARS silently becomes clipped
    AdamW. Here optimizer.zero_grad(set_to_none=False) first copies the kept
    gradients, and any other in-place reuse of a kept gradient raises an error;
  - parameters without a gradient are skipped (the official step() raises
    UnboundLocalError when no parameter has one);
  - no host sync (the norm clip is arithmetic) and no per-parameter Python math:
    the element-wise work is the rules of rules.py, compiled into fused kernels with
    no model-sized temporaries (one, in eager mode), where the official code
    allocates about 12 per step; the state holds only what the rule reads, plus
    the per-parameter step count that the official code keeps for every rule (the
    official code also allocates v for MARS-Lion and MARS-Shampoo, and g_prev for
    1-D parameters). MARS-Shampoo's NS5 runs per matrix, as matrix products, and
    under torch.distributed each rank runs only its share of them
    (optim.newton_schulz.newton_schulz5_across_ranks), where the official code
    repeats every one on every rank.

MARS-exact (is_approx=False) takes g_prev as the gradient at the previous weights
on the current batch: a SecondGradient optimizer (optim/contract.py). Before step t
the training loop computes the (clipped) gradient at x_t on the batch of step t+1
and calls stash_grad_for_next_step(); step t still uses the gradient stashed before
step t-1 (zero at the first step).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import torch
import torch.nn as nn

from errors import ConfigError
from optim.adamw import AdamWHyperparameters, SideAdamW
from optim.contract import Loop, MatrixProducts, Product, SecondGradient, VarianceReduction, setting
from optim.diagnostics import variance_reduction_stats
from optim.newton_schulz import (
    muon_scale, newton_schulz5_across_ranks, ns5_dtype, ns5_products, ns_coefficients_setting, ns_iterations,
)
from optim.rules import (
    MARS_ADAMW, MARS_LION, GroupwiseOptimizer, adam_state, adam_step_scalars, adamw_update, decoupled_step_,
    mars_momentum_, scalar_tensor, sharded_clip_scales,
)
from optim.sharding import local
from optim.routing import Route, routing, weight_decay_groups

MARS_TYPES = ("mars-adamw", "mars-lion", "mars-shampoo")
MARS_NAMES = {"mars-adamw": "MARS", "mars-lion": "MARS-Lion", "mars-shampoo": "MARS-Shampoo"}


@dataclass
class MARSHyperparameters(AdamWHyperparameters, SideAdamW):
    mars_type: str = setting("mars-adamw", choices=MARS_TYPES)
    gamma: float = setting(0.025, 0.0)
    is_approx: bool = True
    optimize_1d: bool = False
    amsgrad: bool = False
    ns_coefficients: str = ns_coefficients_setting()  # MARS-Shampoo's Newton-Schulz (optim/newton_schulz.py)

    state_keys = ("mars_type", "is_approx", "optimize_1d", "amsgrad", "decay_embeddings")

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.ns_coefficients != "quintic" and self.mars_type != "mars-shampoo":
            raise ConfigError(f"ns_coefficients={self.ns_coefficients!r} sets MARS-Shampoo's Newton-Schulz: "
                              f"it needs mars_type='mars-shampoo', got {self.mars_type!r}")

    def display_name(self) -> str:
        return f"{MARS_NAMES[self.mars_type]}-{'approx' if self.is_approx else 'exact'}"

    def second_gradient(self) -> bool:
        return not self.is_approx


class KeptGradients(SecondGradient, VarianceReduction):
    """The earlier gradients MARS-type optimizers keep: g_prev (the previous step's gradient, by
    reference, for the approximate forms) and MARS-exact's stash (the gradient at the current weights
    on the next step's batch). For an Optimizer with `is_approx`, `uses_mars_rule(p, group)` and
    `correction_coefficient(group)`; shared by MARS and MARS-M."""

    def before_step(self) -> None:
        """MARS-exact: every step needs the stash (stash_grad_for_next_step) taken before it."""
        if self.is_approx:
            return
        stashed = [
            "stashed_grad" in self.state[p]
            for group in self.param_groups for p in group["params"]
            if p.grad is not None and self.uses_mars_rule(p, group)
        ]
        if stashed and not any(stashed):
            raise RuntimeError(
                "MARS-exact (is_approx=False) needs stash_grad_for_next_step() before every step: "
                "the gradient at the current weights on the next step's batch"
            )

    def _last_grad(self, p: torch.Tensor, state: dict) -> torch.Tensor:
        """g_prev for this step: zero at the first; never storage that p.grad reuses."""
        if "last_grad" not in state:
            state["last_grad"] = torch.zeros_like(p, memory_format=torch.preserve_format)
        for key in ("last_grad", "stashed_grad"):
            if key in state and _same_storage(state[key], p.grad):
                raise RuntimeError(
                    "MARS keeps earlier gradients, but the gradient tensor holding one was reused in place "
                    "(zeroed with set_to_none=False outside optimizer.zero_grad(), or never zeroed). "
                    "Use optimizer.zero_grad(), with either set_to_none value."
                )
        return state["last_grad"]

    def _keep_last_grads(self, params: list[torch.Tensor], states: list[dict]) -> None:
        for p, state in zip(params, states):
            if self.is_approx:
                state["last_grad"] = p.grad  # a reference, not a copy: zero_grad() makes it safe
            elif "stashed_grad" in state:
                state["last_grad"] = state.pop("stashed_grad")
            else:  # no gradient on the stash batch: g_prev is zero
                del state["last_grad"]

    @torch.no_grad()
    def variance_reduction_stats(self) -> dict[str, torch.Tensor]:
        """optim.diagnostics.variance_reduction_stats of the gradients the MARS rule is about to use
        (call it before step(), after clipping)."""
        by_coefficient: dict[float, tuple[list[torch.Tensor], list[torch.Tensor]]] = {}
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None and self.uses_mars_rule(p, group) and "last_grad" in self.state[p]:
                    grads, last_grads = by_coefficient.setdefault(self.correction_coefficient(group), ([], []))
                    grads.append(p.grad)
                    last_grads.append(self.state[p]["last_grad"])
        return variance_reduction_stats(by_coefficient)

    @torch.no_grad()
    def stash_grad_for_next_step(self) -> None:
        """MARS-exact: keep p.grad (the clipped gradient at the current weights x_t on
        the batch of step t+1) as g_prev for step t+1. Call it before step t."""
        if self.is_approx:
            return
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None and self.uses_mars_rule(p, group):
                    self.state[p]["stashed_grad"] = p.grad

    def zero_grad(self, set_to_none: bool = True) -> None:
        if not set_to_none:
            # The gradients we keep are p.grad tensors, which are about to be zeroed in place.
            for group in self.param_groups:
                for p in group["params"]:
                    state = self.state.get(p, {})
                    for key in ("last_grad", "stashed_grad"):
                        if p.grad is not None and key in state and _same_storage(state[key], p.grad):
                            state[key] = p.grad.clone()
        super().zero_grad(set_to_none)


class MARS(MatrixProducts, KeptGradients, GroupwiseOptimizer):
    def __init__(
        self, params: Iterable, lr: float = 3e-3, betas: tuple[float, float] = (0.95, 0.99), eps: float = 1e-8,
        weight_decay: float = 0.0, amsgrad: bool = False, gamma: float = 0.025, is_approx: bool = True,
        mars_type: str = "mars-adamw", optimize_1d: bool = False, lr_1d: float = 3e-3,
        betas_1d: tuple[float, float] = (0.9, 0.95), weight_decay_1d: float = 0.1, *, compiled: bool = True,
        ns_coefficients: str = "quintic",
    ):
        """The official arguments, plus compiled: run the element-wise rules as
        torch.compile'd kernels (the same numbers, much faster; falls back to eager
        mode with a warning where compiling fails), and ns_coefficients: MARS-Shampoo's
        Newton-Schulz coefficients, a key of newton_schulz.NS_COEFFICIENTS."""
        ns_iterations(ns_coefficients, 5)  # (refuses a bad choice now)
        if not lr > 0.0:
            raise ValueError(f"Invalid learning rate: {lr} (the 1-D learning rate is lr * lr_1d / lr)")
        if not eps >= 0.0:
            raise ValueError(f"Invalid epsilon value: {eps}")
        for beta in (*betas, *betas_1d):
            if not 0.0 <= beta < 1.0:
                raise ValueError(f"Invalid beta parameter: {beta}")
        if mars_type not in MARS_TYPES:
            raise ValueError(f"MARS type {mars_type!r} not supported; choose one of {', '.join(MARS_TYPES)}")
        defaults = dict(
            lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, amsgrad=amsgrad, mars_type=mars_type,
            gamma=gamma, optimize_1d=optimize_1d, betas_1d=betas_1d, weight_decay_1d=weight_decay_1d,
            ns_coefficients=ns_coefficients,
        )
        super().__init__(params, defaults)
        self.is_approx = is_approx
        self.lr_1d_factor = lr_1d / lr
        self.compiled = compiled
        self.needs_grad_on_next_batch = not is_approx  # (SecondGradient)

    def products(self) -> list[Product]:
        """MARS-Shampoo's NS5 of its matrices, batched by shape within each group; none for the element-wise types."""
        return [product for group in self.param_groups
                for matrices in [[p for p in group["params"] if _rule(p, group["mars_type"]) == "mars-shampoo"]]
                if matrices for product in ns5_products([tuple(p.shape) for p in matrices], 5,
                                                        ns5_dtype(matrices[0].device))]

    @staticmethod
    def uses_mars_rule(p: torch.Tensor, group: dict) -> bool:
        """Whether p takes the MARS update (else plain AdamW)."""
        return p.ndim == 2 or group["optimize_1d"]

    @staticmethod
    def correction_coefficient(group: dict) -> float:
        """k in c = g + k (g - g_prev)."""
        return group["gamma"] * group["betas"][0] / (1.0 - group["betas"][0])

    def update_group(self, group: dict, params: list[torch.Tensor]) -> None:
        mars_params = [p for p in params if self.uses_mars_rule(p, group)]
        adamw_params = [p for p in params if not self.uses_mars_rule(p, group)]
        if mars_params:
            self._mars_update(group, mars_params)
        if adamw_params:
            adamw_update(
                self.state, adamw_params, group["lr"] * self.lr_1d_factor, group["betas_1d"], group["eps"],
                group["weight_decay_1d"], group["amsgrad"], self.compiled,
            )

    def _mars_update(self, group: dict, params: list[torch.Tensor]) -> None:
        beta1, beta2 = group["betas"]
        lr, wd, eps, gamma, amsgrad = group["lr"], group["weight_decay"], group["eps"], group["gamma"], group["amsgrad"]
        for rule in MARS_TYPES:
            subset = [p for p in params if _rule(p, group["mars_type"]) == rule]
            if not subset:
                continue
            states = [adam_state(self.state[p], p, second_moment=rule == "mars-adamw", amsgrad=amsgrad) for p in subset]
            grads = [p.grad for p in subset]
            last_grads = [self._last_grad(p, state) for p, state in zip(subset, states)]
            exp_avgs, steps = [s["exp_avg"] for s in states], [s["step"] for s in states]
            lr_tensor = scalar_tensor(lr, subset[0])
            clip_scales = sharded_clip_scales(grads, last_grads, gamma, beta1)  # [] unless sharded
            if rule == "mars-adamw":
                step_sizes, inv_bias_correction2_sqrts = adam_step_scalars(steps, lr_tensor, beta1, beta2)
                MARS_ADAMW(
                    [subset, grads, last_grads, exp_avgs, [s["exp_avg_sq"] for s in states],
                     [s["max_exp_avg_sq"] for s in states] if amsgrad else [], step_sizes, inv_bias_correction2_sqrts,
                     clip_scales],
                    lr_tensor, self.compiled, beta1=beta1, beta2=beta2, eps=eps, weight_decay=wd, gamma=gamma,
                )
            elif rule == "mars-lion":
                torch._foreach_add_(steps, 1.0)
                MARS_LION([subset, grads, last_grads, exp_avgs, clip_scales], lr_tensor, self.compiled,
                          beta1=beta1, weight_decay=wd, gamma=gamma)
            else:  # NS5's matrix products dominate: no compiled kernel needed for the momentum
                torch._foreach_add_(steps, 1.0)
                mars_momentum_(grads, last_grads, exp_avgs, beta1=beta1, gamma=gamma, clip_scales=clip_scales)
                updates = newton_schulz5_across_ranks(torch._foreach_div(exp_avgs, 1.0 - beta1), 5, eps,
                                                      coefficients=group["ns_coefficients"])
                torch._foreach_mul_(updates, [muon_scale(*p.shape) for p in subset])
                decoupled_step_(subset, updates, lr, wd)
            self._keep_last_grads(subset, states)

def _rule(p: torch.Tensor, mars_type: str) -> str:
    """The update p takes: 1-D parameters of MARS-Shampoo (with optimize_1d) take MARS-AdamW's."""
    return "mars-adamw" if mars_type == "mars-shampoo" and p.ndim != 2 else mars_type


def _same_storage(a: torch.Tensor, b: torch.Tensor) -> bool:
    a, b = local([a, b])
    return a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()


def build_mars(model: nn.Module, hp: MARSHyperparameters, loop: Loop) -> MARS:
    """MARS in the official runs' two param groups, decay and no decay (see decay_embeddings); within
    them MARS itself sends the 1-D parameters to AdamW at lr_1d (scaled by the schedule) with
    weight_decay_1d unless optimize_1d (see the module docstring), as the routing table says."""
    table = routing(Route("mars", True), Route("mars", hp.decay_embeddings),
                    Route("mars", False) if hp.optimize_1d else Route("adamw", False, lr="lr_1d"))
    groups = weight_decay_groups(model, table, hp.weight_decay, key=lambda route: route.decay)
    return MARS(
        groups, lr=loop.learning_rate, betas=(hp.beta1, hp.beta2), eps=hp.eps, weight_decay=hp.weight_decay,
        amsgrad=hp.amsgrad, gamma=hp.gamma, is_approx=hp.is_approx, mars_type=hp.mars_type,
        optimize_1d=hp.optimize_1d, lr_1d=hp.lr_1d, betas_1d=(hp.beta1_1d, hp.beta2_1d),
        weight_decay_1d=hp.weight_decay_1d, compiled=loop.compiled, ns_coefficients=hp.ns_coefficients,
    )
