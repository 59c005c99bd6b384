# Dion2 for the CPU mini reproduction (after config/mini.py): the authors' GPT recipe (config/paper_dion2.py). The
# learning rate is the authors' 0.02 until the mini's sweep and tuning give theirs (results/tune/).
include = ["paper_dion2.py"]  # then the mini's own values
learning_rate = 2e-2
# the mini's setting where the paper's recipe differs (config/mini.py's, or the default)
grad_clip = 1.0
grad_multiplier = 4.0
