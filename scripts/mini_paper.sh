#!/usr/bin/env bash
# The mini reproduction (the project's CPU demonstration): every recipe of the optimizer registry's mini
# reproduction (AdamW, Muon, MARS-approx, MARS-exact, MARS-M, Moonlight and the 2025 benchmarks'
# baselines: python -c "from config.cells import mini_recipes; print(*mini_recipes())") on the standard-library corpus as
# bytes (config/mini.py: 1.05M tokens per run), each at its recipe's settings (config/mini_*.py: the
# learning rate scripts/mini_sweep.sh chose, or every setting scripts/tune_mini.sh tuned, for the recipes
# it has), for three seeds (SEEDS), JOBS runs at a time on one thread each: about 40 minutes per 11
# recipes on 2 free cores. Runs in
# out/mini_paper/<recipe>/base/seed<N>/; report.py's table (mean ± std, Welch's t-test) and plots in
# out/mini_paper/report/. Rerunning resumes what is not done.
# MODEL=llama: the same on the Llama block (config/mini_llama.py), in out/mini_paper_llama/.
# RECIPES=adopt,signum: only those recipes (the registry's mini recipe names; the sweep's tables then hold
# only them, while the report reads every run in the folder).
# DRY_RUN=1: 2 tiny steps of each.
source "$(dirname "$0")/common.sh"
cd "$REPO"
positive_int JOBS "${JOBS:-2}"
extra=()
if [[ "${DRY_RUN:-0}" == 1 ]]; then
    dry_run_args 1
    extra=("${DRY_RUN_ARGS[@]}")
else
    [[ -f data/stdlib_bytes/stdlib_train_000001.bin ]] || python3 -m data.quickstart --tokenizer bytes
fi
case "${MODEL:-gpt2}" in
    gpt2) base=(config/mini.py) folder="$(out_root)/mini_paper" ;;
    llama) base=(config/mini.py config/mini_llama.py) folder="$(out_root)/mini_paper_llama" ;;
    *) echo "error: MODEL must be gpt2 or llama, got '$MODEL'" >&2; exit 2 ;;
esac
python3 -m experiments.sweep "$folder" "${base[@]}" --recipes "mini${RECIPES:+:$RECIPES}" --seeds "${SEEDS:-1,2,3}" --jobs "${JOBS:-2}" \
    "${extra[@]}"
python3 -m experiments.report "$folder" --out "$folder/report"
