"""
The element-wise update rules of MARS, Muon and AdamW, each written once as a
function on lists of tensors (torch._foreach_* ops, updated in place).

A RuleKernel runs a rule in one of two ways that give the same numbers:
  - eagerly, on whole lists: multi-tensor kernels, a few passes over memory and
    at most one model-sized temporary;
  - torch.compile'd: inductor fuses the whole rule, per tensor, into one reduction
    pass (for MARS's per-tensor norm) and one element-wise pass that reads every
    input once and writes every output once, with no temporaries (for MARS-AdamW
    10 words of memory traffic per parameter against fused AdamW's 7). On CPU it is
    called once per tensor with dynamic shapes, so one graph serves every tensor
    (compiling the 148 tensors of GPT-2 small as one graph took minutes on 2 cores).
Values that change every step (the learning rate, the bias corrections) are 0-d
tensors, so the compiled graph never recompiles for them; hyperparameters are
floats baked into it. Nothing here reads a tensor's value on the host.
"""

import functools
import warnings
from collections.abc import Callable

import torch
from torch.optim import Optimizer

from optim.sharding import local, shard_group, squared_norms

Tensors = list[torch.Tensor]


# ----------------------------------------------------------------------------- building blocks


class ListwiseOptimizer(Optimizer):
    """An optimizer whose step updates the parameters that have a gradient, as lists: update_groups gets every
    param group that has any, with them (all at once, for a statistic over the whole model: Prodigy's step
    size, Adam-mini's blocks)."""

    @torch.no_grad()
    def step(self, closure: Callable[[], float] | None = None) -> float | None:
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        groups = [(group, [p for p in group["params"] if p.grad is not None]) for group in self.param_groups]
        groups = [(group, params) for group, params in groups if params]
        if groups:
            self.update_groups(groups)
        return loss

    def update_groups(self, groups: list[tuple[dict, list[torch.Tensor]]]) -> None:
        raise NotImplementedError


class GroupwiseOptimizer(ListwiseOptimizer):
    """A ListwiseOptimizer that updates group by group (update_group), after an optional check (before_step)."""

    def update_groups(self, groups: list[tuple[dict, list[torch.Tensor]]]) -> None:
        self.before_step()
        for group, params in groups:
            self.update_group(group, params)

    def before_step(self) -> None:
        pass

    def update_group(self, group: dict, params: list[torch.Tensor]) -> None:
        raise NotImplementedError


def per_tensor_norms(tensors: Tensors) -> Tensors:
    """Each tensor's 2-norm, accumulated in float64 (as optim/sharding.py's over blocks: the two agree)."""
    # Compiled, a plain reduction lets inductor fuse the norm with the ops that
    # produce its input (torch._foreach_norm is not lowered, it would materialise it).
    if torch.compiler.is_compiling():
        return [torch.linalg.vector_norm(t, dtype=torch.float64) for t in tensors]
    return list(torch._foreach_norm(tensors, 2, dtype=torch.float64))


def corrected_gradients(grads: Tensors, last_grads: Tensors, gamma: float, beta1: float, clip: bool = True,
                        clip_scales: Tensors = ()) -> Tensors:
    """MARS's c = g + gamma * beta1/(1-beta1) * (g - g_prev), divided per tensor by max(1, ||c||_2)
    unless clip is False; clip_scales, when given, are those divisors' reciprocals (sharded_clip_scales)."""
    # lerp with weight 1 + k evaluates g - (g - g_prev) * (-k) in one pass.
    c = torch._foreach_lerp(last_grads, grads, 1.0 + gamma * beta1 / (1.0 - beta1))
    if not clip:
        return c
    if clip_scales:
        torch._foreach_mul_(c, clip_scales)
        return c
    # "if ||c|| > 1: c = c / ||c||" as arithmetic, with no host sync; multiplying by
    # the scalar's reciprocal keeps divisions out of the element-wise loop (a float64 scalar multiplies as
    # its float32 rounding, like sharded_clip_scales').
    scales = per_tensor_norms(c)
    torch._foreach_clamp_min_(scales, 1.0)
    torch._foreach_reciprocal_(scales)
    torch._foreach_mul_(c, scales)
    return c


