#!/usr/bin/env bash
# The learning-rate sweep behind the mini reproduction's settings (config/mini*.py): AdamW, Muon,
# MARS-approx and MARS-exact on the quickstart corpus (python -m data.quickstart), one seed, two runs at
# a time (JOBS) on one thread each, logs in out/mini_sweep/<run>.log; then report.py writes the table to
# out/mini_sweep/report/report.md. An entry is learning_rate[:lr_1d] (lr_1d at the paper's ratio: MARS
# 1/2, Muon 0.15). Rerunning resumes (skips) what is done. DRY_RUN=1: 2 tiny steps, first rate only.
source "$(dirname "$0")/common.sh"
declare -A GRID=(
    [adamw]="2e-3 4e-3 8e-3 1.6e-2"
    [muon]="1e-2:1.5e-3 2e-2:3e-3 4e-2:6e-3"
    [mars_approx]="6e-3:3e-3 1.2e-2:6e-3 2.4e-2:1.2e-2"
    [mars_exact]="1.2e-2:6e-3 2.4e-2:1.2e-2"  # twice the compute per step: the two middle rates only
)

sweep_runs() {  # one line per run: launch's arguments
    local name recipe entry lr lr_1d
    mini_recipes | while read -r name recipe; do
        for entry in ${GRID[$name]:-}; do
            lr="${entry%%:*}"
            lr_1d=""  # (no blank at the end of a line: xargs -L would join it to the next)
            if [[ "$entry" == *:* ]]; then lr_1d=" --lr_1d=${entry#*:}"; fi
            echo "mini_sweep/${name}_lr${lr} config/mini.py $recipe --learning_rate=$lr$lr_1d"
            if [[ "${DRY_RUN:-0}" == 1 ]]; then break; fi
        done
    done
}

sweep_runs | launch_parallel
python3 -m scripts.report "$(out_root)/mini_sweep" --out "$(out_root)/mini_sweep/report"
