# Dion for the CPU mini reproduction (after config/mini.py): the authors' GPT recipe (microsoft/dion at 0a059a4,
# configs/dion_160m.yaml: mu 0.95, weight decay 0.01, rank fraction 0.5, AdamW on the embeddings and the 1-D
# parameters at the same rate, undecayed, betas 0.9/0.95 (what their Dion reads: optim/dion.py); constant, then
# linear to 0 over the last 20%, no warmup). The learning rate is the mini sweep's best (results/mini_2026/sweep.md,
# run with betas 0.95/0.98 on that AdamW before the fix; the authors' 0.02 is second).
include = ["paper_dion.py"]  # then the mini's own values
learning_rate = 4e-2
# the mini's setting where the paper's recipe differs (config/mini.py's, or the default)
grad_clip = 1.0
grad_multiplier = 4.0
