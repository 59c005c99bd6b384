#!/usr/bin/env bash
# Does the mini testbed's speedup survive as the model grows (docs/scaling.md)? Its stages, in order, each resumable
# (finished runs are read, stopped ones resume from their checkpoints), JOBS runs at a time on one thread each:
#   tokens4x  the mini at 4x the tokens (about 8 per parameter): each recipe's tuned point carried over with its
#             schedule stretched, the transfer check (experiments.tune --check: the learning rate, and AdamW's weight
#             decay, on a 3-point ladder that extends at its edge; seeds 1-3), then AdamW's budget ladder there
#   transfer  learning rate x width (48, 96, 192; WIDTHS) for AdamW and Muon under sp and mup (base width 96),
#             one seed: experiments.transfer's table and figure of each width's best learning rate
#   swaps     GPT-2 against the Llama: AdamW and Muon at their tuned points, seeds 1-3, on the GPT-2 mini with one of
#             the Llama's components at a time (rotary positions, RMSNorm, SwiGLU, no 1/(layer+1) attention scale;
#             Muon's embeddings on its AdamW), and on the mini Llama: experiments.gaps' table of Muon's gap to AdamW
#   betas     AGI-Arena/MARS issue 7: AdamW at MARS's betas and MARS (approx and exact) at AdamW's, seeds 1-3
#   width192  width 192 (about 4x the non-embedding parameters) at 4x the tokens under mup (base width 96), each
#             recipe from its point checked at 4x the tokens (the same steps: mup carries it across width, the
#             declared transfer rule), the transfer check and AdamW's ladder there
#   betas192  AGI-Arena/MARS issue 7 at width 192: AdamW at MARS's betas and MARS at AdamW's, each at its point
#             checked there (AdamW's and MARS-approx's seeds 1-3 there, linked, are the other column; MARS-exact, whose
#             tuned beta2 is 0.995, runs MARS's betas too), seeds 1-3
# STAGES=tokens4x,transfer: only those (betas192 after width192); RECIPES: the recipes of the checks and of betas192
# (default the mission's five).
# Results in out/scale/<stage>/ (tuning.md, tuned/report/report.md; transfer.md and transfer.png; gaps.md).
source "$(dirname "$0")/common.sh"
cd "$REPO"
positive_int JOBS "${JOBS:-2}"
root="$(out_root)/scale"
recipes="${RECIPES:-adamw,mars_approx,mars_exact,mars_m,muon}"
[[ -f data/stdlib_bytes/stdlib_train_000001.bin ]] || python3 -m data.quickstart --tokenizer bytes

# a recipe's train.py arguments at a point's checked values (its folder, the recipe, then the point's overrides): its
# mini config files, the values of the folder's tuned.json and its schedule stretched 4x, as the check ran it
checked() {
    local folder="$1" recipe="$2"; shift 2
    python3 -c 'import json, sys
from config.cells import mini_recipes
from experiments.budget_ladder import stretched
folder, recipe, *base = sys.argv[1:]
args = mini_recipes()[recipe].args.split() + [f"--{k}={v}" for k, v in json.load(open(f"{folder}/tuned.json"))[recipe].items()]
print(" ".join(args), stretched(["config/mini.py", *base, *args], 4))' "$folder" "$recipe" "$@"
}

# the transfer check at a point (its folder, the tuned.json its recipes start from or "" for the tuned mini's
# points, then train.py overrides for every run), then AdamW's ladder there at its checked point (the ladder puts
# AdamW's config file, given again, after its own: the same resolved config)
check_point() {
    local folder="$1" start_from="$2"; shift 2
    local start=()
    [[ -z "$start_from" ]] || start=(--start-from "$start_from")
    python3 -m experiments.tune "$folder" config/mini.py "$@" --stretch 4 --check --recipes "$recipes" --jobs "$JOBS" \
        "${start[@]}"
    local adamw
    adamw="$(checked "$folder" adamw "$@")"
    # shellcheck disable=SC2086  # (the arguments are words)
    python3 -m experiments.budget_ladder "$folder/tuned" --jobs "$JOBS" "$@" $adamw
}

