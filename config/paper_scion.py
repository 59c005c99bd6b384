# Scion at the paper's GPT-2 scale: its authors' recipe for a GPT whose embedding is tied to its head, as GPT-2's is
# (LIONS-EPFL/scion at f58a393, examples/modded-nanogpt/train_gpt_scion.py: momentum 0.1, radius 50 for the blocks'
# matrices, 3000 for the tied matrix, no Scion.init(), the constrained update; the position table, which their GPT
# does not have, at the first layer's radius 1 of their shallow GPT). For an untied model their shallow GPT's recipe
# is theirs: radii 1 / 3 / 10 with scion_init=True. Wen et al.'s Scion is another formulation (AdamW on the
# embeddings and 1-D parameters, decoupled weight decay): see docs/optimizers.md.
optimizer = "scion"
scion_momentum = 0.1
scion_input_scale = 1.0
scion_hidden_scale = 50.0
scion_output_scale = 3000.0
scion_unconstrained = False
scion_init = False
grad_multiplier = 1.0
