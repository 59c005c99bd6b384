# MuonClip (Kimi K2, arXiv 2507.20534) at the paper's GPT-2 scale: the Moonlight recipe (config/paper_moonlight.py,
# the official MARS-M repository's) with QK-clip at K2's tau, 100 (K2's own recipe is a 1T-parameter MoE's: no GPT-2
# recipe is published). cells.py's gpt2_small_muonclip builds on it and sets the learning rate.
optimizer = "muonclip"
weight_decay = 1e-1
beta1 = 0.95
qk_clip_tau = 100.0
