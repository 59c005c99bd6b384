"""
Weight averaging for any optimizer: the model evaluated and saved is an average of the weights the optimizer
visits, while training goes on from the weights themselves (weight_averaging in config/__init__.py).

  ema:      average <- average + (1 - ema_decay) (weights - average) every averaging_interval steps from
            averaging_start, starting as the weights at that step (epfml/llm-optimizer-benchmark's
            ExponentialWeightAverager, --exponential_weight_average, at fdecd5d: with ewa_after_warmup, theirs is
            ours at averaging_start = warmup_steps + 1 where the interval divides warmup_steps, since theirs counts
            the interval from their count 0, our step 1, ours from averaging_start);
  uniform:  the plain mean of the weights every averaging_interval steps from averaging_start to now (a tail
            average, LAWA's and SWA's; torch.optim.swa_utils' running mean). epfml's WeightAverager restarts its
            mean every wa_horizon steps and evaluates the last finished window; where wa_horizon divides max_iters,
            averaging_start = max_iters - wa_horizon + 1 gives its final average (tests/test_weight_averaging.py
            restates both of theirs).

The average lives in the optimizer's per-parameter state ("weight_average", the parameter's dtype and, under FSDP2,
its sharding), so it is checkpointed, sharded and resumed as any moment is; the counts live in the param groups.
It plugs into the loop as Schedule-Free's averaged weights do (optim/contract.py's EvaluationWeights): inside
evaluation_weights the parameters hold the average and the state the training weights, so a checkpoint's model is
the average (what eval/, sample.py and the Hugging Face export read) and a resume swaps the two back.
"""

import torch

from errors import ConfigError
from optim.contract import EvaluationWeights, GroupState
from optim.sharding import local

AVERAGE = "weight_average"
COUNTS = ("averaging_steps", "averages_taken", "averaged_in_params")  # kept in every param group


class WeightAveraging(EvaluationWeights, GroupState):
    """Mixed into the optimizer's own class (with_weight_averaging), whose step then takes the average's."""

    __slots__ = ()  # (the instance keeps its own class's layout, so its class can be extended in place)
    averaging: str
    ema_decay: float
    averaging_interval: int
    averaging_start: int

    @torch.no_grad()
    def take_average(self) -> None:
        """After a step: one more point of the average when the step is due (averaging_start, every interval)."""
        first = self.param_groups[0]
        params = [p for group in self.param_groups for p in group["params"] if p.requires_grad]
        if AVERAGE not in self.state[params[0]]:  # (from the first step on, so that a checkpoint's is read into it)
            for p in params:
                self.state[p][AVERAGE] = p.detach().clone()
        first["averaging_steps"] += 1
        since_start = first["averaging_steps"] - self.averaging_start
        if since_start >= 0 and since_start % self.averaging_interval == 0:
            taken = first["averages_taken"]
            if taken == 0:  # the first point is the weights themselves
                torch._foreach_copy_(local([self.state[p][AVERAGE] for p in params]), local(params))
            else:
                weight = 1 - self.ema_decay if self.averaging == "ema" else 1 / (taken + 1)
                torch._foreach_lerp_(local([self.state[p][AVERAGE] for p in params]), local(params), weight)
            first["averages_taken"] = taken + 1
        for group in self.param_groups[1:]:
            group.update({key: first[key] for key in COUNTS})

    @torch.no_grad()
    def _swap(self, into_params: bool) -> None:
        first = self.param_groups[0]
        if first["averaged_in_params"] == into_params or first["averages_taken"] == 0:  # (none yet: the weights)
            return
        pairs = [(p, self.state[p][AVERAGE]) for group in self.param_groups for p in group["params"]
                 if AVERAGE in self.state.get(p, {})]
        if pairs:
            params, averages = local([p for p, _ in pairs]), local([a for _, a in pairs])  # (FSDP2: each rank's shards)
            held = torch._foreach_mul(params, 1.0)  # (one model-sized copy, at evaluations and saves only)
            torch._foreach_copy_(params, averages)
            torch._foreach_copy_(averages, held)
        for group in self.param_groups:
            group["averaged_in_params"] = into_params

    def eval_weights(self) -> None:
        self._swap(into_params=True)

    def train_weights(self) -> None:
        self._swap(into_params=False)


def with_weight_averaging(optimizer: torch.optim.Optimizer, averaging: str, ema_decay: float, interval: int,
                          start: int) -> torch.optim.Optimizer:
    """The optimizer, its class extended by WeightAveraging (its own capabilities and state untouched)."""
    if isinstance(optimizer, EvaluationWeights):
        raise ConfigError(f"weight_averaging={averaging}: {type(optimizer).__name__} already evaluates weights of its "
                          "own (Schedule-Free's average); remove weight_averaging")
    own_class = type(optimizer)
    own_keys = optimizer.group_state_keys if isinstance(optimizer, GroupState) else ()

    def step(self, closure=None):
        loss = own_class.step(self, closure)
        self.take_average()
        return loss

    # (the optimizer's class first: an instance's class can only be swapped for one of the same layout)
    optimizer.__class__ = type(f"{own_class.__name__}WithWeightAveraging", (own_class, WeightAveraging),
                               {"step": step, "group_state_keys": (*own_keys, *COUNTS)})
    optimizer.averaging, optimizer.ema_decay = averaging, ema_decay
    optimizer.averaging_interval, optimizer.averaging_start = interval, start
    for group in optimizer.param_groups:
        group.update(averaging_steps=0, averages_taken=0, averaged_in_params=False)
    return optimizer
