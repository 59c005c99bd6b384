#!/usr/bin/env bash
# A paper run by its cell's name (config/cells.py: every size with every optimizer it has, GPT-2's and the Llama's,
# the FineWeb-Edu runs as <cell>_fw):
#   bash scripts/run.sh gpt2_small_mars                                  # OpenWebText, 8 GPUs
#   NGPU=4 MICRO_BATCH=8 bash scripts/run.sh gpt2_medium_adamw
#   NNODES=2 RDZV_ENDPOINT=head:29500 bash scripts/run.sh gpt2_small_mars   # on each of two nodes
#   SLURM=1 bash scripts/run.sh gpt2_xl_mars_fw                          # a SLURM job, requeued on preemption
# Settings (NGPU, MICRO_BATCH, TOKENS, DRY_RUN, SLURM, ...): see scripts/common.sh; more arguments go to train.py.
source "$(dirname "$0")/common.sh"
name="${1:-}"
cells="$(cd "$REPO" && python3 -c 'import runpy; print(" ".join(runpy.run_path("config/cells.py")["CELLS"]))')"
[[ -n "$name" && " $cells " == *" $name "* ]] || {
    echo "error: '${name}' is not a cell of config/cells.py; give one of: $cells" >&2
    exit 2
}
shift
launch "$name" "config/$name.py" "$@"
