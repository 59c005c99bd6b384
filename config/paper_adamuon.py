# AdaMuon (Si et al., 2025) at the paper's GPT-2 scale: the authors' recipe, Chongjie-Si/AdaMuon at 369f0b3
# (gpt2/config/small.py, gpt2/models/train.py, gpt2/models/model.py). cells.py's gpt2_<size>_adamuon builds on it
# and sets the learning rate.

# schedule: the authors' get_lr, linear warmup over 2000 steps from 0, then constant (their min_lr is unused)
lr_schedule = "constant"
warmup_iters = 2000

# optimizer: AdaMuon on the blocks' matrices (momentum 0.95, Nesterov, eps 1e-8); the embeddings and the tied head
# on torch's AdamW with weight_decay, the 1-D parameters on it without; one learning rate for all
optimizer = "adamuon"
weight_decay = 1e-1
muon_momentum = 0.95
beta1_1d = 0.9
beta2_1d = 0.95
