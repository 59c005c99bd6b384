# The CPU mini reproduction on the Llama block (after config/mini.py; MODEL=llama bash scripts/mini_paper.sh):
# config/mini.py's 4 layers of 96 and 256-byte windows as a Llama: rotary embeddings instead of the position
# table, RMSNorm, a SwiGLU MLP of 256 (llm-baselines' rule), no biases, the head tied to the embedding. Each
# optimizer's settings: config/mini_<optimizer>.py, as on the GPT-2 mini testbed.
model = "llama-124m"
