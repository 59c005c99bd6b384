"""
The CPU mini reproduction's recipes, by optimizer (the registry's names, optim.OPTIMIZERS): each recipe's config
files after config/mini.py, the learning rates scripts/mini_sweep.sh tries, and the keys experiments/tune.py
tunes beside the learning rate and weight decay. The sweep, the tuning, the ladders, the benchmarks' variants
(bench/recipes.py) and the resume matrix read them here; the values they set live in the config files.
"""

from dataclasses import dataclass


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
    "shampoo": {"shampoo": MiniRecipe("config/mini_shampoo.py", (3.75e-4, 7.5e-4, 1.5e-3, 3e-3, 6e-3, 1.2e-2, 2.4e-2),
                                      ("warmup_iters", "beta2", "precondition_frequency"))},
    # the hyperball optimizers: learning_rate is the hyperball's (a step of lr times each matrix's norm)
    "adamh": {"adamh": MiniRecipe("config/mini_adamh.py", (4.5e-3, 9e-3, 1.8e-2, 3.6e-2, 7.2e-2),
                                  ("warmup_iters", "adam_lr", "beta2"))},
    "muonh": {"muonh": MiniRecipe("config/mini_muonh.py", (4.5e-3, 9e-3, 1.8e-2, 3.6e-2, 7.2e-2),
                                  ("warmup_iters", "adam_lr", "muon_momentum"))},
}


def mini_recipes() -> dict[str, MiniRecipe]:
    """Every optimizer's mini-reproduction recipes by recipe name."""
    return {name: recipe for recipes in MINI_RECIPES.values() for name, recipe in recipes.items()}