def sharded_clip_scales(grads: Tensors, last_grads: Tensors, gamma: float, beta1: float) -> Tensors:
    """For sharded gradients (optim/sharding.py), 1 / max(1, ||c||_2) of each whole tensor's c, which the
    rules then take as clip_scales (one all-reduce for all tensors); [] for unsharded ones, whose rules
    compute them inside."""
    group = shard_group(grads)
    if group is None:
        return []
    c = corrected_gradients(local(grads), local(last_grads), gamma, beta1, clip=False)  # local blocks: 1/world of a model
    scales = squared_norms(c, group).sqrt_().clamp_min_(1.0).reciprocal_().float()
    return list(scales.unbind())


def adam_step_scalars(steps: Tensors, lr: torch.Tensor, beta1: float, beta2: float) -> tuple[Tensors, Tensors]:
    """t <- t + 1, and per tensor the step size -lr / (1-beta1^t) and 1 / sqrt(1-beta2^t).

    These are 0-d tensors computed outside the compiled rules: inside, inductor would
    recompute the powers for every vector of elements."""
    torch._foreach_add_(steps, 1.0)
    step_sizes = torch._foreach_pow(beta1, steps)
    torch._foreach_sub_(step_sizes, 1.0)  # -(1 - beta1^t)
    torch._foreach_reciprocal_(step_sizes)
    torch._foreach_mul_(step_sizes, lr)
    inv_bias_correction2_sqrts = torch._foreach_pow(beta2, steps)
    torch._foreach_neg_(inv_bias_correction2_sqrts)
    torch._foreach_add_(inv_bias_correction2_sqrts, 1.0)
    torch._foreach_rsqrt_(inv_bias_correction2_sqrts)
    return step_sizes, inv_bias_correction2_sqrts


def adam_moments_(exp_avgs: Tensors, exp_avg_sqs: Tensors, grads: Tensors, beta1: float, beta2: float) -> None:
    """m <- beta1 m + (1-beta1) g;  v <- beta2 v + (1-beta2) g^2."""
    torch._foreach_lerp_(exp_avgs, grads, 1.0 - beta1)
    torch._foreach_mul_(exp_avg_sqs, beta2)
    torch._foreach_addcmul_(exp_avg_sqs, grads, grads, value=1.0 - beta2)


def adam_step_(
    params: Tensors, exp_avgs: Tensors, exp_avg_sqs: Tensors, max_exp_avg_sqs: Tensors, step_sizes: Tensors,
    inv_bias_correction2_sqrts: Tensors, lr: torch.Tensor, eps: float, weight_decay: float,
) -> None:
    """p <- p - lr * (m / ((sqrt(v) / sqrt(1-beta2^t) + eps) * (1-beta1^t)) + weight_decay * p),
    the official MARS arithmetic (and torch's AdamW); with amsgrad, v is its running maximum."""
    if max_exp_avg_sqs:
        torch._foreach_maximum_(max_exp_avg_sqs, exp_avg_sqs)
        exp_avg_sqs = max_exp_avg_sqs
    torch._foreach_mul_(params, 1.0 - lr * weight_decay)
    update = torch._foreach_sqrt(exp_avg_sqs)  # eagerly, the step's one temporary
    torch._foreach_mul_(update, inv_bias_correction2_sqrts)
    torch._foreach_add_(update, eps)
    torch._foreach_reciprocal_(update)
    torch._foreach_mul_(update, exp_avgs)
    torch._foreach_mul_(update, step_sizes)
    torch._foreach_add_(params, update)


