"""
MuonClip against Kimi K2's Algorithm 1 (arXiv 2507.20534; the authors published no code), restated here in float64
and nothing of ours in the reference: for each matrix, M_t = mu M_{t-1} + G_t, O_t = Newton-Schulz(M_t) sqrt(max(n,
m)) 0.2, W_t = W_{t-1} - eta (O_t + lambda W_{t-1}) (Moonlight's Newton-Schulz, as K2 uses it); the embeddings, the
head and the 1-D parameters on Moonlight's AdamW as its official code writes it (AGI-Arena/MARS
MARS_M/optimizers/moonlight.py); then each head whose largest logit of the step's forward passes exceeds tau has its
query and key rows (and biases) scaled by sqrt(tau / S_max). The reference takes S_max from the attention's input
projection, by hand, and clips head by head; ours records it in the model's forward and clips every layer at once,
on device. Distributed (the maximum over ranks): the resume matrix's muonclip variants, whose tau the tiny model's
logits pass (tests/test_resume_matrix.py).
"""

import copy
import math

import pytest
import torch

from conftest import without_key_bias
from model import GPT, GPTConfig, apply_rotary, rotary_tables
from optim import build_optimizer
from optim.muonclip import record_max_logits
from parity import newton_schulz_reference, on_hidden_matrix
from test_optim import TINY, tiny_config

STEPS = 6
LLAMA = dict(architecture="llama", bias=False)


class AlgorithmOne:
    """K2's Algorithm 1, lines 1-6 (plain momentum: M_t = mu M_{t-1} + G_t), on the groups that say use_muon; on the
    others Moonlight's official AdamW: m, v as lerps, p <- p (1 - lr wd) - lr sqrt(1 - b2^t) / (1 - b1^t) m /
    (sqrt(v) + eps)."""

    def __init__(self, groups: list[dict], lr: float, wd: float, mu: float, betas: tuple[float, float], eps: float):
        self.groups, self.lr, self.wd, self.mu, self.betas, self.eps = groups, lr, wd, mu, betas, eps
        self.state, self.t = {}, 0

    @torch.no_grad()
    def step(self) -> None:
        self.t += 1
        (b1, b2), lr, wd = self.betas, self.lr, self.wd
        for group in self.groups:
            for w in group["params"]:
                g = w.grad
                if group["use_muon"]:
                    m = self.state[w] = self.mu * self.state.get(w, torch.zeros_like(w)) + g
                    o = newton_schulz_reference(m) * math.sqrt(max(w.shape)) * 0.2
                    w.sub_(lr * (o + wd * w))
                else:
                    m, v = self.state.get(w, (torch.zeros_like(w), torch.zeros_like(w)))
                    m, v = m + (1 - b1) * (g - m), v + (1 - b2) * (g * g - v)
                    self.state[w] = (m, v)
                    scale = (1 - b1 ** self.t) / math.sqrt(1 - b2 ** self.t)
                    w.mul_(1 - lr * wd).sub_(lr / scale * m / (v.sqrt() + self.eps))

    def zero_grad(self) -> None:
        for group in self.groups:
            for w in group["params"]:
                w.grad = None


def batch(seed: int, config: GPTConfig) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    tokens = torch.randint(0, config.vocab_size, (3, config.block_size + 1), generator=gen)
    return tokens[:, :-1], tokens[:, 1:]


def reference_max_logits(model: GPT, x: torch.Tensor) -> list[torch.Tensor]:
    """Each layer's (n_head,) largest causal logit q_i . k_j * scale on batch x, from c_attn's output."""
    outputs = []
    hooks = [block.attn.c_attn.register_forward_hook(lambda m, i, o: outputs.append(o.detach()))
             for block in model.transformer.h]
    with torch.no_grad():
        model(x)
    for hook in hooks:
        hook.remove()
    maxima = []
    for block, qkv in zip(model.transformer.h, outputs):
        attn, (B, T, _) = block.attn, qkv.shape
        q, k, _ = (t.view(B, T, attn.n_head, -1) for t in qkv.split(attn.n_embd, dim=2))
        if attn.rotary_config is not None:
            rotary = rotary_tables(attn.rotary_config, T, x.device)
            q, k = apply_rotary(q, rotary), apply_rotary(k, rotary)
        logits = torch.einsum("bihd,bjhd->bhij", q, k) * attn.scale
        causal = torch.ones(T, T, dtype=torch.bool).tril()
        maxima.append(logits.masked_fill(~causal, -math.inf).amax(dim=(0, 2, 3)))
    return maxima


def reference_qk_clip(model: GPT, maxima: list[torch.Tensor], tau: float) -> int:
    """Algorithm 1's QK-clip, head by head; returns how many heads it clipped."""
    clipped = 0
    for block, head_max in zip(model.transformer.h, maxima):
        attn = block.attn
        d = attn.n_embd // attn.n_head
        for h, s_max in enumerate(head_max.tolist()):
            if s_max > tau:
                clipped += 1
                for rows in (slice(h * d, (h + 1) * d), slice(attn.n_embd + h * d, attn.n_embd + (h + 1) * d)):
                    for t in (attn.c_attn.weight, attn.c_attn.bias):
                        if t is not None:
                            t.data[rows] *= math.sqrt(tau / s_max)
    return clipped


@pytest.mark.parametrize("architecture", [pytest.param({}, marks=pytest.mark.quick, id="gpt2"),
                                          pytest.param(LLAMA, id="llama")])
