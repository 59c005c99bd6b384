# AdaMuon for the CPU mini reproduction (after config/mini.py): the authors' split (the blocks' matrices on
# AdaMuon; the embeddings on AdamW with weight decay, the 1-D parameters without; one learning rate), momentum
# 0.95 and weight decay 0.1. Its update has AdamW's RMS (0.2 sqrt(rows x cols) / ||A||_F), so the rate starts at
# AdamW's tuned mini rate; it comes from the sweep, which has not run yet.
optimizer = "adamuon"
learning_rate = 6e-3
weight_decay = 0.1
muon_momentum = 0.95
beta1_1d = 0.9
beta2_1d = 0.95
