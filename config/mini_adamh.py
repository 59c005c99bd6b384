# AdamH for the CPU mini reproduction (after config/mini.py): the modded-nanogpt optimization track's AdamH
# recipe (records/track_3_optimization/results/20260430_adamh) shrunk: AdamH with betas 0.9/0.95 on the blocks'
# matrices, warmed up over ~5% of the run (its 250 of 4875 steps) then decayed linearly to 0 over the whole run;
# Adam on the rest (the tied embedding, the norms) with betas 0.8/0.95, eps 1e-10, no weight decay, at lr 3e-3
# (Muon's lr_1d here). The learning rate is the hyperball's (each step moves a matrix by lr times its norm): the mini
# sweep's best (results/mini_2026/sweep.md; the authors' 0.018 is third of five).
include = ["paper_adamh.py"]  # then the mini's own values
learning_rate = 3.6e-2
warmup_iters = 13
adam_lr = 3e-3
# the mini's setting where the paper's recipe differs (config/mini.py's, or the default)
grad_clip = 1.0
