# Dion for the CPU mini reproduction (after config/mini.py): the authors' GPT recipe (microsoft/dion at 0a059a4,
# configs/dion_160m.yaml: mu 0.95, weight decay 0.01, rank fraction 0.5, AdamW on the embeddings and the 1-D
# parameters at the same rate, undecayed, betas 0.9/0.95 (what their Dion reads: optim/dion.py); constant, then
# linear to 0 over the last 20%, no warmup). The learning rate is the mini sweep's best (results/mini_2026/sweep.md,
# run with betas 0.95/0.98 on that AdamW before the fix; the authors' 0.02 is second).
optimizer = "dion"
learning_rate = 4e-2
weight_decay = 0.01
dion_momentum = 0.95
rank_fraction = 0.5
beta1_1d = 0.9
beta2_1d = 0.95
warmup_iters = 0
lr_schedule = "wsd"
wsd_decay_frac = 0.2
