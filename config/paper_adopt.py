# ADOPT at the paper's GPT-2 scale: Semenov et al.'s tuned 124M settings (epfml/llm-optimizer-benchmark at
# fdecd5d, scripts/124m/adopt.sh: betas 0.9/0.999, eps 1e-6, decoupled weight decay 0.1 on the Linear weights).
optimizer = "adopt"
beta1 = 0.9
beta2 = 0.999
eps = 1e-6
weight_decay = 0.1
adopt_decoupled = True
decay_embeddings = False
