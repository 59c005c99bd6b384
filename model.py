"""
The model in one file, nanoGPT style: GPT-2, and the Llama-style GPT the 2025 optimizer benchmarks train.

GPT-2 (architecture "gpt2"): token + learned position embeddings, pre-LayerNorm transformer blocks (causal
self-attention through scaled_dot_product_attention, 4x GELU MLP), a final LayerNorm and an lm_head tied to
the token embedding. The vocabulary is padded from GPT-2's 50257 to 50304 (a multiple of 64) for faster
matrix products.

Llama (architecture "llama"), as epfml/llm-baselines builds it (Semenov et al. 2025's benchmark, its
src/models/llama.py): no position embedding; rotary embeddings on queries and keys (theta 10000, the
dimensions rotated in adjacent pairs (0, 1), (2, 3), ..., Meta's layout); RMSNorm (eps 1e-5, in fp32)
before each sublayer and at the end; a SwiGLU MLP, c_proj(silu(w1 x) * w2 x), of hidden size 8/3 n_embd
rounded up to a multiple of 256; no biases; the head tied to the embedding unless the preset unties it.
The settings (GPTConfig) and the presets, which pick the architecture, are config/models.py's.
"""

import dataclasses
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from config.models import ARCHITECTURES, COMPONENTS, INITS, OWN_COMPONENTS, PARAMETRIZATIONS, GPTConfig, components


def swiglu_hidden(n_embd: int) -> int:
    """llm-baselines' SwiGLU hidden size: 2/3 of 4 n_embd, rounded up to a multiple of 256 (768 -> 2048)."""
    return 256 * math.ceil(int(2 * 4 * n_embd / 3) / 256)


def mlp_hidden(config: GPTConfig) -> int:
    """The MLP's hidden width: GPT-2's 4 n_embd; a Llama's (SwiGLU's) mlp_ratio n_embd, or llm-baselines' rule."""
    if components(config)["mlp"] == "gelu":
        return 4 * config.n_embd
    return config.mlp_ratio * config.n_embd or swiglu_hidden(config.n_embd)


def fan_in_multiplier(config: GPTConfig, fan_in: int) -> float:
    """mup: how many times wider a hidden matrix's input (n_embd, or the MLP's hidden width) is than at the base
    width (1 under sp). A Llama's SwiGLU width is rounded to 256's, so its c_proj's need not be n_embd's."""
    if config.parametrization != "mup":
        return 1.0
    base = dataclasses.replace(config, n_embd=config.mup_base_width)
    return fan_in / {config.n_embd: base.n_embd, mlp_hidden(config): mlp_hidden(base)}[fan_in]


# Rows of LinearCrossEntropy's chunks: 4096 x 50304 logits are 0.4 GB in bf16, and products that size run as
# fast as whole ones. (A module constant: torch.compile does not trace a Function that reads its class's
# attributes, and runs it eagerly instead, silently: 32% fewer tokens/s on an H100.)
CROSS_ENTROPY_CHUNK_ROWS = 4096


