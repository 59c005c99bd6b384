# MuonClip for the CPU mini reproduction (after config/mini.py): Moonlight's tuned recipe (config/mini_moonlight.py)
# with QK-clip at Kimi K2's tau, 100, and Algorithm 1's plain momentum (Moonlight's recipe was tuned with Nesterov's);
# until a head's logit passes tau the run is Moonlight's step with plain momentum.
include = ["paper_muonclip.py"]  # then the mini's own values
learning_rate = 3.394e-2
weight_decay = 1e-3
warmup_iters = 0
beta1 = 0.9