def decoupled_step_(params: Tensors, updates: Tensors, lr: torch.Tensor | float, weight_decay: float,
                    cautious: bool = False) -> None:
    """p <- p - lr * (update + weight_decay * p); overwrites updates. cautious: the decay only where the update and
    the weight agree in sign, update * p >= 0 (cautious weight decay, as karpathy/nanochat's Muon applies it)."""
    if cautious and weight_decay:
        agree = torch._foreach_mul(updates, params)  # (sign + 1, at most 1: 1 where update * p >= 0, else 0)
        torch._foreach_sign_(agree)
        torch._foreach_add_(agree, 1.0)
        torch._foreach_clamp_max_(agree, 1.0)
        torch._foreach_mul_(agree, params)
        torch._foreach_mul_(agree, lr * weight_decay)
        torch._foreach_sub_(params, agree)
    else:
        torch._foreach_mul_(params, 1.0 - lr * weight_decay)
    torch._foreach_mul_(updates, lr)
    torch._foreach_sub_(params, updates)


# ----------------------------------------------------------------------------- the rules


def adamw_(
    params: Tensors, grads: Tensors, exp_avgs: Tensors, exp_avg_sqs: Tensors, max_exp_avg_sqs: Tensors,
    step_sizes: Tensors, inv_bias_correction2_sqrts: Tensors, lr: torch.Tensor, *,
    beta1: float, beta2: float, eps: float, weight_decay: float,
) -> None:
    """AdamW on the raw gradient: MARS's rule for the parameters it leaves to AdamW, and Muon's companion."""
    adam_moments_(exp_avgs, exp_avg_sqs, grads, beta1, beta2)
    adam_step_(params, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, step_sizes, inv_bias_correction2_sqrts, lr, eps,
               weight_decay)


def uncorrected_eps_adamw_(
    params: Tensors, grads: Tensors, exp_avgs: Tensors, exp_avg_sqs: Tensors, step_sizes: Tensors,
    decay_factors: Tensors, lr: torch.Tensor, *, beta1: float, beta2: float, eps: float,
) -> None:
    """AdamW as the official MARS and MARS-M repositories write their own, eps added to sqrt(v)
    before the bias corrections (adamw_ adds it after):
        p <- p * decay_factor + step_size * m / (sqrt(v) + eps),  step_size = -lr sqrt(1-beta2^t) / (1-beta1^t)
    (see adamw_update for the decay factors)."""
    adam_moments_(exp_avgs, exp_avg_sqs, grads, beta1, beta2)
    torch._foreach_mul_(params, decay_factors)
    update = torch._foreach_sqrt(exp_avg_sqs)  # eagerly, the step's one temporary
    torch._foreach_add_(update, eps)
    torch._foreach_reciprocal_(update)
    torch._foreach_mul_(update, exp_avgs)
    torch._foreach_mul_(update, step_sizes)
    torch._foreach_add_(params, update)


def mars_adamw_(
    params: Tensors, grads: Tensors, last_grads: Tensors, exp_avgs: Tensors, exp_avg_sqs: Tensors,
    max_exp_avg_sqs: Tensors, step_sizes: Tensors, inv_bias_correction2_sqrts: Tensors, clip_scales: Tensors,
    lr: torch.Tensor, *, beta1: float, beta2: float, eps: float, weight_decay: float, gamma: float,
) -> None:
    """MARS-AdamW: the AdamW step on the corrected gradient c."""
    c = corrected_gradients(grads, last_grads, gamma, beta1, clip_scales=clip_scales)
    adam_moments_(exp_avgs, exp_avg_sqs, c, beta1, beta2)
    del c  # eagerly, the step's one temporary takes c's memory
    adam_step_(params, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, step_sizes, inv_bias_correction2_sqrts, lr, eps,
               weight_decay)


def mars_lion_(
    params: Tensors, grads: Tensors, last_grads: Tensors, exp_avgs: Tensors, clip_scales: Tensors,
    lr: torch.Tensor, *, beta1: float, weight_decay: float, gamma: float,
) -> None:
    """MARS-Lion: m <- beta1 m + (1-beta1) c;  p <- p - lr * (sign(m) + weight_decay * p)."""
    mars_momentum_(grads, last_grads, exp_avgs, beta1=beta1, gamma=gamma, clip_scales=clip_scales)
    decoupled_step_(params, torch._foreach_sign(exp_avgs), lr, weight_decay)


