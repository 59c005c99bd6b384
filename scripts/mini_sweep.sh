#!/usr/bin/env bash
# The learning-rate sweep behind the mini reproduction's settings (config/mini_*.py): every recipe of
# the optimizer registry's mini reproduction (AdamW, Muon, MARS-approx, MARS-exact, MARS-M, Moonlight,
# Lion, NAdamW, AdEMAMix, Schedule-Free AdamW, SOAP) at the learning rates the registry lists for it, on the
# standard-library corpus as bytes (config/mini.py), one seed (SEEDS), JOBS runs at a time on one CPU
# thread each: about 45 minutes on 2 free cores. Results in out/mini_sweep/: sweep.md, sweep.csv,
# sweep.png, a folder per run. Rerunning resumes what is not done. RECIPES=adopt,signum: only those recipes
# (the tables then hold only them; a full rerun rewrites them from every finished run, training none again).
# DRY_RUN=1: 2 tiny steps, first rate only.
source "$(dirname "$0")/common.sh"
cd "$REPO"
positive_int JOBS "${JOBS:-2}"
extra=(--mini-grid)
if [[ "${DRY_RUN:-0}" == 1 ]]; then
    dry_run_args 1  # each recipe at its config's rate
    extra=("${DRY_RUN_ARGS[@]}")
else
    [[ -f data/stdlib_bytes/stdlib_train_000001.bin ]] || python3 -m data.quickstart --tokenizer bytes
fi
python3 -m experiments.sweep "$(out_root)/mini_sweep" config/mini.py --recipes "mini${RECIPES:+:$RECIPES}" --seeds "${SEEDS:-1}" \
    --jobs "${JOBS:-2}" "${extra[@]}"
