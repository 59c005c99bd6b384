# GPT-2 medium (355M): the settings every paper run of this size shares (cells.py's
# gpt2_medium_<optimizer> builds on this file, then its optimizer's config/paper_<optimizer>.py).
dataset = "openwebtext"

# model: GPT-2 medium, without biases, attention logits of layer i also divided by i + 1 (as the official runs)
model = "medium"
bias = False
scale_attn_by_inverse_layer_idx = True

# batch: 480 sequences of 1024 tokens per step on any number of GPUs. The official scripts sum,
# rather than average, their 4 per-GPU micro-batches: the gradient they clip and step on is
# 4 x the batch mean, kept here whatever the GPU count or micro-batch.
grad_multiplier = 4.0
micro_batch_size = 15  # sequences per GPU per micro-step: what fits an 80 GB card

# evaluation and logging
eval_sequences = 3000  # fixed windows; the official code averages 200 random batches of its micro-batch
compile = True
