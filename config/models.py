"""
The models' settings: a GPT's architecture and shape (GPTConfig), the components each architecture has, and the
presets, which pick the architecture and the shape (docs/models.md gives each one's source). model.py builds the
network from a GPTConfig; config/__init__.py reads a run's model keys against these.
"""

from dataclasses import dataclass


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
    # additionally by i + 1 (Hugging Face GPT-2's flag of the same name). GPT-2 only.
    scale_attn_by_inverse_layer_idx: bool = False
    # The architecture and what only a Llama reads (set by the presets, not by configs)
    architecture: str = "gpt2"  # "gpt2" | "llama"
    mlp_ratio: int = 0  # llama: the SwiGLU hidden size in n_embd's; 0: llm-baselines' rule (swiglu_hidden)
    rope_theta: float = 10000.0
    norm_eps: float = 1e-5  # the norms' (GPT-2's LayerNorm, a Llama's RMSNorm)
    tie_embeddings: bool = True  # the lm_head is the token embedding (GPT-2's always is)
    # One component of the other architecture swapped in (the GPT-2 against Llama study, docs/scaling.md); "" is the
    # architecture's own (components())
    positions: str = ""  # "learned": GPT-2's position table | "rope": a Llama's rotary embeddings
    norm: str = ""  # "layernorm" (GPT-2's) | "rmsnorm" (a Llama's)
    mlp: str = ""  # "gelu": GPT-2's 4 n_embd GELU MLP | "swiglu": a Llama's
    init: str = "normal"  # "normal": N(0, 0.02), residual projections / sqrt(2 n_layer); "fan_in": levanter's
    # "sp": the standard parametrization; "mup": the maximal-update parametrization relative to mup_base_width
    # (equal to sp at that width; the per-layer learning rates are the optimizer's: optim.build_optimizer)
    parametrization: str = "sp"
    mup_base_width: int = 0  # mup: the width (n_embd) its hyperparameters were tuned at

    def width_multiplier(self) -> float:
        """mup's m = n_embd / mup_base_width (1 under sp): hidden init std / sqrt(m), attention's logits and the
        output logits / m relative to sp, hidden learning rates as the optimizer's rule scales them."""
        return self.n_embd / self.mup_base_width if self.parametrization == "mup" else 1.0


ARCHITECTURE_NAMES = {"gpt2": "GPT-2", "llama": "Llama"}
ARCHITECTURES = tuple(ARCHITECTURE_NAMES)
# each architecture's own components, and the choices of each
OWN_COMPONENTS = {"gpt2": dict(positions="learned", norm="layernorm", mlp="gelu"),
                  "llama": dict(positions="rope", norm="rmsnorm", mlp="swiglu")}
COMPONENTS = {name: ("", *{own[name] for own in OWN_COMPONENTS.values()}) for name in OWN_COMPONENTS["gpt2"]}
INITS = ("normal", "fan_in")
PARAMETRIZATIONS = ("sp", "mup")

# Each preset: the architecture and its shape. GPT-2: the MARS paper's four sizes. Llama: Semenov et al.'s
# (epfml/llm-optimizer-benchmark scripts/{124m,210m,720m}) and Wen et al.'s (marin-community/marin
# marin/optimizer_sweep/models.py, untied and with levanter's initialisation); docs/models.md cites each.
PRESETS: dict[str, dict] = {
    "small": dict(n_layer=12, n_head=12, n_embd=768),  # 124M
    "medium": dict(n_layer=24, n_head=16, n_embd=1024),  # 350M
    "large": dict(n_layer=36, n_head=20, n_embd=1280),  # 774M
    "xl": dict(n_layer=48, n_head=25, n_embd=1600),  # 1558M
    "llama-124m": dict(architecture="llama", n_layer=12, n_head=12, n_embd=768),  # 123.59M
    "llama-210m": dict(architecture="llama", n_layer=24, n_head=12, n_embd=768),  # 208.54M
    "llama-720m": dict(architecture="llama", n_layer=12, n_head=16, n_embd=2048),  # 719.64M
    **{f"llama-{size}": dict(architecture="llama", n_layer=32, n_head=n_embd // 64, n_embd=n_embd,
                             mlp_ratio=4, tie_embeddings=False, init="fan_in")
       for size, n_embd in (("130m", 512), ("300m", 768), ("520m", 1024), ("1.2b", 1536))},
}


def components(config: GPTConfig) -> dict[str, str]:
    """The model's positions, norm and MLP: its architecture's own, but where the config swaps one in."""
    return {name: getattr(config, name) or own for name, own in OWN_COMPONENTS[config.architecture].items()}
