"""
MuonClip (Kimi Team, "Kimi K2: Open Agentic Intelligence", arXiv 2507.20534, Algorithm 1): Muon with its update RMS
matched to AdamW's and decoupled weight decay (Moonlight's step, optim/moonlight.py, with Algorithm 1's plain
momentum M_t = mu M_{t-1} + G_t: Moonlight's code adds Nesterov's, muon_nesterov=True) followed, every step, by
QK-clip, which caps each attention head's largest logit at tau by shrinking that head's query and key weights:

    O = NS5(M) * 0.2 sqrt(max(n, m));  W <- W - lr (O + weight_decay W)    (Algorithm 1's Muon step)
    for each attention head h of every layer:
        S_max^h = the largest pre-softmax logit q_i . k_j / sqrt(d) of head h over the step's batch
                  (causal pairs j <= i, every sequence of every micro-batch on every rank)
        if S_max^h > tau:  gamma = tau / S_max^h;  W_q^h <- sqrt(gamma) W_q^h;  W_k^h <- sqrt(gamma) W_k^h

For multi-head attention (ours: GPT-2's and the Llama's) the paper scales a head's query and key blocks by sqrt(gamma)
each (its MLA's split of the rotary parts does not arise), so that head's logits scale by exactly gamma. The authors
published no code for it; this is their Algorithm 1 and Section 2.1 restated. Where we differ:
  - GPT-2's attention has biases (K2's has none): a head's query and key bias entries are scaled with its rows, so
    its logits still scale by exactly gamma;
  - S_max^h is recorded during the step's forward passes (record_max_logits: the model's attention hands its q and
    k to the observer this optimizer sets, which forms the logits once more beside the fused attention, no graph
    kept) and reduced over the ranks with one all-reduce (max) in the step, on device: no second forward and no
    host sync.
The paper's tau is 100 (K2); a run whose logits stay below tau is Moonlight's step with plain momentum (with
muon_nesterov=True, Moonlight's, step for step).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.distributed as dist
import torch.nn as nn

from optim.contract import Loop, positive
from optim.moonlight import Moonlight, MoonlightHyperparameters, official_groups
from optim.sharding import local, local_rows


@dataclass
class MuonClipHyperparameters(MoonlightHyperparameters):
    muon_nesterov: bool = False  # Algorithm 1's plain momentum (True: Moonlight's code's Nesterov)
    qk_clip_tau: float = positive(100.0)  # the largest attention logit QK-clip allows (Kimi K2's 100)

    def display_name(self) -> str:
        return "MuonClip"


def record_max_logits(attention: list[nn.Module]) -> None:
    """From now on each attention module keeps max_logit: each head's largest logit of the training forward passes
    since QK-clip last reset it to -inf (a per-rank buffer, never saved), through the module's logits_observer."""
    for module in attention:
        module.register_buffer("max_logit", torch.full((module.n_head,), -math.inf, device=module.c_attn.weight.device),
                               persistent=False)
        module.logits_observer = update_max_logit


@torch.no_grad()
def update_max_logit(module: nn.Module, q: torch.Tensor, k: torch.Tensor) -> None:
    """max_logit <- max(max_logit, each head's largest causal logit q.k * scale in this batch). The fused attention
    never forms the logits, so they are formed here once more (B x nh x T x T, no graph kept); the running maximum
    spans a step's micro-batches (and a checkpointed block's recomputation)."""
    T = q.size(2)
    logits = (q @ k.transpose(-2, -1)) * module.scale
    future = torch.ones(T, T, dtype=torch.bool, device=q.device).triu(1)
    head_max = logits.masked_fill(future, -math.inf).amax(dim=(0, 2, 3)).float()
    module.max_logit.copy_(torch.maximum(module.max_logit, head_max))


class MuonClip(Moonlight):
    def __init__(self, params: list[dict], attention: list[nn.Module], qk_clip_tau: float = 100.0, **moonlight):
        """params and moonlight: Moonlight's arguments. attention: the model's CausalSelfAttention modules (their
        c_attn holds a head's query rows, then its key rows, each head's block of head_dim rows in order), which
        record their heads' largest logits while this optimizer is built on them."""
        super().__init__(params, **moonlight)
        self.attention, self.qk_clip_tau = attention, qk_clip_tau
        record_max_logits(attention)

    @torch.no_grad()
    def step(self, closure=None):
        loss = super().step(closure)
        self.clip_query_keys()
        return loss

    def clip_query_keys(self) -> None:
        """QK-clip on the step's recorded maxima (then cleared for the next step's forward passes)."""
        if not self.attention:
            return
        records = [module.max_logit for module in self.attention]
        max_logits = torch.stack(records)  # (n_layer, n_head)
        if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
            dist.all_reduce(max_logits, op=dist.ReduceOp.MAX)
        torch._foreach_zero_(records)
        torch._foreach_add_(records, float("-inf"))
        head_scales = torch.where(max_logits > self.qk_clip_tau, self.qk_clip_tau / max_logits, 1.0).sqrt()
        n_embd = self.attention[0].n_embd
        head_dim = n_embd // self.attention[0].n_head
        query_key = head_scales.repeat_interleave(head_dim, dim=1)  # (n_layer, n_embd): a scale per row
        row_scales = torch.cat([query_key, query_key, torch.ones_like(query_key)], dim=1)  # q, k, v rows
        scaled = [(t, row_scales[layer]) for layer, module in enumerate(self.attention)
                  for t in (module.c_attn.weight, module.c_attn.bias) if t is not None]  # (a layer's rows, its scales)
        torch._foreach_mul_(local([t for t, _ in scaled]),
                            [scale[local_rows(t)].view(-1, *[1] * (t.ndim - 1)).to(t.dtype) for t, scale in scaled])


def build_muonclip(model: nn.Module, hp: MuonClipHyperparameters, loop: Loop) -> MuonClip:
    """Moonlight as build_moonlight builds it (the official split: the blocks' matrices on the matrix rule, the
    embeddings, head and 1-D parameters on AdamW), with QK-clip on every attention layer."""
    attention = [block.attn for block in model.transformer.h]
    return MuonClip(official_groups(model), attention, hp.qk_clip_tau, lr=loop.learning_rate, wd=hp.weight_decay,
                    momentum=hp.beta1, nesterov=hp.muon_nesterov, adamw_betas=(hp.beta1_1d, hp.beta2_1d),
                    adamw_eps=hp.eps, compiled=loop.compiled, ns_coefficients=hp.ns_coefficients)
