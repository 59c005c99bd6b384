# Signum at the paper's GPT-2 scale: Semenov et al.'s tuned 124M settings (epfml/llm-optimizer-benchmark at
# fdecd5d, scripts/124m/signum.sh: momentum 0.9, no Nesterov, decoupled weight decay 0.1 on the Linear weights).
optimizer = "signum"
beta1 = 0.9
signum_nesterov = False
weight_decay = 0.1
decay_embeddings = False
