# Scion for the CPU mini reproduction (after config/mini.py): its authors' recipe for a GPT whose embedding is tied
# to its head, as ours is (LIONS-EPFL/scion, examples/modded-nanogpt/train_gpt_scion.py: momentum 0.1, radius 50 for
# the blocks' matrices, 3000 for the tied matrix, no Scion.init(), constrained; the position table, which their GPT
# does not have, the first layer's radius 1 of their shallow GPT). Seed 1 at each recipe's best rate
# (results/mini/scion_recipes.md): this 2.180 at 4.8e-4; their untied shallow GPT's radii 1 / 3 / 10 2.302 at 8e-3,
# and with its Scion.init() (scion_init=True) 2.506 at 1.6e-2. Its warmup and momentum then tuned by
# scripts/tune_mini.sh (results/tune/tuning.md; before, config/mini.py's 25 steps and the authors' 0.1).
include = ["paper_scion.py"]  # then the mini's own values
learning_rate = 4.8e-4
warmup_iters = 12
scion_momentum = 0.2