class LinearCrossEntropy(torch.autograd.Function):
    """The mean cross-entropy of x @ weight.T against targets (-1: ignored) and its gradients with respect to x
    and weight, made CROSS_ENTROPY_CHUNK_ROWS rows of x at a time in the forward pass (Liger-Kernel's fused
    linear cross-entropy): the logits exist a chunk at a time, instead of the whole (tokens x vocabulary) array
    materialised, upcast, zero-filled for its gradient and read again. The products run in the autocast dtype
    when autocast is on (as lm_head's would), the softmax in fp32. With label_draws instead of targets, each
    row's label is label_sampler(its softmax, its draw) (GPT.label_sampler)."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor | None,
                label_draws: torch.Tensor | None = None, label_sampler=None) -> torch.Tensor:
        device_type = x.device.type
        dtype = torch.get_autocast_dtype(device_type) if torch.is_autocast_enabled(device_type) else x.dtype
        with torch.autocast(device_type, enabled=False):
            w = weight.to(dtype)
            valid = targets != -1 if targets is not None else torch.ones(x.size(0), dtype=torch.bool, device=x.device)
            count = valid.sum().clamp(min=1).float()
            loss = torch.zeros((), dtype=torch.float32, device=x.device)
            grad_x = torch.empty_like(x)
            grad_w = torch.zeros_like(weight, dtype=torch.float32)
            for start in range(0, x.size(0), CROSS_ENTROPY_CHUNK_ROWS):
                rows = slice(start, start + CROSS_ENTROPY_CHUNK_ROWS)
                x_chunk, keep = x[rows].to(dtype), valid[rows]
                logits = (x_chunk @ w.t()).float()
                logsumexp = torch.logsumexp(logits, dim=-1)
                # d(the chunk's summed loss)/d logits: softmax - one_hot(target), 0 on ignored rows
                grad_logits = torch.exp(logits - logsumexp[:, None])
                target = (targets[rows].clamp(min=0) if label_draws is None
                          else label_sampler(grad_logits, label_draws[rows]))
                target_logit = logits.gather(1, target[:, None]).squeeze(1)
                loss += torch.where(keep, logsumexp - target_logit, 0.0).sum()
                grad_logits.scatter_add_(1, target[:, None], torch.full_like(target_logit, -1.0)[:, None])
                grad_logits = torch.where(keep[:, None], grad_logits, 0.0).to(dtype)
                grad_x[rows] = grad_logits @ w
                grad_w += (grad_logits.t() @ x_chunk).float()
        ctx.save_for_backward(grad_x, grad_w, count)
        ctx.weight_dtype = weight.dtype
        return loss / count

    @staticmethod
    def backward(ctx, grad_loss: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, None, None, None]:
        grad_x, grad_w, count = ctx.saved_tensors
        scale = grad_loss / count
        return grad_x * scale.to(grad_x.dtype), (grad_w * scale).to(ctx.weight_dtype), None, None, None


def rotary_tables(config: GPTConfig, length: int, device: torch.device) -> torch.Tensor:
    """cos and sin of each position's angle for each pair of a head's dimensions: (2, length, head_dim / 2), fp32
    (theta^(-2i/d) per pair i, as llm-baselines and Meta compute it). Made by each attention layer in each forward
    pass, on its input's device: a few thousand numbers, no buffer for a meta-device or sharded model to lose, and
    never an input of an FSDP block (whose mixed-precision policy would cast it to bf16)."""
    head_dim = config.n_embd // config.n_head
    inv_freq = 1.0 / config.rope_theta ** (torch.arange(0, head_dim, 2, device=device).float() / head_dim)
    angles = torch.outer(torch.arange(length, device=device).float(), inv_freq)
    return torch.stack((angles.cos(), angles.sin()))


def apply_rotary(x: torch.Tensor, rotary: torch.Tensor) -> torch.Tensor:
    """x (B, T, nh, hs) with each adjacent pair of dimensions (0, 1), (2, 3), ... rotated by its position's
    angle, computed in fp32 (or x's wider dtype) and returned in x's dtype."""
    cos, sin = rotary[0, :, None, :], rotary[1, :, None, :]  # (T, 1, hs / 2)
    pairs = x.to(torch.promote_types(x.dtype, torch.float32)).unflatten(-1, (-1, 2))
    even, odd = pairs[..., 0], pairs[..., 1]
    return torch.stack((even * cos - odd * sin, even * sin + odd * cos), dim=-1).flatten(-2).type_as(x)


class RMSNorm(nn.Module):
    """x / rms(x) * weight, the normalisation in fp32 or x's wider dtype (llm-baselines', Hugging Face Llama's)."""

    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        wide = x.to(torch.promote_types(x.dtype, torch.float32))
        return (wide * torch.rsqrt(wide.pow(2).mean(-1, keepdim=True) + self.eps)).type_as(x) * self.weight


class CausalSelfAttention(nn.Module):
    def __init__(self, config: GPTConfig, layer_idx: int):
        super().__init__()
        assert config.n_embd % config.n_head == 0
        bias = config.bias and config.architecture == "gpt2"
        self.c_attn = nn.Linear(config.n_embd, 3 * config.n_embd, bias=bias)
        self.c_proj = nn.Linear(config.n_embd, config.n_embd, bias=bias)
        self.resid_dropout = nn.Dropout(config.dropout)
        self.n_head = config.n_head
        self.n_embd = config.n_embd
        self.dropout = config.dropout
        self.rotary_config = config if components(config)["positions"] == "rope" else None
        head_dim = config.n_embd // config.n_head
        # mup: attention's 1/d (Yang et al., TP V), as sqrt(d_base) / d so that the base width is sp's 1/sqrt(d)
        self.scale = 1.0 / (math.sqrt(head_dim) * math.sqrt(config.width_multiplier()))
        if config.scale_attn_by_inverse_layer_idx:
            self.scale /= layer_idx + 1
        # An optimizer that reads the attention logits of the training forward passes sets this (MuonClip's
        # record of each head's largest logit, optim/muonclip.py): called with this module, q and k (after the
        # rotary embedding, shaped B x heads x T x head size) beside the fused attention, which never forms them.
        self.logits_observer = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.size()
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head) for t in self.c_attn(x).split(self.n_embd, dim=2))
        if self.rotary_config is not None:  # a Llama's positions (or rotary ones swapped into a GPT-2)
            rotary = rotary_tables(self.rotary_config, T, x.device)
            q, k = apply_rotary(q, rotary), apply_rotary(k, rotary)
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)  # (B, nh, T, hs)
        # Flash / memory-efficient kernels on GPU; the causal mask is implicit.
        y = F.scaled_dot_product_attention(
            q, k, v, dropout_p=self.dropout if self.training else 0.0, is_causal=True, scale=self.scale
        )
        if self.logits_observer is not None and self.training and torch.is_grad_enabled():
            self.logits_observer(self, q, k)
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.resid_dropout(self.c_proj(y))


