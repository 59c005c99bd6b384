"""The training loop's MARS-exact capability, with a recording optimizer: before step t the loop
must hand the optimizer the gradient at the CURRENT weights x_t on the batch of step t+1, and the
step itself gets the gradient at x_t on batch t: two backward passes per step."""

from contextlib import nullcontext

import torch

import train
from config import TrainConfig
from data.loader import TokenWindows, TrainBatches
from model import GPT, GPTConfig
from optim.contract import SecondGradient
from runtime import Runtime


class RecordingSGD(SecondGradient, torch.optim.SGD):
    needs_grad_on_next_batch = True

    def __init__(self, params, lr):
        super().__init__(params, lr=lr)
        self.stashed, self.stepped = [], []

    def snapshot(self) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        params = [p for g in self.param_groups for p in g["params"]]
        return [p.detach().clone() for p in params], [p.grad.clone() for p in params]

    def stash_grad_for_next_step(self) -> None:
        self.stashed.append(self.snapshot())

    def step(self, closure=None):
        self.stepped.append(self.snapshot())
        return super().step(closure)


def test_loop_computes_the_next_batch_gradient_at_the_old_weights(tiny_dataset):
    forward_calls = []

    class CountingGPT(GPT):
        def forward(self, idx, targets=None, **kw):
            if self.training:
                forward_calls.append(idx.shape[0])
            return super().forward(idx, targets, **kw)

    cfg = TrainConfig(data_dir=tiny_dataset, device="cpu", n_layer=1, n_head=2, n_embd=16, block_size=16,
                      total_batch_size=4 * 16, micro_batch_size=2, max_iters=3, warmup_iters=0,
                      lr_schedule="constant", learning_rate=0.5, grad_clip=0.0)
    rt = Runtime(rank=0, local_rank=0, world_size=1, device=torch.device("cpu"))
    data = train.load_data(cfg, rt)
    torch.manual_seed(cfg.seed)
    model = CountingGPT(GPTConfig(**cfg.model_args()))
    opt = RecordingSGD(model.parameters(), lr=cfg.learning_rate)
    scaler = torch.amp.GradScaler("cpu", enabled=False)
    steps = train.StepContext(model, list(model.parameters()), opt, scaler, data.train_batches, cfg, rt, nullcontext())
    for step in range(3):  # the loop's step, as train() calls it
        steps.optimizer_step(step)
    assert len(opt.stashed) == len(opt.stepped) == 3
    assert len(forward_calls) == 3 * 2 * 2  # 3 steps x 2 gradients x 2 micro-steps: two backward passes per step

    batches = TrainBatches(TokenWindows(tiny_dataset, "train", 16, cfg.vocab_size), seed=cfg.seed, sequences_per_step=4)
    model = GPT(GPTConfig(**cfg.model_args()))

    def gradient_at(weights: list[torch.Tensor], step: int) -> list[torch.Tensor]:
        with torch.no_grad():
            for p, w in zip(model.parameters(), weights):
                p.copy_(w)
        model.zero_grad()
        x, y = batches.micro_batch(step, 0, 4, rank=0, world_size=1)
        model(x, y)[1].backward()
        return [p.grad for p in model.parameters()]

    for t in range(3):
        stash_weights, stash_grads = opt.stashed[t]
        step_weights, step_grads = opt.stepped[t]
        assert all(torch.equal(a, b) for a, b in zip(stash_weights, step_weights))  # both at x_t
        for got, want in zip(stash_grads, gradient_at(stash_weights, t + 1)):
            torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-6)
        for got, want in zip(step_grads, gradient_at(step_weights, t)):
            torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-6)
