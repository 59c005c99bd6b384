# Semenov et al.'s tuned AdamW for their Llama (scripts/124m/adamw.sh: lr 1e-3, betas 0.8/0.999, wd 0.1), at
# every size: config/cells.py puts it on config/llama_124m.py or llama_720m.py (their 210M and 720M: beta1 0.9).
optimizer = "adamw"
learning_rate = 1e-3
min_lr = 1e-5
weight_decay = 0.1
beta1 = 0.8
beta2 = 0.999
decay_embeddings = False  # their groups: decay on the Linear weights only (not the tied embedding)
