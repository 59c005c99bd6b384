# SOAP-Muon at the paper's GPT-2 scale: modded-nanogpt's optimization-track record #14 (PR #278; KellerJordan/
# modded-nanogpt at f411b3d, records/track_3_optimization/results/20260504_contra_muon_mlp_soapish): Muon at lr
# 0.0375 (its cell, gpt2_small_soap_muon), momentum 0.95, SOAP's beta2 and shampoo_beta 0.9, the bases refreshed
# every 10 steps, the track's Newton-Schulz (12 iterations of (2, -1.5, 0.5)); AdamW betas 0.8/0.95, eps 1e-10, no
# decay; no warmup, the rate constant for 30% of the run, then linear to 0. The record's Muon weight decay (0.025)
# is never applied (its README: its u/w floor takes its place, which is not SOAP-Muon's and not here): 0.025 here,
# the track's Muon's (record #12). Its per-tensor AdamW rates take lr_1d 3e-3, as NorMuon's (config/paper_normuon.py).
lr_schedule = "wsd"
wsd_decay_frac = 0.7
warmup_iters = 0
min_lr = 0.0

optimizer = "soap-muon"
weight_decay = 0.025
muon_momentum = 0.95
soap_beta2 = 0.9
shampoo_beta = 0.9
precondition_frequency = 10
lr_1d = 3e-3
beta1_1d = 0.8
beta2_1d = 0.95
eps = 1e-10
weight_decay_1d = 0.0
