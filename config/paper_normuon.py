# NorMuon (Li et al., 2025) at the paper's GPT-2 scale. Its authors' repository (zichongli5/NorMuon) publishes the
# optimizer but no training recipe; this is the closest published one, modded-nanogpt's optimization-track run by
# NorMuon's author (records/track_3_optimization/results/20260503_normuon): NorMuon at lr 0.035 (its cell, gpt2_small_normuon)
# with weight decay 0.025, momentum 0.95, beta2 0.95; AdamW betas 0.8/0.95, eps 1e-10, no decay; no warmup, the
# rate constant for 30% of the run, then linear to 0. Its per-tensor AdamW rates (embedding 0.3, untied head
# 1/320, scalars 0.01) do not carry to this model's tied embedding and head: those and the 1-D parameters take
# lr_1d 3e-3, as Muon's paper recipe (config/paper_muon.py).
lr_schedule = "wsd"
wsd_decay_frac = 0.7
warmup_iters = 0
min_lr = 0.0

optimizer = "normuon"
weight_decay = 0.025
muon_momentum = 0.95
normuon_beta2 = 0.95
lr_1d = 3e-3
beta1_1d = 0.8
beta2_1d = 0.95
eps = 1e-10
weight_decay_1d = 0.0
