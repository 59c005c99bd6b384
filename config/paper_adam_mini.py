# Adam-mini at the paper's GPT-2 scale: Wen et al.'s tuned values for their 130M model at 1x Chinchilla
# (marin-community/marin, experiments/optimizer_sweep/Analysis/PhaseI/tex/hyperparam_tables_mini.tex: betas
# 0.9/0.98, eps 1e-15, weight decay 0.1, grad clip 1; their peak lr 8e-3 is for their batch of 128 x 4096), with the
# package's blocks and decay groups (every weight but the norms' and the biases, the embeddings included).
optimizer = "adam-mini"
beta1 = 0.9
beta2 = 0.98
eps = 1e-15
weight_decay = 0.1
decay_embeddings = True
