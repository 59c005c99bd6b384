# Muon on Semenov et al.'s 720M Llama: their tuned scripts/720m/muon.sh, the 124M's optimizer settings
# (config/llama_124m_muon.py) on the 720M recipe (config/llama_720m.py).
include = ["llama_124m_muon.py", "llama_720m.py"]
out_dir = "out/llama_720m_muon"
wandb_run_name = "llama_720m_muon"