def mars_momentum_(grads: Tensors, last_grads: Tensors, exp_avgs: Tensors, *, beta1: float, gamma: float,
                   clip: bool = True, clip_scales: Tensors = ()) -> None:
    """m <- beta1 m + (1-beta1) c: MARS-Lion's first half, all of MARS-Shampoo's before NS5, and
    MARS-M's momentum (which may leave c unclipped). Sharded tensors update their local blocks, with
    clip_scales from sharded_clip_scales."""
    grads, last_grads, exp_avgs = local(grads), local(last_grads), local(exp_avgs)
    c = corrected_gradients(grads, last_grads, gamma, beta1, clip, clip_scales)
    torch._foreach_lerp_(exp_avgs, c, 1.0 - beta1)


# ----------------------------------------------------------------------------- running a rule


def compile_per_tensor(device: torch.device) -> bool:
    """Whether compiled rules run one tensor per call (CPU: one graph for all shapes,
    compiled in seconds) or on whole lists (CUDA: one graph per parameter list, whose
    kernels launch together; per-tensor calls would be launch-bound there)."""
    return device.type == "cpu"


class RuleKernel:
    """A rule, run eagerly on whole lists or compiled (see compile_per_tensor)."""

    def __init__(self, rule: Callable[..., None]):
        self.rule = rule
        self.compile_failed = False

    # Wrapped on first use, so that importing the optimizers does not import torch._dynamo
    # (seconds); torch.compile itself compiles on the first call.
    @functools.cached_property
    def compiled_per_tensor(self) -> Callable[..., None]:
        return torch.compile(self.rule, fullgraph=True, dynamic=True)

    @functools.cached_property
    def compiled_whole_lists(self) -> Callable[..., None]:
        # Inductor's loop reordering asserts (torch 2.11, CUDA) when it meets the split reduction of a
        # large tensor's norm (GPT-2's 38.6M-element embedding) beside the ops feeding it; the rule's
        # kernels are element-wise over contiguous tensors, so the reordering has nothing to gain.
        return torch.compile(self.rule, fullgraph=True, options={"loop_ordering_after_fusion": False})

    def __call__(self, tensor_lists: list[Tensors], lr: torch.Tensor, compiled: bool, **hyperparameters: float) -> None:
        """Apply the rule; tensor_lists are its list arguments in order (an unused one empty). Sharded
        tensors (DTensors) are updated through their local blocks."""
        tensor_lists = [local(tensors) for tensors in tensor_lists]
        done = 0
        if compiled and not self.compile_failed:
            try:
                if compile_per_tensor(lr.device):
                    for done in range(len(tensor_lists[0])):
                        # Flat views: one graph for every shape, rank and size.
                        one_tensor = [[tensors[done].view(-1)] if tensors else [] for tensors in tensor_lists]
                        self.compiled_per_tensor(*one_tensor, lr, **hyperparameters)
                else:
                    self.compiled_whole_lists(*tensor_lists, lr, **hyperparameters)
                return
            except Exception as e:
                # Only a failure to compile (no C++ compiler or Triton) falls back, and it happens before the
                # compiled call writes anything. Any other error (out of memory midway through the kernels,
                # a wrong argument) propagates: re-running the step eagerly could apply part of it twice.
                if not isinstance(e, torch._dynamo.exc.BackendCompilerFailed):
                    raise
                warnings.warn(f"torch.compile of {self.rule.__name__} failed ({type(e).__name__}: {e}); "
                              "running eagerly")
                self.compile_failed = True
        self.rule(*[tensors[done:] for tensors in tensor_lists], lr, **hyperparameters)


ADAMW = RuleKernel(adamw_)
UNCORRECTED_EPS_ADAMW = RuleKernel(uncorrected_eps_adamw_)
MARS_ADAMW = RuleKernel(mars_adamw_)
MARS_LION = RuleKernel(mars_lion_)


# ----------------------------------------------------------------------------- state shared by the optimizers


