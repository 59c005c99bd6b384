"""
The recipes as rows: CELLS, the paper runs, and MINI_RECIPES, the CPU mini testbed's. Adding an optimizer adds its rows
here (and its recipe files, where its values are more than a row's). Each cell is a model size with an optimizer, by
its name, built on config files (a size's, then an optimizer's recipe) or on another cell, with the few values of its
own. A cell's name stands for a
config file that is not on disk: `torchrun train.py config/gpt2_small_mars.py` and `scripts/run.sh gpt2_small_mars`
run the cell gpt2_small_mars, its out_dir out/gpt2_small_mars and its wandb run the same name. The benchmarks
(bench/recipes.py) and the tests read the table here; the values of a recipe live in its config file.

Each paper cell runs 100k steps of 480 x 1024 tokens (~49B tokens), the Llama's their own schedule; the scripts in
scripts/ pick the dataset, GPU count, micro-batch and token budget. Settings a cell does not set are its files' or
the defaults (config/__init__.py, optim/).
"""

from dataclasses import dataclass
from typing import Any, NamedTuple


class Cell(NamedTuple):
    bases: tuple[str, ...]  # config files in config/ (name.py) or other cells (name), applied in order
    values: dict[str, Any]  # the cell's own, applied last


def cell(*bases: str, **values: Any) -> Cell:
    return Cell(bases, values)


