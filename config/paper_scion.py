# Scion at the paper's GPT-2 scale: its authors' GPT recipe (LIONS-EPFL/scion at f58a393,
# examples/shallow-nanogpt "Mixed" with the Sign first layer: momentum 0.1, radii 1 / 3 / 10 for the first layer,
# the blocks and the output layer, the constrained update). Wen et al.'s Scion is another formulation (AdamW on
# the embeddings and 1-D parameters, decoupled weight decay): see docs/optimizers.md.
optimizer = "scion"
scion_momentum = 0.1
scion_input_scale = 1.0
scion_hidden_scale = 3.0
scion_output_scale = 10.0
scion_unconstrained = False
grad_multiplier = 1.0
