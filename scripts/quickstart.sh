#!/usr/bin/env bash
# The README's first command: install, prepare the standard-library corpus, train a small GPT on CPU.
# Extra arguments go to train.py (e.g. --max_iters=100).
set -euo pipefail
cd "$(dirname "$0")/.."
if ! python3 -c "import torch" 2>/dev/null; then   # (keep a CUDA build if there is one)
    echo "installing torch 2.13.0 (the CPU build, about 200 MB) ..."
    python3 -m pip install torch==2.13.0
fi
echo "installing requirements.txt (a minute or two on a fresh machine; quiet unless something fails) ..."
python3 -m pip install --quiet -r requirements.txt
[[ -f data/stdlib/stdlib_train_000001.bin ]] || python3 -m data.quickstart
python3 train.py config/quickstart.py --out_dir="out/quickstart/$(date +%Y%m%d-%H%M%S)" "$@"
