# AdamH (Wen et al., Fantastic Pretraining Optimizers 2.1: Hyperball Optimization) at the paper's GPT-2 scale: the
# authors' modded-nanogpt optimization-track recipe (records/track_3_optimization/results/20260430_adamh, the
# script logged in 7533dd87-107f-4a4f-8229-acbec0fb00ac.txt, at f411b3d) as far as our settings express it: AdamH
# with betas 0.9/0.95, eps 1e-8 on the blocks' matrices, linear warmup over 250 steps then linear decay to 0 over
# the whole run (its cooldown_frac 1.0); AdamW without weight decay, betas 0.8/0.95, eps 1e-10 on the rest, no
# gradient clipping. Left out (docs/optimizers.md, AdamH): its Adam side's three rates (embedding 0.3, head 1/320,
# vectors 0.01; here one adam_lr: the head's, the tied matrix being our output layer) and that side's shorter
# cooldown (the last 40% of the run; here the one schedule of every group), its per-module init (a model-init
# difference: the hyperball keeps each matrix at its initial norm, so GPT-2's init sets different radii) and its
# zero-initialised head. cells.py's gpt2_<size>_adamh builds on it and sets the learning rate; config/paper_muonh.py
# takes its Adam side and schedule.
optimizer = "adamh"
beta1 = 0.9
beta2 = 0.95
eps = 1e-8
adam_lr = 3.125e-3  # 1/320
adam_beta1 = 0.8
adam_beta2 = 0.95
adam_eps = 1e-10
adam_weight_decay = 0.0
lr_schedule = "wsd"
wsd_decay_frac = 1.0
warmup_iters = 250
min_lr = 0.0
grad_clip = 0.0
