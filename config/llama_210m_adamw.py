# AdamW on Semenov et al.'s 210M Llama: their tuned scripts/210m/adamw.sh, the 124M's recipe and settings
# (config/llama_124m_adamw.py) on 24 layers, AdamW's beta1 0.9.
include = ["llama_124m_adamw.py"]
model = "llama-210m"
out_dir = "out/llama_210m_adamw"
wandb_run_name = "llama_210m_adamw"
beta1 = 0.9  # their 210M and 720M AdamW scripts' beta1 (0.8 at 124M)
