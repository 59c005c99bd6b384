"""
GPT-2 in one file, nanoGPT style.

Token + learned position embeddings, pre-LayerNorm transformer blocks (causal
self-attention through scaled_dot_product_attention, 4x GELU MLP), a final
LayerNorm and an lm_head tied to the token embedding. The vocabulary is padded
from GPT-2's 50257 to 50304 (a multiple of 64) for faster matrix products.
"""

import math
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class GPTConfig:
    block_size: int = 1024
    vocab_size: int = 50304  # GPT-2's 50257 padded up to a multiple of 64
    n_layer: int = 12
    n_head: int = 12
    n_embd: int = 768
    dropout: float = 0.0
    bias: bool = True  # biases in Linear and LayerNorm layers, as GPT-2 has
    # The official MARS runs divide the attention logits of layer i (0-based)
    # additionally by i + 1 (Hugging Face GPT-2's flag of the same name).
    scale_attn_by_inverse_layer_idx: bool = False


# The paper's four model sizes: (n_layer, n_head, n_embd).
PRESETS: dict[str, dict[str, int]] = {
    "small": dict(n_layer=12, n_head=12, n_embd=768),  # 124M
    "medium": dict(n_layer=24, n_head=16, n_embd=1024),  # 350M
    "large": dict(n_layer=36, n_head=20, n_embd=1280),  # 774M
    "xl": dict(n_layer=48, n_head=25, n_embd=1600),  # 1558M
}


# Rows of LinearCrossEntropy's chunks: 4096 x 50304 logits are 0.4 GB in bf16, and products that size run as
# fast as whole ones. (A module constant: torch.compile does not trace a Function that reads its class's
# attributes, and runs it eagerly instead, silently: 32% fewer tokens/s on an H100.)
CROSS_ENTROPY_CHUNK_ROWS = 4096


