# SOAP for the CPU mini reproduction (after config/mini.py): the authors' beta1 0.95 and preconditioner
# refresh every 10 steps, the learning rate from the sweep; the weight decay and beta2 tuned by
# scripts/tune_mini.sh (results/tune/tuning.md; before tuning, the authors' 0.01 and 0.95).
include = ["paper_soap.py"]  # then the mini's own values
learning_rate = 2.4e-2
weight_decay = 1e-3
beta2 = 0.98
