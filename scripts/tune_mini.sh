#!/usr/bin/env bash
# Phase-1 tuning of the mini reproduction's recipes as Wen et al. (2025) tune (python -m experiments.tune: coordinate
# descent on seed 1 over the learning rate, weight decay, warmup, the second-moment or momentum rate and each
# optimizer's own keys, until no move beats the seed noise; then seeds 2-4 and the 0.5x/2x sensitivity), AdamW
# first and given at least as many runs as any other. RECIPES: which (default: the issue's seven), JOBS runs at a
# time on one thread each. Results in out/mini_tune/: tuning.md, tuning.csv, tuned.json, a folder per run.
# Rerunning resumes what is not done; to go on from the committed results, unpack them first:
#     mkdir -p out && tar xJf results/tune/runs.tar.xz -C out
# MODEL=llama: the same on the Llama block (config/mini_llama.py), in out/mini_tune_llama/, by default AdamW and the
# four that lead the mini table (Muon, Moonlight, MARS-exact, MARS-approx), each from its GPT-2 tuned point.
# DRY_RUN=1: a tiny model, 8 steps a run, one round: checks the whole path in about two minutes.
source "$(dirname "$0")/common.sh"
cd "$REPO"
positive_int JOBS "${JOBS:-2}"
extra=()
if [[ "${DRY_RUN:-0}" == 1 ]]; then
    extra=(--max_iters=8 --eval_interval=4 --eval_sequences=8 --log_interval=4 --n_layer=1 --n_head=1 --n_embd=16
           --block_size=32 --micro_batch_size=2 --total_batch_size=64 --max-rounds 1)
fi
case "${MODEL:-gpt2}" in
    gpt2) base=(config/mini.py) folder="$(out_root)/mini_tune"
          recipes="${RECIPES:-adamw,mars_approx,mars_exact,muon,mars_m,moonlight,soap}" ;;
    llama) base=(config/mini.py config/mini_llama.py) folder="$(out_root)/mini_tune_llama"
           recipes="${RECIPES:-adamw,muon,moonlight,mars_exact,mars_approx}" ;;
    *) echo "error: MODEL must be gpt2 or llama, got '$MODEL'" >&2; exit 2 ;;
esac
[[ -f data/stdlib_bytes/stdlib_train_000001.bin ]] || python3 -m data.quickstart --tokenizer bytes
python3 -m experiments.tune "$folder" "${base[@]}" --recipes "$recipes" --jobs "${JOBS:-2}" "${extra[@]}"
