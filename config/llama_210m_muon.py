# Muon on Semenov et al.'s 210M Llama: their tuned scripts/210m/muon.sh, the 124M's recipe and settings
# (config/llama_124m_muon.py) on 24 layers, nothing else changed.
include = ["llama_124m_muon.py"]
model = "llama-210m"
out_dir = "out/llama_210m_muon"
wandb_run_name = "llama_210m_muon"