CELLS: dict[str, Cell] = {
    # GPT-2 with the paper's optimizers: the official AGI-Arena/MARS config/train_gpt2_<size>_<optimizer>.py
    # (MARS_M/ for MARS-M and Moonlight)
    "gpt2_small_adamw": cell("gpt2_small.py", "paper_adamw.py", learning_rate=6e-4),
    "gpt2_small_mars": cell("gpt2_small.py", "paper_mars.py", learning_rate=6e-3, lr_1d=3e-3),
    "gpt2_small_muon": cell("gpt2_small.py", "paper_muon.py", learning_rate=2e-2, lr_1d=3e-3),
    "gpt2_small_mars_m": cell("gpt2_small.py", "paper_mars_m.py", learning_rate=6e-3),
    "gpt2_small_moonlight": cell("gpt2_small.py", "paper_moonlight.py", learning_rate=6e-3),
    "gpt2_medium_adamw": cell("gpt2_medium.py", "paper_adamw.py", learning_rate=3e-4),
    "gpt2_medium_mars": cell("gpt2_medium.py", "paper_mars.py", learning_rate=3e-3, lr_1d=1.5e-3),
    "gpt2_medium_muon": cell("gpt2_medium.py", "paper_muon.py", learning_rate=1e-2, lr_1d=1.5e-3),
    "gpt2_medium_mars_m": cell("gpt2_medium.py", "paper_mars_m.py", learning_rate=5e-3, min_lr=6e-5),  # (the default)
    "gpt2_medium_moonlight": cell("gpt2_medium.py", "paper_moonlight.py", learning_rate=5e-3, min_lr=6e-5),
    "gpt2_large_adamw": cell("gpt2_large.py", "paper_adamw.py", learning_rate=2e-4),
    "gpt2_large_mars": cell("gpt2_large.py", "paper_mars.py", learning_rate=2e-3, lr_1d=1e-3),
    "gpt2_large_muon": cell("gpt2_large.py", "paper_muon.py", learning_rate=6.67e-3, lr_1d=1e-3),
    "gpt2_large_mars_m": cell("gpt2_large.py", "paper_mars_m.py", learning_rate=5e-3),
    "gpt2_large_moonlight": cell("gpt2_large.py", "paper_moonlight.py", learning_rate=5e-3),
    "gpt2_xl_adamw": cell("gpt2_xl.py", "paper_adamw.py", learning_rate=2e-4),
    "gpt2_xl_mars": cell("gpt2_xl.py", "paper_mars.py", learning_rate=2e-3, lr_1d=1e-3),
    "gpt2_xl_mars_m": cell("gpt2_xl.py", "paper_mars_m.py", learning_rate=3e-3),
    "gpt2_xl_moonlight": cell("gpt2_xl.py", "paper_moonlight.py", learning_rate=3e-3),
    # the paper's MARS-exact (two gradients per step) and its FineWeb-Edu runs (the 100BT sample, as the official
    # runs: python -m data.prepare fineweb-edu)
    "gpt2_small_mars_exact": cell("gpt2_small_mars", is_approx=False),
    **{f"{name}_fw": cell(name, dataset="fineweb-edu100B") for name in (
        "gpt2_small_adamw", "gpt2_small_mars", "gpt2_small_mars_m", "gpt2_small_moonlight",
        "gpt2_xl_adamw", "gpt2_xl_mars", "gpt2_xl_mars_m", "gpt2_xl_moonlight")},

    # GPT-2 small with the field's baselines at the paper's setting, each with its authors' learning rate where
    # they give one (untuned here: the mini's tuning is results/tune/)
    # Lion: 3x below AdamW's, the authors' advice
    "gpt2_small_lion": cell("gpt2_small.py", "paper_lion.py", learning_rate=2e-4),
    "gpt2_small_nadamw": cell("gpt2_small.py", "paper_nadamw.py", learning_rate=6e-4),  # AdamW's
    "gpt2_small_ademamix": cell("gpt2_small.py", "paper_ademamix.py", learning_rate=6e-4),  # AdamW's
    "gpt2_small_schedule_free_adamw": cell("gpt2_small.py", "paper_schedule_free_adamw.py",
                                           learning_rate=1.2e-3),  # 2x AdamW's: its authors find it takes more
    "gpt2_small_adopt": cell("gpt2_small.py", "paper_adopt.py", learning_rate=6e-4),  # AdamW's
    "gpt2_small_signum": cell("gpt2_small.py", "paper_signum.py", learning_rate=1e-4),  # Lion's scale: a sign update
    "gpt2_small_cautious_adamw": cell("gpt2_small.py", "paper_cautious_adamw.py", learning_rate=6e-4),  # AdamW's
    # Prodigy's learning rate 1 decays to a twentieth, as the paper's AdamW (6e-4 to 3e-5)
    "gpt2_small_prodigy": cell("gpt2_small.py", "paper_prodigy.py", min_lr=0.05),
    # Sophia: its authors' batch (the paper's) and their decay to 1.5e-5 after a 2000-step warmup
    "gpt2_small_sophia": cell("gpt2_small.py", "paper_sophia.py", min_lr=1.5e-5),
    "gpt2_small_adam_mini": cell("gpt2_small.py", "paper_adam_mini.py", learning_rate=6e-4),  # the authors' example
    # its authors' modded-nanogpt GPT-2 small rate at these radii (train_gpt_scion.py)
    "gpt2_small_scion": cell("gpt2_small.py", "paper_scion.py", learning_rate=3.6e-4, min_lr=0.0),
    "gpt2_small_kron": cell("gpt2_small.py", "paper_kron.py", learning_rate=6e-4),  # AdamW's
    "gpt2_small_soap": cell("gpt2_small.py", "paper_soap.py", learning_rate=3e-3),  # the authors' default
    # the 2026 optimizers
    "gpt2_small_normuon": cell("gpt2_small.py", "paper_normuon.py", learning_rate=0.035),
    "gpt2_small_adamuon": cell("gpt2_small.py", "paper_adamuon.py", learning_rate=6e-4),
    "gpt2_small_muonclip": cell("gpt2_small.py", "paper_muonclip.py", learning_rate=6e-3),
    "gpt2_small_dion": cell("gpt2_small.py", "paper_dion.py", learning_rate=0.02),  # the authors' 160M model's
    "gpt2_small_dion2": cell("gpt2_small.py", "paper_dion2.py", learning_rate=0.02),  # the authors' 160M model's
    "gpt2_small_nordion2": cell("gpt2_small_dion2", optimizer="nordion2"),
    # modded-nanogpt's Shampoo run (GPT-2 small, 4150 steps of 524k tokens)
    "gpt2_small_shampoo": cell("gpt2_small.py", "paper_shampoo.py", learning_rate=1.5e-3),
    "gpt2_small_adamh": cell("gpt2_small.py", "paper_adamh.py", learning_rate=0.018),  # the authors' track rate
    "gpt2_small_muonh": cell("gpt2_small.py", "paper_muonh.py", learning_rate=0.018),  # the authors' track rate
    "gpt2_small_soap_muon": cell("gpt2_small.py", "paper_soap_muon.py", learning_rate=0.0375),  # the record's

    # Semenov et al.'s Llama benchmark (epfml/llm-optimizer-benchmark): their tuned scripts/<size>/<optimizer>.sh,
    # the 124M's optimizer settings at every size (AdamW's beta1 0.9 at 210M and 720M)
    "llama_124m_adamw": cell("llama_124m.py", "llama_adamw.py"),
    "llama_124m_mars": cell("llama_124m.py", "llama_mars.py"),
    "llama_124m_muon": cell("llama_124m.py", "llama_muon.py"),
    "llama_210m_adamw": cell("llama_124m_adamw", model="llama-210m", beta1=0.9),
    "llama_210m_mars": cell("llama_124m_mars", model="llama-210m"),
    "llama_210m_muon": cell("llama_124m_muon", model="llama-210m"),
    "llama_720m_adamw": cell("llama_720m.py", "llama_adamw.py", beta1=0.9),
    "llama_720m_mars": cell("llama_720m.py", "llama_mars.py"),
    "llama_720m_muon": cell("llama_720m.py", "llama_muon.py"),
    # ADOPT: lr 1e-3, betas 0.9/0.999, eps 1e-6, decoupled weight decay 0.1
    "llama_124m_adopt": cell("llama_124m.py", "paper_adopt.py", learning_rate=1e-3, min_lr=1e-5),
    # Prodigy: learning rate 1 through their OneCycle cosine, so from and to 0.01
    "llama_124m_prodigy": cell("llama_124m.py", "paper_prodigy.py", learning_rate=1.0, min_lr=0.01),
    # Signum: lr 1e-3, momentum 0.9, no Nesterov, decoupled weight decay 0.1. Their momentum starts as a copy of the
    # weights (a defect: optim/signum.py); signum_momentum_init="parameter" reruns it exactly
    "llama_124m_signum": cell("llama_124m.py", "paper_signum.py", learning_rate=1e-3, min_lr=1e-5),
    # Sophia: lr 1e-3, betas 0.9/0.999, rho 0.04, weight decay 0.1, a Hessian estimate every 10 steps, unclipped.
    # Their estimate takes one micro-batch of 32 sequences with its loss divided by their 8 accumulation steps (its
    # expected g_hat^2 1/8 of the global batch's) and scales h by 480 x 512 tokens whatever their batch: sophia_bs
    # = 480 x 512 / 8 gives this loop's estimate their expected rho bs h
    "llama_124m_sophia": cell("llama_124m.py", "paper_sophia.py", learning_rate=1e-3, min_lr=1e-5, beta1=0.9,
                              beta2=0.999, sophia_rho=0.04, weight_decay=0.1, sophia_clip_hessian_gradient=False,
                              sophia_bs=480 * 512 // 8),
}


# The CPU mini reproduction's recipes, by optimizer (the registry's names): each recipe's config files (or overrides)
# after config/mini.py, the learning rates scripts/mini_sweep.sh tries, and the keys experiments/tune.py tunes beside
# the learning rate and weight decay. The sweep, the tuning, the ladders, the benchmarks' variants (bench/recipes.py)
# and the resume matrix read them here; the values they set live in the config files.


@dataclass(frozen=True)
class MiniRecipe:
    """A run of the CPU mini reproduction: its arguments after config/mini.py, the learning rates
    scripts/mini_sweep.sh tries (its config's rate comes from that sweep, or from scripts/tune_mini.sh for the
    recipes it tuned), and the keys of the optimizer's own that experiments/tune.py tunes beside the learning
    rate and weight decay (its warmup, its second-moment or momentum rate, and what its paper says matters most)."""

    args: str
    learning_rates: tuple[float, ...]
    tune: tuple[str, ...] = ()


MINI_RECIPES: dict[str, dict[str, MiniRecipe]] = {
    "adamw": {"adamw": MiniRecipe("config/mini_adamw.py", (1e-3, 2e-3, 4e-3, 8e-3), ("warmup_iters", "beta1", "beta2"))},
    # MARS-exact first: it is the longest, so parallel runs finish together (four rates: twice the compute per step).
    "mars": {
        "mars_exact": MiniRecipe("config/mini_mars.py config/mini_mars_exact.py", (1.5e-3, 3e-3, 6e-3, 1.2e-2),
                                 ("warmup_iters", "beta2", "gamma")),
        "mars_approx": MiniRecipe("config/mini_mars.py config/mini_mars_approx.py", (1.5e-3, 3e-3, 6e-3, 1.2e-2, 2.4e-2),
                                  ("warmup_iters", "beta2", "gamma")),
    },
    "muon": {"muon": MiniRecipe("config/mini_muon.py", (5e-3, 1e-2, 2e-2, 4e-2, 8e-2), ("warmup_iters", "muon_momentum"))},
    "mars-m": {"mars_m": MiniRecipe("config/mini_mars_m.py", (3e-3, 6e-3, 1.2e-2, 2.4e-2, 4.8e-2),
                                    ("warmup_iters", "beta1", "gamma"))},
    "moonlight": {"moonlight": MiniRecipe("config/mini_moonlight.py", (3e-3, 6e-3, 1.2e-2, 2.4e-2, 4.8e-2),
                                          ("warmup_iters", "beta1"))},
    # the baselines of the 2025 optimizer benchmarks (Wen et al.; Semenov et al.)
    "lion": {"lion": MiniRecipe("config/mini_lion.py", (1e-4, 2e-4, 4e-4, 8e-4, 1.6e-3), ("warmup_iters", "beta2"))},
    "nadamw": {"nadamw": MiniRecipe("config/mini_nadamw.py", (1e-3, 2e-3, 4e-3, 8e-3), ("warmup_iters", "beta2"))},
    "ademamix": {"ademamix": MiniRecipe("config/mini_ademamix.py", (2.5e-4, 5e-4, 1e-3, 2e-3, 4e-3, 8e-3),
                                        ("warmup_iters", "beta3", "alpha"))},
    "schedule-free-adamw": {"schedule_free_adamw": MiniRecipe("config/mini_schedule_free_adamw.py",
                                                              (2e-3, 4e-3, 8e-3, 1.6e-2), ("sf_warmup_steps", "beta2"))},
    "adopt": {"adopt": MiniRecipe("config/mini_adopt.py", (1e-3, 2e-3, 4e-3, 8e-3), ("warmup_iters", "beta2"))},
    "signum": {"signum": MiniRecipe("config/mini_signum.py", (1e-4, 2e-4, 4e-4, 8e-4, 1.6e-3), ("warmup_iters", "beta1"))},
    "cautious-adamw": {"cautious_adamw": MiniRecipe("config/mini_cautious_adamw.py", (1e-3, 2e-3, 4e-3, 8e-3),
                                                    ("warmup_iters", "beta1", "beta2"))},
    # Prodigy's learning_rate multiplies the step size it estimates: 1 is its authors' and the benchmark's.
    "prodigy": {"prodigy": MiniRecipe("config/mini_prodigy.py", (0.125, 0.25, 0.5, 1.0, 2.0),
                                      ("warmup_iters", "prodigy_d_coef"))},
    "sophia": {"sophia": MiniRecipe("config/mini_sophia.py", (2.5e-4, 5e-4, 1e-3, 2e-3, 4e-3), ("warmup_iters", "sophia_rho"))},
    "adam-mini": {"adam_mini": MiniRecipe("config/mini_adam_mini.py", (1e-3, 2e-3, 4e-3, 8e-3), ("warmup_iters", "beta2"))},
    # Scion's learning rate is also its weight decay (the constrained update: p <- (1 - lr) p - ...); the rates of
    # its tied recipe (radii 50 and 3000; the earlier recipe's radii 3 and 10 swept 2.5e-4 to 1.6e-2)
    "scion": {"scion": MiniRecipe("config/mini_scion.py", (1.2e-4, 2.4e-4, 4.8e-4, 9.6e-4, 1.92e-3),
                                  ("warmup_iters", "scion_momentum"))},
    "kron": {"kron": MiniRecipe("config/mini_kron.py", (1e-3, 2e-3, 4e-3, 8e-3, 1.6e-2, 3.2e-2),
                                ("warmup_iters", "beta1", "kron_precond_lr"))},
    "soap": {"soap": MiniRecipe("config/mini_soap.py", (1.5e-3, 3e-3, 6e-3, 1.2e-2, 2.4e-2, 4.8e-2),
                                ("warmup_iters", "beta2", "precondition_frequency"))},
    # the optimizers that lead the field in 2026
    "normuon": {"normuon": MiniRecipe("config/mini_normuon.py", (1e-2, 2e-2, 4e-2, 8e-2, 1.6e-1),
                                      ("warmup_iters", "muon_momentum", "normuon_beta2"))},
    "adamuon": {"adamuon": MiniRecipe("config/mini_adamuon.py", (1.5e-3, 3e-3, 6e-3, 1.2e-2, 2.4e-2, 4.8e-2, 9.6e-2),
                                      ("warmup_iters", "muon_momentum"))},
    # MuonClip is Moonlight until a head's logit passes tau: Moonlight's tuned recipe, QK-clip at K2's tau.
    "muonclip": {"muonclip": MiniRecipe("config/mini_muonclip.py", (1.2e-2, 2.4e-2, 3.394e-2, 4.8e-2, 9.6e-2),
                                        ("warmup_iters", "beta1", "qk_clip_tau"))},
    "dion": {"dion": MiniRecipe("config/mini_dion.py", (5e-3, 1e-2, 2e-2, 4e-2, 8e-2),
                                ("warmup_iters", "dion_momentum", "rank_fraction"))},
    "dion2": {"dion2": MiniRecipe("config/mini_dion2.py", (5e-3, 1e-2, 2e-2, 4e-2, 8e-2),
                                  ("warmup_iters", "dion_momentum", "ortho_fraction"))},
    "nordion2": {"nordion2": MiniRecipe("config/mini_nordion2.py", (5e-3, 1e-2, 2e-2, 4e-2, 8e-2),
                                        ("warmup_iters", "dion_momentum", "ortho_fraction", "normuon_beta2"))},
    "shampoo": {"shampoo": MiniRecipe("config/mini_shampoo.py", (3.75e-4, 7.5e-4, 1.5e-3, 3e-3, 6e-3, 1.2e-2, 2.4e-2),
                                      ("warmup_iters", "beta2", "precondition_frequency"))},
    # the hyperball optimizers: learning_rate is the hyperball's (a step of lr times each matrix's norm)
    "adamh": {"adamh": MiniRecipe("config/mini_adamh.py", (4.5e-3, 9e-3, 1.8e-2, 3.6e-2, 7.2e-2),
                                  ("warmup_iters", "adam_lr", "beta2"))},
    "muonh": {"muonh": MiniRecipe("config/mini_muonh.py", (4.5e-3, 9e-3, 1.8e-2, 3.6e-2, 7.2e-2),
                                  ("warmup_iters", "adam_lr", "muon_momentum"))},
    "soap-muon": {"soap_muon": MiniRecipe("config/mini_soap_muon.py", (1e-2, 2e-2, 4e-2, 8e-2, 1.6e-1),
                                          ("warmup_iters", "muon_momentum", "soap_beta2"))},
}


def mini_recipes() -> dict[str, MiniRecipe]:
    """Every optimizer's mini-reproduction recipes by recipe name."""
    return {name: recipe for recipes in MINI_RECIPES.values() for name, recipe in recipes.items()}
