#!/usr/bin/env bash
# The mini reproduction (the project's CPU demonstration): AdamW, Muon, MARS-approx and MARS-exact on
# the quickstart corpus (python -m data.quickstart) with a tiny GPT (config/mini.py), each at the
# learning rate scripts/mini_sweep.sh chose (config/mini_*.py), for two seeds (SEEDS), two runs at a time
# (JOBS) on one thread each: about 15 minutes on 2 free cores. Logs in out/mini_paper/<run>.log; the
# table and plots in out/mini_paper/report/. Rerunning resumes what is not done. DRY_RUN=1 checks flags.
source "$(dirname "$0")/common.sh"

paper_runs() {  # one line per run: launch's arguments
    local name recipe seed
    mini_recipes | while read -r name recipe; do
        for seed in ${SEEDS:-1 2}; do
            echo "mini_paper/${name}_seed${seed} config/mini.py $recipe --seed=$seed"
        done
    done
}

paper_runs | launch_parallel
python3 -m scripts.report "$(out_root)/mini_paper" --out "$(out_root)/mini_paper/report"
