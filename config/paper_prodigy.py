# Prodigy at the paper's GPT-2 scale: Semenov et al.'s tuned 124M settings (epfml/llm-optimizer-benchmark at
# fdecd5d, scripts/124m/prodigy.sh: learning rate 1, the multiplier of its own step-size estimate; betas
# 0.9/0.999 with bias correction; decoupled weight decay 0.1 on the Linear weights; beta3 sqrt(beta2), d0 1e-6,
# d_coef 1, the authors' defaults).
optimizer = "prodigy"
learning_rate = 1.0
beta1 = 0.9
beta2 = 0.999
weight_decay = 0.1
prodigy_decouple = True
prodigy_bias_correction = True
decay_embeddings = False