def test_muonclip_is_moonlight_then_kimi_k2s_qk_clip(architecture):
    """Ours (float64 and float32) against Algorithm 1 restated (AlgorithmOne and the reference clip) in float64, STEPS
    steps of real forward and backward passes (two micro-batches a step: the maximum spans both), tau set where some heads are clipped
    and others not."""
    config = GPTConfig(**TINY | architecture)
    torch.manual_seed(0)
    reference = GPT(config).double()
    x0, _ = batch(0, config)
    # tau: the median head's starting logit, large weights so the logits are O(1)
    with torch.no_grad():
        for block in reference.transformer.h:
            block.attn.c_attn.weight.mul_(8.0)
    tau = torch.cat(reference_max_logits(reference, x0)).median().item()
    cfg = tiny_config(optimizer="muonclip", qk_clip_tau=tau)
    runs = {dtype: copy.deepcopy(reference).to(dtype) for dtype in (torch.float64, torch.float32)}
    optimizers = {dtype: build_optimizer(model, cfg, "cpu") for dtype, model in runs.items()}
    # Algorithm 1 on the reference, routed as Moonlight's official code routes (every hidden matrix on Muon; the
    # embeddings, the tied head and the 1-D parameters on its AdamW), restated here; ours must route the same way
    hp = cfg.hyperparameters
    assert not hp.muon_nesterov  # (the default is K2's plain momentum)
    on_muon = {name: on_hidden_matrix(name, p) for name, p in reference.named_parameters()}
    names = {id(p): n for n, p in runs[torch.float64].named_parameters()}
    assert {names[id(p)]: g["use_muon"] for g in optimizers[torch.float64].param_groups for p in g["params"]} == on_muon
    base = AlgorithmOne([dict(params=[p for name, p in reference.named_parameters() if on_muon[name] == use_muon],
                              use_muon=use_muon) for use_muon in (True, False)],
                        lr=cfg.learning_rate, wd=hp.weight_decay, mu=hp.beta1, betas=(hp.beta1_1d, hp.beta2_1d),
                        eps=hp.eps)
    clipped = 0
    for step in range(STEPS):
        micro_batches = [batch(2 * step + i, config) for i in range(2)]
        for dtype, model in runs.items():
            for x, y in micro_batches:
                model(x, y)[1].div(2).backward()
            optimizers[dtype].step()
            optimizers[dtype].zero_grad()
        maxima = [torch.stack(layer).amax(0) for layer in zip(*(reference_max_logits(reference, x)
                                                                 for x, _ in micro_batches))]
        for x, y in micro_batches:
            reference(x, y)[1].div(2).backward()
        base.step()
        base.zero_grad()
        clipped += reference_qk_clip(reference, maxima, tau)
    heads = STEPS * config.n_layer * config.n_head
    assert 0 < clipped < heads, f"QK-clip clipped {clipped} of {heads} heads: the test would not tell"
    # (the model records its maxima in float32: gamma to float32 rounding, in the float64 run too)
    # (and the key bias, whose gradient is rounding noise, left out: conftest.without_key_bias; float32's forward and
    # backward round the gradients, which Adam's normalisation carries to 4e-5 of the smallest tensors)
    expected_weights = without_key_bias(dict(reference.named_parameters()))
    for dtype, tolerance in ((torch.float64, 3e-7), (torch.float32, 2e-4)):
        for (name, p), expected in zip(without_key_bias(dict(runs[dtype].named_parameters())).items(),
                                       expected_weights.values()):
            error = ((p.detach().double() - expected).norm() / expected.norm()).item()
            assert error < tolerance, f"{dtype}: {name} relative error {error:.1e}"


def test_a_compiled_forward_records_the_logits_the_eager_one_does():
    """The max-logit record is a buffer the compiled graph writes through the attention's logits_observer (MuonClip's,
    torch.compile as train.py runs the model): the same maxima as eager, over two micro-batches, and nothing recorded
    in evaluation or without gradients."""
    config = GPTConfig(**TINY)
    torch.manual_seed(0)
    eager = GPT(config)
    compiled_model = copy.deepcopy(eager)
    for model in (eager, compiled_model):
        record_max_logits([block.attn for block in model.transformer.h])
    # aot_eager: dynamo's capture and AOTAutograd's functionalisation, which turn the buffer's in-place update into
    # a graph output copied back, as inductor's graphs do; without inductor's C++ compile (tens of seconds here)
    compiled = torch.compile(compiled_model, backend="aot_eager")
    for seed in (1, 2):
        x, y = batch(seed, config)
        eager(x, y)[1].backward()
        compiled(x, y)[1].backward()
    expected = [torch.stack(layer).amax(0) for layer in zip(*(reference_max_logits(eager, batch(s, config)[0])
                                                             for s in (1, 2)))]
    for model in (eager, compiled_model):
        for block, want in zip(model.transformer.h, expected):
            torch.testing.assert_close(block.attn.max_logit, want.float(), rtol=1e-5, atol=1e-6)
    records = [block.attn.max_logit.clone() for block in eager.transformer.h]
    with torch.no_grad():
        eager(batch(3, config)[0] * 0 + 5)
    eager.eval()
    eager(*batch(4, config))
    assert all(torch.equal(block.attn.max_logit, r) for block, r in zip(eager.transformer.h, records))