class MLP(nn.Module):
    def __init__(self, config: GPTConfig):
        super().__init__()
        self.c_fc = nn.Linear(config.n_embd, 4 * config.n_embd, bias=config.bias)
        self.gelu = nn.GELU(approximate="tanh")  # GPT-2's gelu_new
        self.c_proj = nn.Linear(4 * config.n_embd, config.n_embd, bias=config.bias)
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.dropout(self.c_proj(self.gelu(self.c_fc(x))))


class SwiGLU(nn.Module):
    """A Llama's MLP: c_proj(silu(w1 x) * w2 x), llm-baselines' names (w1 the gate, w2 the up projection)."""

    def __init__(self, config: GPTConfig):
        super().__init__()
        hidden = mlp_hidden(config)
        self.w1 = nn.Linear(config.n_embd, hidden, bias=False)
        self.w2 = nn.Linear(config.n_embd, hidden, bias=False)
        self.c_proj = nn.Linear(hidden, config.n_embd, bias=False)
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.dropout(self.c_proj(F.silu(self.w1(x)) * self.w2(x)))


def norm(config: GPTConfig) -> nn.Module:
    """The model's normalisation: GPT-2's LayerNorm, a Llama's RMSNorm (or the other, swapped in)."""
    if components(config)["norm"] == "rmsnorm":
        return RMSNorm(config.n_embd, config.norm_eps)
    return nn.LayerNorm(config.n_embd, eps=config.norm_eps, bias=config.bias)


class Block(nn.Module):
    def __init__(self, config: GPTConfig, layer_idx: int):
        super().__init__()
        self.ln_1 = norm(config)
        self.attn = CausalSelfAttention(config, layer_idx)
        self.ln_2 = norm(config)
        self.mlp = SwiGLU(config) if components(config)["mlp"] == "swiglu" else MLP(config)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x))
        x = x + self.mlp(self.ln_2(x))
        return x


