"""
MARS-M (Liu, Yuan and Gu, 2025, arXiv 2510.21800): MARS's variance reduction
(optim/mars.py) on the matrix optimizer Moonlight (optim/moonlight.py).

A drop-in replacement for the official implementation (AGI-Arena/MARS, MARS_M/):
the same arguments, defaults and update arithmetic. For a matrix p of shape (A, B)
at its t-th update, with beta = momentum:

  efficient=False, the official optimizers/mars_m.py (is_approx selects the form):
    c = g + gamma * beta/(1-beta) * (g - g_prev);  c = c / ||c||_2 if ||c||_2 > 1 (clip_c)
    m = beta m + (1-beta) c
  efficient=True, the official optimizers/mars_m_efficient.py:
    b = beta b + (1-gamma)(1-beta)/beta * g;  m = gamma g + beta b
  then, as Moonlight (no Nesterov):
    p = p * (1 - lr * wd) - lr * 0.2 * sqrt(max(A, B)) * NS5(m)
  other parameters: Moonlight's AdamW, with the same lr and wd, adamw_betas, adamw_eps.

g_prev is the previous step's gradient (MARS-M-approx, is_approx=True) or the
gradient at the previous weights on the current batch (MARS-M exact,
is_approx=False), which the optimizer gets as MARS-exact does: it is a SecondGradient
(optim/contract.py) and the training loop, before step t, computes the
(clipped) gradient at x_t on the batch of step t+1 and calls
stash_grad_for_next_step(); step t uses the gradient stashed before step t-1 (zero at
the first step). This is the official train_mars_m.py's update_previous_grad() /
update_last_grad() protocol, in optim/mars.py's code.

The efficient form is MARS-M-approx without the clip, in one buffer instead of two
(momentum and g_prev): from m_t = gamma g_t + beta b_t it follows that
m_t = beta m_{t-1} + (1-beta) g_t + gamma beta (g_t - g_{t-1}), the approx m unclipped.
So efficient=True takes is_approx=True and clip_c=False (clip_c=None: clip unless
efficient), and follows MARSM(is_approx=True, clip_c=False) up to rounding.

params and param groups are as for Moonlight and Muon (use_muon=True/False); the
official training script puts every 2-D parameter on the MARS-M rule except the
embeddings and the lm_head (wte, wpe, lm_head, embed_tokens), which go to AdamW with
the 1-D parameters.

Where we deliberately follow the official code:
  - c is clipped to norm 1 by default: the official mars_m.py clips whatever its
    clip_c says (default False, and train_mars_m.py passes clip_c=False), so its
    runs clipped. Here clip_c is honoured and, left None, clips (except efficient);
  - NS5 of m itself, no Nesterov; gamma is constant; the AdamW side shares the
    group's lr (so the schedule) and decays with wd, eps added before the bias
    corrections; see optim/moonlight.py for the step and its differences in NS5.
Where we fix its defects:
  - clip_c is honoured (the official flag does nothing);
  - g_prev of MARS-M-approx is the previous gradient tensor kept by reference, as
    the official code keeps it, but never left an alias of a live p.grad: with
    zero_grad(set_to_none=False) the official g_prev is zeroed with p.grad, g - g_prev
    is 0 and MARS-M silently becomes clipped Moonlight without Nesterov. Here
    zero_grad(set_to_none=False) first copies the kept gradients (optim/mars.py);
  - MARS-M exact keeps the stashed gradient by reference where the official code
    copies every matrix gradient twice per step (into previous_grad, then last_grad),
    and g_prev follows step() by itself (the official needs update_last_grad() after
    every step, or g_prev goes stale);
  - matrices are 2-D (the official mars_m.py would treat a 3-D+ one by its first two
    dimensions for the scale) and momentum is checked to lie in (0, 1) (the efficient
    form divides by it);
  - no host sync (the norm clip is arithmetic) and no per-parameter Python math;
    NS5 is shared out across ranks (optim/moonlight.py).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import torch
import torch.nn as nn

from errors import ConfigError
from optim.contract import Hyperparameters, Loop, beta, setting
from optim.mars import KeptGradients
from optim.moonlight import Moonlight, official_groups
from optim.newton_schulz import ns_coefficients_setting
from optim.rules import mars_momentum_, sharded_clip_scales


@dataclass
class MARSMHyperparameters(Hyperparameters):
    weight_decay: float = setting(0.1, 0.0)
    beta1: float = setting(0.9, 0.0, 1.0, low_open=True, high_open=True)  # the momentum, as the official scripts pass it
    beta1_1d: float = beta(0.9)  # the AdamW side's betas
    beta2_1d: float = beta(0.95)
    eps: float = setting(1e-8, 0.0)
    gamma: float = setting(0.025, 0.0)
    is_approx: bool = True
    mars_m_efficient: bool = False  # the memory-efficient form (official mars_m_efficient.py): approx, no clip
    ns_coefficients: str = ns_coefficients_setting()  # NS5's quintic or Polar Express's (optim/newton_schulz.py)

    state_keys = ("is_approx", "mars_m_efficient")

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.mars_m_efficient and not self.is_approx:
            raise ConfigError("mars_m_efficient=True is the approximate MARS-M: it needs is_approx=True")

    def display_name(self) -> str:
        return "MARS-M" + ("-efficient" if self.mars_m_efficient else "-approx" if self.is_approx else "-exact")

    def second_gradient(self) -> bool:
        return not self.is_approx


class MARSM(KeptGradients, Moonlight):
    def __init__(
        self, params: Iterable, lr: float = 1e-3, wd: float = 0.1, momentum: float = 0.95, ns_steps: int = 5,
        adamw_betas: tuple[float, float] = (0.9, 0.95), adamw_eps: float = 1e-8, gamma: float = 0.025,
        clip_c: bool | None = None, is_approx: bool = True, efficient: bool = False, *, compiled: bool = True,
        ns_coefficients: str = "quintic",
    ):
        """The official arguments (params for muon_params + adamw_params), plus
        efficient: the memory-efficient form (mars_m_efficient.py), and
        compiled: run the AdamW rule as a torch.compile'd kernel (the same numbers), and
        ns_coefficients: Newton-Schulz's coefficients, a key of newton_schulz.NS_COEFFICIENTS."""
        if not 0.0 < momentum < 1.0:
            raise ValueError(f"Invalid momentum: {momentum} (MARS-M needs 0 < momentum < 1)")
        if clip_c is None:
            clip_c = not efficient
        if efficient and (clip_c or not is_approx):
            raise ValueError("the efficient MARS-M is MARS-M-approx without clipping: "
                             "it takes is_approx=True and clip_c=False")
        self.gamma, self.clip_c, self.is_approx, self.efficient = gamma, clip_c, is_approx, efficient
        self.needs_grad_on_next_batch = not is_approx  # (SecondGradient)
        super().__init__(params, lr=lr, wd=wd, momentum=momentum, nesterov=False, ns_steps=ns_steps,
                         adamw_betas=adamw_betas, adamw_eps=adamw_eps, compiled=compiled,
                         ns_coefficients=ns_coefficients)

    def add_param_group(self, param_group: dict) -> None:
        if param_group.get("use_muon"):
            param_group.setdefault("gamma", self.gamma)
        super().add_param_group(param_group)

    @staticmethod
    def uses_mars_rule(p: torch.Tensor, group: dict) -> bool:
        """Whether p takes the MARS-M update (else AdamW)."""
        return group["use_muon"]

    @staticmethod
    def correction_coefficient(group: dict) -> float:
        """k in c = g + k (g - g_prev)."""
        return group["gamma"] * group["momentum"] / (1.0 - group["momentum"])

    def _muon_update(self, group: dict, params: list[torch.Tensor]) -> None:
        grads = [p.grad for p in params]
        buffers = [self._momentum_buffer(p) for p in params]
        beta, gamma = group["momentum"], group["gamma"]
        if self.efficient:
            torch._foreach_mul_(buffers, beta)
            torch._foreach_add_(buffers, grads, alpha=(1.0 - gamma) * (1.0 - beta) / beta)
            directions = torch._foreach_mul(grads, gamma)
            torch._foreach_add_(directions, buffers, alpha=beta)
            self._orthogonalized_step(params, directions, group)
            return
        states = [self.state[p] for p in params]
        last_grads = [self._last_grad(p, state) for p, state in zip(params, states)]
        mars_momentum_(grads, last_grads, buffers, beta1=beta, gamma=gamma, clip=self.clip_c,
                       clip_scales=sharded_clip_scales(grads, last_grads, gamma, beta) if self.clip_c else [])
        self._orthogonalized_step(params, buffers, group)
        self._keep_last_grads(params, states)


def build_mars_m(model: nn.Module, hp: MARSMHyperparameters, loop: Loop) -> MARSM:
    """MARS-M as the official train_mars_m.py builds it (momentum=beta1)."""
    return MARSM(official_groups(model), lr=loop.learning_rate, wd=hp.weight_decay, momentum=hp.beta1,
                 adamw_betas=(hp.beta1_1d, hp.beta2_1d), adamw_eps=hp.eps, gamma=hp.gamma,
                 is_approx=hp.is_approx, efficient=hp.mars_m_efficient, compiled=loop.compiled,
                 ns_coefficients=hp.ns_coefficients)
