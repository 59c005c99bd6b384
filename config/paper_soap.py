# SOAP (Vyas et al., 2024) at the paper's GPT-2 scale: the authors' recommendation (betas 0.95/0.95,
# weight decay 0.01, preconditioner refresh every 10 steps; sides over 10,000, GPT-2's 50,304-row
# embedding, not rotated). cells.py's gpt2_<size>_soap builds on it and sets the learning rate.
optimizer = "soap"
beta1 = 0.95
beta2 = 0.95
weight_decay = 0.01
precondition_frequency = 10
decay_embeddings = False  # the official runs' decay groups