class GPT(nn.Module):
    def __init__(self, config: GPTConfig, fused_cross_entropy: bool = False):
        """fused_cross_entropy: the training loss through LinearCrossEntropy (above), the logits never whole:
        the same function (another rounding of the head's gradient, its chunks summed in fp32), no logits
        returned. How the loss is computed, not what the model is: not part of the config or checkpoints."""
        super().__init__()
        if (config.architecture not in ARCHITECTURES or config.init not in INITS
                or config.parametrization not in PARAMETRIZATIONS):
            raise ValueError(f"architecture {config.architecture!r}, init {config.init!r}, parametrization "
                             f"{config.parametrization!r}: choose from {ARCHITECTURES}, {INITS} and {PARAMETRIZATIONS}")
        if config.parametrization == "mup" and config.mup_base_width <= 0:
            raise ValueError("parametrization 'mup' needs mup_base_width, the width its hyperparameters were tuned at")
        self.config = config
        self.fused_cross_entropy = fused_cross_entropy
        # How label_draws become labels, (probabilities, draws) -> labels: set by an optimizer whose estimate takes
        # the loss on labels drawn from the model's own predictions (Sophia: optim/sophia.py's sampled_labels)
        self.label_sampler = None
        for name, choices in COMPONENTS.items():
            if getattr(config, name) not in choices:
                raise ValueError(f"{name} {getattr(config, name)!r}: choose from {choices}")
        layers = dict(wte=nn.Embedding(config.vocab_size, config.n_embd))
        if components(config)["positions"] == "learned":  # (rotary positions are the attention's)
            layers["wpe"] = nn.Embedding(config.block_size, config.n_embd)
        blocks = nn.ModuleList([Block(config, i) for i in range(config.n_layer)])
        self.transformer = nn.ModuleDict(layers | dict(drop=nn.Dropout(config.dropout), h=blocks, ln_f=norm(config)))
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        self.tie_weights()
        self.apply(self._init_weights)
        if config.init == "normal":  # GPT-2's and llm-baselines': residual projections / sqrt(2 n_layer)
            for name, p in self.named_parameters():
                if name.endswith("c_proj.weight"):
                    std = 0.02 / math.sqrt(2 * config.n_layer * fan_in_multiplier(config, p.size(1)))
                    torch.nn.init.normal_(p, mean=0.0, std=std)
        # mup's readout: the logits / m (the tied head keeps the embedding's width-free init; mup's MuSharedReadout)
        self.output_multiplier = 1.0 / config.width_multiplier()

    def tie_weights(self) -> None:
        """The token embedding and the lm_head share one matrix (GPT-2's weight tying), unless the preset unties
        them."""
        if self.config.tie_embeddings:
            self.transformer.wte.weight = self.lm_head.weight

    def _init_weights(self, module: nn.Module) -> None:
        """normal: N(0, 0.02) for every matrix and embedding (GPT-2, llm-baselines). fan_in (levanter's, Wen et
        al.'s runs): each Linear truncated N(0, 1/fan_in) at 3 standard deviations, the embedding at 1/n_embd.
        mup: the hidden matrices' std / sqrt(m) (fan_in's is already), the embedding's and the head's as sp's at the
        base width (width-free: mup's input and readout weights)."""
        m, base = self.config.width_multiplier(), self.config.mup_base_width
        if isinstance(module, nn.Linear):
            head = module is self.lm_head
            if self.config.init == "fan_in":
                std = (base if head and m != 1 else module.in_features) ** -0.5
                torch.nn.init.trunc_normal_(module.weight, std=std, a=-3 * std, b=3 * std)
            else:
                hidden = 1.0 if head else fan_in_multiplier(self.config, module.in_features)
                torch.nn.init.normal_(module.weight, mean=0.0, std=0.02 / math.sqrt(hidden))
            if module.bias is not None:
                torch.nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):  # (tied: the lm_head, initialised after it, draws its value)
            if self.config.init == "fan_in":
                std = 1 / (base if m != 1 else self.config.n_embd)
                torch.nn.init.trunc_normal_(module.weight, std=std, a=-3 * std, b=3 * std)
            else:
                torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)

    def num_params(self, non_embedding: bool = False) -> int:
        """Parameter count (a tied lm_head counted once), as GPT-2's paper and llm-baselines count. With
        non_embedding, the position embedding is left out too (GPT-2's)."""
        n = sum(p.numel() for p in self.parameters())
        if non_embedding and "wpe" in self.transformer:
            n -= self.transformer.wpe.weight.numel()
        return n

    def forward(
        self, idx: torch.Tensor, targets: torch.Tensor | None = None, all_logits: bool = False,
        label_draws: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Logits and the mean cross-entropy against targets. Without targets
        only the last position's logits are computed (for generation), unless
        all_logits asks for every position's (for scoring continuations). With
        fused_cross_entropy, a training forward (gradients on) returns the loss alone.
        label_draws (B x T numbers, data.loader's) instead of targets: the loss against labels drawn from the
        model's own next-token distribution at those numbers by label_sampler, which the optimizer that asks for
        it sets (Sophia's Hessian estimate: optim/sophia.py's sampled_labels)."""
        b, t = idx.size()
        if targets is not None and label_draws is not None:
            raise ValueError("give targets or label_draws, not both")
        if label_draws is not None and self.label_sampler is None:
            raise ValueError("label_draws need a label_sampler: the optimizer that asks for them sets it")
        if t > self.config.block_size:
            raise ValueError(f"sequence of length {t} is longer than block_size {self.config.block_size}")
        x = self.transformer.wte(idx)
        if "wpe" in self.transformer:  # (a Llama's positions are its attention's rotary embeddings)
            x = x + self.transformer.wpe(torch.arange(0, t, dtype=torch.long, device=idx.device))
        x = self.transformer.drop(x)
        for block in self.transformer.h:
            x = block(x)
        x = self.transformer.ln_f(x)
        if self.output_multiplier != 1.0:  # (mup's readout; sp's 1.0 not multiplied in: no extra kernel)
            x = x * self.output_multiplier
        if targets is None and label_draws is None:
            return self.lm_head(x if all_logits else x[:, [-1], :]), None
        draws = label_draws.reshape(-1) if label_draws is not None else None
        if self.fused_cross_entropy and torch.is_grad_enabled():  # training: the loss alone
            flat_targets = targets.reshape(-1) if targets is not None else None
            return None, LinearCrossEntropy.apply(x.reshape(b * t, -1), self.lm_head.weight, flat_targets, draws,
                                                  self.label_sampler)
        logits = self.lm_head(x)
        flat_logits = logits.view(-1, logits.size(-1)).float()
        if draws is not None:
            targets = self.label_sampler(flat_logits.detach().softmax(-1), draws)
        loss = F.cross_entropy(flat_logits, targets.reshape(-1), ignore_index=-1)
        return logits, loss

    def flops_per_token(self) -> int:
        """Training FLOPs per token (forward + backward), PaLM appendix B: 6 per parameter the token meets in a
        matrix product (the blocks' matrices, SwiGLU's three included, and the head; an untied token embedding
        is a lookup, no FLOPs) and 12 L C T for attention. Element-wise work (norms, RoPE, activations) is not
        counted, as PaLM counts."""
        cfg = self.config
        params = self.num_params(non_embedding=True)
        if not cfg.tie_embeddings:
            params -= self.transformer.wte.weight.numel()
        return 6 * params + 12 * cfg.n_layer * cfg.n_embd * cfg.block_size

    def estimate_mfu(self, tokens_per_second: float, peak_flops: float, passes_per_step: int = 1) -> float:
        """Model FLOPs utilisation: achieved training FLOP/s over the device's
        peak (bf16 dense: A100 312e12, H100/H200 989e12). passes_per_step: forward-backward
        passes over each step's tokens (2 for MARS-exact, whose second gradient is work too)."""
        return self.flops_per_token() * tokens_per_second * passes_per_step / peak_flops

    @torch.no_grad()
    def generate(
        self, idx: torch.Tensor, max_new_tokens: int, temperature: float = 1.0, top_k: int | None = None,
        generator: torch.Generator | None = None,
    ) -> torch.Tensor:
        """Continue idx (b, t) by max_new_tokens sampled tokens, in eval mode (no dropout). temperature 0
        is greedy."""
        was_training = self.training
        self.eval()
        for _ in range(max_new_tokens):
            idx_cond = idx[:, -self.config.block_size :]
            logits, _ = self(idx_cond)
            logits = logits[:, -1, :].float()
            if temperature == 0:
                idx_next = logits.argmax(dim=-1, keepdim=True)
            else:
                logits = logits / temperature
                if top_k is not None:
                    v, _ = torch.topk(logits, min(top_k, logits.size(-1)))
                    logits = logits.masked_fill(logits < v[:, [-1]], -float("inf"))  # (no host sync)
                probs = F.softmax(logits, dim=-1)
                idx_next = torch.multinomial(probs, num_samples=1, generator=generator)
            idx = torch.cat((idx, idx_next), dim=1)
        self.train(was_training)
        return idx
