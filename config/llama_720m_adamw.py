# AdamW on Semenov et al.'s 720M Llama: their tuned scripts/720m/adamw.sh, the 124M's optimizer settings
# (config/llama_124m_adamw.py, beta1 0.9) on the 720M recipe (config/llama_720m.py).
include = ["llama_124m_adamw.py", "llama_720m.py"]
out_dir = "out/llama_720m_adamw"
wandb_run_name = "llama_720m_adamw"
beta1 = 0.9  # their 210M and 720M AdamW scripts' beta1 (0.8 at 124M)
