# MuonH (Wen et al., Fantastic Pretraining Optimizers 2.1: Hyperball Optimization) at the paper's GPT-2 scale: the
# authors' modded-nanogpt optimization-track recipe (records/track_3_optimization/results/20260430_muonh/
# train_gpt_simple_muonh.py at f411b3d) as far as our settings express it: AdamH's recipe (config/paper_adamh.py:
# the same AdamW side, schedule shape and no gradient clipping) with MuonH, momentum 0.95, Nesterov, on the blocks'
# matrices and no warmup, its Newton-Schulz 12 iterations of (2, -1.5, 0.5) on X / (||X|| + 1e-7) (marin's: the
# quintic, 5 iterations, 1e-8). Left out: what paper_adamh.py leaves out (docs/optimizers.md, AdamH and MuonH). cells.py's gpt2_<size>_muonh builds on it and sets the learning rate.
include = ["paper_adamh.py"]
optimizer = "muonh"
muon_momentum = 0.95
muon_nesterov = True
ns_coefficients = "simple"
ns_steps = 12
muon_eps = 1e-7
warmup_iters = 0