width192=(--n_embd=192 --parametrization=mup --mup_base_width=96)
IFS=, read -ra stages <<< "${STAGES:-tokens4x,transfer,swaps,betas,width192,betas192}"
for stage in "${stages[@]}"; do
    case "$stage" in
        tokens4x) check_point "$root/tokens4x" "" ;;
        transfer)
            mup="--parametrization=mup --mup_base_width=96"
            # (sp's AdamW at width 48 was best at 2.26e-2, the grid's edge: the edge rule extends its grid by one)
            adamw_rates=7.071e-4,1.414e-3,2.828e-3,5.657e-3,1.131e-2,2.263e-2
            muon_rates=1.414e-2,2.828e-2,5.657e-2,1.131e-1,2.263e-1
            python3 -m experiments.sweep "$root/transfer" config/mini.py --seeds 1 --jobs "$JOBS" \
                --recipe "adamw-sp=config/mini_adamw.py" --recipe "adamw-mup=config/mini_adamw.py $mup" \
                --recipe "muon-sp=config/mini_muon.py" --recipe "muon-mup=config/mini_muon.py $mup" \
                --grid "n_embd=${WIDTHS:-192,96,48}" \
                --grid "adamw-sp:learning_rate=$adamw_rates,4.525e-2" --grid "adamw-mup:learning_rate=$adamw_rates" \
                --grid "muon-sp:learning_rate=$muon_rates" --grid "muon-mup:learning_rate=$muon_rates"
            python3 -m experiments.transfer "$root/transfer" ;;
        swaps)  # GPT-2 against the Llama: one of the Llama's components at a time in the GPT-2 mini, then the Llama
            python3 -m experiments.sweep "$root/swaps" config/mini.py --seeds 1,2,3 --jobs "$JOBS" \
                --recipe "adamw@gpt2=config/mini_adamw.py" --recipe "muon@gpt2=config/mini_muon.py" \
                --recipe "adamw@rope=config/mini_adamw.py --positions=rope" \
                --recipe "muon@rope=config/mini_muon.py --positions=rope" \
                --recipe "adamw@rmsnorm=config/mini_adamw.py --norm=rmsnorm" \
                --recipe "muon@rmsnorm=config/mini_muon.py --norm=rmsnorm" \
                --recipe "adamw@swiglu=config/mini_adamw.py --mlp=swiglu" \
                --recipe "muon@swiglu=config/mini_muon.py --mlp=swiglu" \
                --recipe "adamw@no-layer-scale=config/mini_adamw.py --scale_attn_by_inverse_layer_idx=False" \
                --recipe "muon@no-layer-scale=config/mini_muon.py --scale_attn_by_inverse_layer_idx=False" \
                --recipe "adamw@embeddings-on-adamw=config/mini_adamw.py" \
                --recipe "muon@embeddings-on-adamw=config/mini_muon.py --muon_embeddings_on_adamw=True" \
                --recipe "adamw@llama=config/mini_llama.py config/mini_adamw.py" \
                --recipe "muon@llama=config/mini_llama.py config/mini_muon.py"
            python3 -m experiments.gaps "$root/swaps" \
                --variants gpt2,rope,rmsnorm,swiglu,no-layer-scale,embeddings-on-adamw,llama ;;
        betas)  # AGI-Arena/MARS issue 7: AdamW at MARS's betas (0.95, 0.99), MARS at AdamW's (0.9, 0.95)
            # (MARS-exact's tuned recipe has beta2 0.995: its MARS's-betas runs set (0.95, 0.99), as the others')
            mars_approx="config/mini_mars.py config/mini_mars_approx.py"
            mars_exact="config/mini_mars.py config/mini_mars_exact.py"
            python3 -m experiments.sweep "$root/betas" config/mini.py --seeds 1,2,3 --jobs "$JOBS" \
                --recipe "adamw@0.9-0.95=config/mini_adamw.py" \
                --recipe "adamw@0.95-0.99=config/mini_adamw.py --beta1=0.95 --beta2=0.99" \
                --recipe "mars_approx@0.95-0.99=$mars_approx" \
                --recipe "mars_approx@0.9-0.95=$mars_approx --beta1=0.9 --beta2=0.95" \
                --recipe "mars_exact@0.95-0.99=$mars_exact --beta1=0.95 --beta2=0.99" \
                --recipe "mars_exact@0.9-0.95=$mars_exact --beta1=0.9 --beta2=0.95"
            python3 -m experiments.gaps "$root/betas" --variants 0.9-0.95,0.95-0.99 ;;
        width192) check_point "$root/width192" "$root/tokens4x/tuned.json" "${width192[@]}" ;;
        betas192)
            point="$root/width192"
            runs=()  # (each recipe of RECIPES among these three, from its point checked there)
            for recipe in adamw mars_approx mars_exact; do
                [[ ",$recipes," == *",$recipe,"* ]] || continue
                [[ -d "$point/tuned/$recipe/base" ]] || {
                    echo "error: $point holds no checked point of $recipe (tuned/$recipe): run the width192" \
                         "stage with RECIPES including it to its end first" >&2; exit 2; }
                args="$(checked "$point" "$recipe" "${width192[@]}")"  # (assigned first: a failure stops the script)
                case "$recipe" in
                    adamw) runs+=(--recipe "adamw@0.95-0.99=$args --beta1=0.95 --beta2=0.99") ;;
                    mars_approx) runs+=(--recipe "mars_approx@0.9-0.95=$args --beta1=0.9 --beta2=0.95") ;;
                    mars_exact) runs+=(--recipe "mars_exact@0.9-0.95=$args --beta1=0.9 --beta2=0.95"
                                       --recipe "mars_exact@0.95-0.99=$args --beta1=0.95 --beta2=0.99") ;;
                esac
            done
            (( ${#runs[@]} )) || { echo "error: RECIPES holds none of adamw, mars_approx, mars_exact" >&2; exit 2; }
            python3 -m experiments.sweep "$root/betas192" config/mini.py "${width192[@]}" --seeds 1,2,3 --jobs "$JOBS" \
                "${runs[@]}"
            # (their checked points' runs; not MARS-exact's, whose tuned beta2 is 0.995: it runs MARS's betas above)
            for own in adamw@0.9-0.95 mars_approx@0.95-0.99; do
                if [[ ",$recipes," == *",${own%@*},"* ]]; then
                    ln -sfn "../width192/tuned/${own%@*}" "$root/betas192/$own"
                fi
            done
            python3 -m experiments.gaps "$root/betas192" --variants 0.9-0.95,0.95-0.99 ;;
        *) echo "error: STAGES holds '$stage'; the stages are tokens4x, transfer, swaps, betas, width192, betas192" >&2
           exit 2 ;;
    esac
done
