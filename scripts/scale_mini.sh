#!/usr/bin/env bash
# Does the mini testbed's speedup survive as the model grows (docs/scaling.md)? Its stages, in order, each resumable
# (finished runs are read, stopped ones resume from their checkpoints), JOBS runs at a time on one thread each:
#   tokens4x  the mini at 4x the tokens (about 8 per parameter): each recipe's tuned point carried over with its
#             schedule stretched, the transfer check (experiments.tune --check: the learning rate, and AdamW's weight
#             decay, on a 3-point ladder that extends at its edge; seeds 1-3), then AdamW's budget ladder there
#   transfer  learning rate x width (48, 96, 192; WIDTHS) for AdamW and Muon under sp and mup (base width 96),
#             one seed: experiments.transfer's table and figure of each width's best learning rate
#   width192  width 192 (about 4x the non-embedding parameters) at 4x the tokens under mup from the tuned mini (the
#             declared transfer rule), the transfer check and AdamW's ladder there
# STAGES=tokens4x,transfer: only those; RECIPES: the recipes of the checks (default the mission's five).
# Results in out/scale/<stage>/ (tuning.md, tuned/report/report.md; transfer.md and transfer.png).
source "$(dirname "$0")/common.sh"
cd "$REPO"
positive_int JOBS "${JOBS:-2}"
root="$(out_root)/scale"
recipes="${RECIPES:-adamw,mars_approx,mars_exact,mars_m,muon}"
[[ -f data/stdlib_bytes/stdlib_train_000001.bin ]] || python3 -m data.quickstart --tokenizer bytes

# the transfer check at a point (its folder, then train.py overrides for every run), then AdamW's ladder there at
# its checked learning rate and weight decay
check_point() {
    local folder="$1"; shift
    python3 -m experiments.tune "$folder" config/mini.py "$@" --stretch 4 --check --recipes "$recipes" --jobs "$JOBS"
    local tuned
    tuned="$(python3 -c 'import json, sys; print(" ".join(f"--{k}={v}" for k, v in json.load(open(sys.argv[1]))["adamw"].items()))' "$folder/tuned.json")"
    local stretch
    stretch="$(python3 -c 'import sys; from experiments.budget_ladder import stretched; print(stretched(["config/mini.py", "config/mini_adamw.py", *sys.argv[1:]], 4))' "$@")"
    # shellcheck disable=SC2086  # (the overrides are words)
    python3 -m experiments.budget_ladder "$folder/tuned" --jobs "$JOBS" "$@" $stretch $tuned
}

IFS=, read -ra stages <<< "${STAGES:-tokens4x,transfer,width192}"
for stage in "${stages[@]}"; do
    case "$stage" in
        tokens4x) check_point "$root/tokens4x" ;;
        transfer)
            mup="--parametrization=mup --mup_base_width=96"
            adamw_rates=7.071e-4,1.414e-3,2.828e-3,5.657e-3,1.131e-2,2.263e-2
            muon_rates=1.414e-2,2.828e-2,5.657e-2,1.131e-1,2.263e-1
            python3 -m experiments.sweep "$root/transfer" config/mini.py --seeds 1 --jobs "$JOBS" \
                --recipe "adamw-sp=config/mini_adamw.py" --recipe "adamw-mup=config/mini_adamw.py $mup" \
                --recipe "muon-sp=config/mini_muon.py" --recipe "muon-mup=config/mini_muon.py $mup" \
                --grid "n_embd=${WIDTHS:-192,96,48}" \
                --grid "adamw-sp:learning_rate=$adamw_rates" --grid "adamw-mup:learning_rate=$adamw_rates" \
                --grid "muon-sp:learning_rate=$muon_rates" --grid "muon-mup:learning_rate=$muon_rates"
            python3 -m experiments.transfer "$root/transfer" ;;
        width192) check_point "$root/width192" --n_embd=192 --parametrization=mup --mup_base_width=96 ;;
        *) echo "error: STAGES holds '$stage'; the stages are tokens4x, transfer, width192" >&2; exit 2 ;;
    esac
done