class LinearCrossEntropy(torch.autograd.Function):
    """The mean cross-entropy of x @ weight.T against targets (-1: ignored) and its gradients with respect to x
    and weight, made CROSS_ENTROPY_CHUNK_ROWS rows of x at a time in the forward pass (Liger-Kernel's fused
    linear cross-entropy): the logits exist a chunk at a time, instead of the whole (tokens x vocabulary) array
    materialised, upcast, zero-filled for its gradient and read again. The products run in the autocast dtype
    when autocast is on (as lm_head's would), the softmax in fp32."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        device_type = x.device.type
        dtype = torch.get_autocast_dtype(device_type) if torch.is_autocast_enabled(device_type) else x.dtype
        with torch.autocast(device_type, enabled=False):
            w = weight.to(dtype)
            valid = targets != -1
            count = valid.sum().clamp(min=1).float()
            loss = torch.zeros((), dtype=torch.float32, device=x.device)
            grad_x = torch.empty_like(x)
            grad_w = torch.zeros_like(weight, dtype=torch.float32)
            for start in range(0, x.size(0), CROSS_ENTROPY_CHUNK_ROWS):
                rows = slice(start, start + CROSS_ENTROPY_CHUNK_ROWS)
                x_chunk, target, keep = x[rows].to(dtype), targets[rows].clamp(min=0), valid[rows]
                logits = (x_chunk @ w.t()).float()
                logsumexp = torch.logsumexp(logits, dim=-1)
                target_logit = logits.gather(1, target[:, None]).squeeze(1)
                loss += torch.where(keep, logsumexp - target_logit, 0.0).sum()
                # d(the chunk's summed loss)/d logits: softmax - one_hot(target), 0 on ignored rows
                grad_logits = torch.exp(logits - logsumexp[:, None])
                grad_logits.scatter_add_(1, target[:, None], torch.full_like(target_logit, -1.0)[:, None])
                grad_logits = torch.where(keep[:, None], grad_logits, 0.0).to(dtype)
                grad_x[rows] = grad_logits @ w
                grad_w += (grad_logits.t() @ x_chunk).float()
        ctx.save_for_backward(grad_x, grad_w, count)
        ctx.weight_dtype = weight.dtype
        return loss / count

    @staticmethod
    def backward(ctx, grad_loss: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, None]:
        grad_x, grad_w, count = ctx.saved_tensors
        scale = grad_loss / count
        return grad_x * scale.to(grad_x.dtype), (grad_w * scale).to(ctx.weight_dtype), None


class CausalSelfAttention(nn.Module):
    def __init__(self, config: GPTConfig, layer_idx: int):
        super().__init__()
        assert config.n_embd % config.n_head == 0
        self.c_attn = nn.Linear(config.n_embd, 3 * config.n_embd, bias=config.bias)
        self.c_proj = nn.Linear(config.n_embd, config.n_embd, bias=config.bias)
        self.resid_dropout = nn.Dropout(config.dropout)
        self.n_head = config.n_head
        self.n_embd = config.n_embd
        self.dropout = config.dropout
        head_dim = config.n_embd // config.n_head
        self.scale = 1.0 / math.sqrt(head_dim)
        if config.scale_attn_by_inverse_layer_idx:
            self.scale /= layer_idx + 1

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)  # (B, nh, T, hs)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        # Flash / memory-efficient kernels on GPU; the causal mask is implicit.
        y = F.scaled_dot_product_attention(
            q, k, v, dropout_p=self.dropout if self.training else 0.0, is_causal=True, scale=self.scale
        )
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


class Block(nn.Module):
    def __init__(self, config: GPTConfig, layer_idx: int):
        super().__init__()
        self.ln_1 = nn.LayerNorm(config.n_embd, bias=config.bias)
        self.attn = CausalSelfAttention(config, layer_idx)
        self.ln_2 = nn.LayerNorm(config.n_embd, bias=config.bias)
        self.mlp = MLP(config)

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
        self.config = config
        self.fused_cross_entropy = fused_cross_entropy
        self.transformer = nn.ModuleDict(
            dict(
                wte=nn.Embedding(config.vocab_size, config.n_embd),
                wpe=nn.Embedding(config.block_size, config.n_embd),
                drop=nn.Dropout(config.dropout),
                h=nn.ModuleList([Block(config, i) for i in range(config.n_layer)]),
                ln_f=nn.LayerNorm(config.n_embd, bias=config.bias),
            )
        )
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        self.tie_weights()

        # GPT-2 initialisation: N(0, 0.02), residual projections scaled by 1/sqrt(2 * n_layer).
        self.apply(self._init_weights)
        for name, p in self.named_parameters():
            if name.endswith("c_proj.weight"):
                torch.nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * config.n_layer))

    def tie_weights(self) -> None:
        """The token embedding and the lm_head share one matrix (GPT-2's weight tying)."""
        self.transformer.wte.weight = self.lm_head.weight

    def _init_weights(self, module: nn.Module) -> None:
        if isinstance(module, nn.Linear):
            torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if module.bias is not None:
                torch.nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)

    def num_params(self, non_embedding: bool = False) -> int:
        """Parameter count (the tied lm_head counted once). With non_embedding,
        the position embedding is left out too, as GPT-2's paper counts."""
        n = sum(p.numel() for p in self.parameters())
        if non_embedding:
            n -= self.transformer.wpe.weight.numel()
        return n

    def forward(
        self, idx: torch.Tensor, targets: torch.Tensor | None = None, all_logits: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Logits and the mean cross-entropy against targets. Without targets
        only the last position's logits are computed (for generation), unless
        all_logits asks for every position's (for scoring continuations). With
        fused_cross_entropy, a training forward (gradients on) returns the loss alone."""
        b, t = idx.size()
        if t > self.config.block_size:
            raise ValueError(f"sequence of length {t} is longer than block_size {self.config.block_size}")
        pos = torch.arange(0, t, dtype=torch.long, device=idx.device)
        x = self.transformer.drop(self.transformer.wte(idx) + self.transformer.wpe(pos))
        for block in self.transformer.h:
            x = block(x)
        x = self.transformer.ln_f(x)
        if targets is None:
            return self.lm_head(x if all_logits else x[:, [-1], :]), None
        if self.fused_cross_entropy and torch.is_grad_enabled():  # training: the loss alone
            return None, LinearCrossEntropy.apply(x.reshape(b * t, -1), self.lm_head.weight, targets.reshape(-1))
        logits = self.lm_head(x)
        loss = F.cross_entropy(logits.view(-1, logits.size(-1)).float(), targets.reshape(-1), ignore_index=-1)
        return logits, loss

    def flops_per_token(self) -> int:
        """Training FLOPs per token (forward + backward), PaLM appendix B."""
        cfg = self.config
        return 6 * self.num_params(non_embedding=True) + 12 * cfg.n_layer * cfg.n_embd * cfg.block_size

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
