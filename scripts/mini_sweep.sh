#!/usr/bin/env bash
# The learning-rate sweep behind the mini reproduction's settings (config/mini_*.py): every recipe of
# the optimizer registry's mini reproduction (AdamW, Muon, MARS-approx, MARS-exact, MARS-M, Moonlight)
# on the standard-library corpus as bytes (config/mini.py), one seed (SEEDS), JOBS runs at a time on one
# CPU thread each: about 25 minutes on 2 free cores. Results in out/mini_sweep/: sweep.md, sweep.csv,
# sweep.png, a folder per run. Rerunning resumes what is not done. DRY_RUN=1: 2 tiny steps, first rate only.
source "$(dirname "$0")/common.sh"
cd "$REPO"
positive_int JOBS "${JOBS:-2}"
grid=(adamw:learning_rate=1e-3,2e-3,4e-3,8e-3
      muon:learning_rate=5e-3,1e-2,2e-2,4e-2,8e-2
      mars_approx:learning_rate=1.5e-3,3e-3,6e-3,1.2e-2,2.4e-2
      mars_exact:learning_rate=1.5e-3,3e-3,6e-3,1.2e-2  # twice the compute per step: four rates
      mars_m:learning_rate=3e-3,6e-3,1.2e-2,2.4e-2,4.8e-2
      moonlight:learning_rate=3e-3,6e-3,1.2e-2,2.4e-2,4.8e-2)
extra=()
if [[ "${DRY_RUN:-0}" == 1 ]]; then
    grid=("${grid[@]%%,*}")  # the first rate of each
    dry_run_args 1
    extra=("${DRY_RUN_ARGS[@]}")
else
    [[ -f data/stdlib_bytes/stdlib_train_000001.bin ]] || python3 -m data.quickstart --tokenizer bytes
fi
python3 -m scripts.sweep "$(out_root)/mini_sweep" config/mini.py --recipes mini --seeds "${SEEDS:-1}" \
    --jobs "${JOBS:-2}" "${grid[@]/#/--grid=}" "${extra[@]}"
