# MARS-AdamW (approx) on Semenov et al.'s 210M Llama: their tuned scripts/210m/mars.sh, the 124M's recipe and
# settings (config/llama_124m_mars.py) on 24 layers, nothing else changed.
include = ["llama_124m_mars.py"]
model = "llama-210m"
out_dir = "out/llama_210m_mars"
wandb_run_name = "llama_210m_mars"