def scalar_tensor(value: float, like: torch.Tensor) -> torch.Tensor:
    """A 0-d float32 tensor on like's device (a fill, never a host-to-device copy that could sync)."""
    return torch.full((), value, dtype=torch.float32, device=like.device)


def adam_state(state: dict, p: torch.Tensor, second_moment: bool, amsgrad: bool) -> dict:
    """The per-parameter state, created on first use: step count, exp_avg, and for
    Adam-type rules exp_avg_sq (+ max_exp_avg_sq with amsgrad)."""
    if "step" not in state:
        state["step"] = torch.zeros((), dtype=torch.float32, device=p.device)
        state["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
        if second_moment:
            state["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
            if amsgrad:
                state["max_exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
    elif state["step"].device != p.device:  # a checkpoint loaded onto another device
        state["step"] = state["step"].to(p.device)
    return state


def flat_copy(tensors: Tensors) -> tuple[torch.Tensor, Tensors]:
    """A copy of tensors in one flat buffer (the first's dtype and device) and its views shaped as them: element-wise
    work on the views, then one reduction over the buffer for all of them (Prodigy's dot products, Adam-mini's
    sums of squares)."""
    numels = [t.numel() for t in tensors]
    flat = torch.empty(sum(numels), dtype=tensors[0].dtype, device=tensors[0].device)
    views = [part.view_as(t) for part, t in zip(flat.split(numels), tensors)]
    torch._foreach_copy_(views, tensors)
    return flat, views


def moment_buffers(state: dict, p: torch.Tensor) -> dict:
    """exp_avg and exp_avg_sq, created on first use, for the rules whose step count is their group's."""
    if not state:
        state["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
        state["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
    return state


# The AdamW variants adamw_update runs: torch's arithmetic, and the official repositories' own.
ADAMW_VARIANTS = (
    "torch",  # torch.optim.AdamW, and MARS's AdamW for 1-D parameters
    "official-mars",  # MARS/optimizers/adamw.py (train_muon.py): decay scaled by the bias-corrected step
    "official-moonlight",  # MARS_M/optimizers/{moonlight,mars_m}.py and Keller Jordan's Muon: decay scaled by lr
)


def adamw_update(
    optimizer_state: dict, params: Tensors, lr: float, betas: tuple[float, float], eps: float,
    weight_decay: float, amsgrad: bool, compiled: bool, variant: str = "torch",
) -> None:
    """One AdamW step on params (all with a gradient), their state kept in optimizer_state.
    variant: one of ADAMW_VARIANTS; the official ones put eps on the uncorrected sqrt(v)."""
    states = [adam_state(optimizer_state[p], p, second_moment=True, amsgrad=amsgrad) for p in params]
    lr_tensor = scalar_tensor(lr, params[0])
    step_sizes, inv_bias_correction2_sqrts = adam_step_scalars([s["step"] for s in states], lr_tensor, *betas)
    moments = [params, [p.grad for p in params], [s["exp_avg"] for s in states], [s["exp_avg_sq"] for s in states]]
    if variant == "torch":
        ADAMW(moments + [[s["max_exp_avg_sq"] for s in states] if amsgrad else [], step_sizes,
                         inv_bias_correction2_sqrts],
              lr_tensor, compiled, beta1=betas[0], beta2=betas[1], eps=eps, weight_decay=weight_decay)
        return
    if amsgrad:
        raise ValueError(f"the {variant} AdamW has no amsgrad")
    torch._foreach_div_(step_sizes, inv_bias_correction2_sqrts)  # -lr sqrt(1-beta2^t) / (1-beta1^t)
    if variant == "official-mars":  # p <- p - step_size * (weight_decay * p + ...)
        decay_factors = torch._foreach_mul(step_sizes, weight_decay)
        torch._foreach_add_(decay_factors, 1.0)
    else:  # p <- p * (1 - lr * weight_decay) - ...
        decay_factors = [1.0 - lr_tensor * weight_decay] * len(params)
    UNCORRECTED_EPS_ADAMW(moments + [step_sizes, decay_factors], lr_tensor, compiled, beta1=betas[0],
                          beta2=betas[1], eps=eps)
