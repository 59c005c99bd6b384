# AdaMuon for the CPU mini reproduction (after config/mini.py): the authors' split (the blocks' matrices on
# AdaMuon; the embeddings on AdamW with weight decay, the 1-D parameters without; one learning rate), momentum
# 0.95 and weight decay 0.1. The learning rate is the mini
# sweep's best (results/mini_2026/sweep.md: seed 1 at each rate of config/cells.py's grid).
include = ["paper_adamuon.py"]  # then the mini's own values
learning_rate = 2.4e-2
# the mini's setting where the paper's recipe differs (config/mini.py's, or the default)
lr_schedule = "cosine"
warmup_iters = 25
