# MuonH for the CPU mini reproduction (after config/mini.py): the modded-nanogpt optimization track's MuonH
# recipe (records/track_3_optimization/results/20260430_muonh) shrunk: MuonH (momentum 0.95, Nesterov) on the
# blocks' matrices, no warmup, decayed linearly to 0 over the whole run; Adam on the rest (the tied embedding,
# the norms) with betas 0.8/0.95, eps 1e-10, no weight decay, at lr 3e-3 (Muon's lr_1d here). The learning rate
# is the hyperball's (each step moves a matrix by lr times its norm): the mini sweep's best
# (results/mini_2026/sweep.md; 0.072 within 0.002 of it, the authors' 0.018 third).
include = ["paper_muonh.py"]  # then the mini's own values
learning_rate = 3.6e-2
adam_lr = 3e-3
# the mini's setting where the paper's recipe differs (config/mini.py's, or the default)
grad_clip = 1.0
muon_eps = 1e-08
ns_coefficients = "quintic"
ns_steps = 5
