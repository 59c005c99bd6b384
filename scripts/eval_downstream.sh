#!/usr/bin/env bash
# The paper's zero-shot downstream evaluation of a finished run (lm-evaluation-harness, eval/harness.py):
#   bash scripts/eval_downstream.sh out/gpt2_xl_mars_fw [more eval.harness arguments]
# Results go to RUN_DIR/ckpt_lm_eval.json; experiments/report.py puts them in its downstream table.
# TASKS=a,b overrides the paper's task list; BATCH_SIZE (default 32); DRY_RUN=1 scores 2 examples per task on CPU.
set -euo pipefail
cd "$(dirname "$0")/.."
run_dir="${1:?usage: bash scripts/eval_downstream.sh RUN_DIR [eval.harness arguments]}"
shift
if [[ ! -f "$run_dir/ckpt.pt" ]]; then
    echo "error: no checkpoint $run_dir/ckpt.pt; give the folder of a run train.py wrote (out/<run>)" >&2
    exit 2
fi
[[ "${DRY_RUN:-0}" == [01] ]] || { echo "error: DRY_RUN must be 0 or 1, got '$DRY_RUN'" >&2; exit 2; }
tasks="${TASKS:-$(python3 -c 'from eval.paper import PAPER_COLUMNS; print(",".join(task for _, task in PAPER_COLUMNS))')}"
dry_run_args=()
[[ "${DRY_RUN:-0}" == 1 ]] && dry_run_args=(--limit 2 --device cpu)
(set -x; python3 -m eval.harness --checkpoint "$run_dir/ckpt.pt" --tasks "$tasks" --batch_size "${BATCH_SIZE:-32}" \
    "${dry_run_args[@]}" "$@")
