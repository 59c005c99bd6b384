# Shared by every run script (source it, then call `launch`): how a paper run is started.
#
#   launch RUN_NAME CONFIG_FILE... [--key=value ...]  # e.g. launch gpt2_small_mars config/gpt2_small_mars.py (a cell)
#
# Config files apply in order (then the overrides): config/mini.py config/mini_mars.py is the mini setting
# with the MARS recipe.
#
# Settings from the environment (all optional):
#   NGPU=8            GPUs per node (torchrun --nproc_per_node; NGPU=1 runs python train.py directly)
#   MICRO_BATCH=N     sequences per GPU per micro-step (default: the config's, what fits an 80 GB card);
#                     the global batch stays the config's 480 x 1024 tokens, gradient accumulation follows
#   TOKENS=5B         a token budget instead of the config's 100k steps (K, M or B suffix; 5B, 20B, 50B
#                     are the paper's); the run goes to <RUN_NAME>_<TOKENS> and its cosine spans the budget
#   OUT_ROOT=out      runs go to OUT_ROOT/RUN_NAME[_TOKENS]
#   NNODES=1          with RDZV_ENDPOINT=host:port (and RDZV_ID): a multi-node rendezvous instead of --standalone
#   DRY_RUN=1         2 CPU steps of a tiny model (data: DATA_DIR, default the quickstart corpus
#                     data/stdlib), to check every flag before a cluster sees it; it goes to OUT_ROOT/dry_run/,
#                     never the real run's folder
#   DATA_DIR=path     token shards to read instead of data/<dataset>
#   SLURM=1           submit the run as a SLURM job (scripts/slurm/train.sbatch: NNODES nodes of NGPU tasks and
#                     GPUs, requeued at its time limit and on preemption) instead of starting it here;
#                     SBATCH_ARGS="--time=48:00:00 --partition=gpu" adds sbatch options
# Extra arguments are passed to train.py last, so they win (e.g. --seed=2, --wandb_log=True).
# Rerunning a script whose run has a checkpoint resumes it (--init_from=resume): preemption-safe.

set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

# "5B" -> 5000000000 (also K, M; a plain number is taken as is)
tokens_to_int() {
    local value="$1" scale=1
    case "$value" in
        *K) scale=1000 ;;
        *M) scale=1000000 ;;
        *B) scale=1000000000 ;;
    esac
    value="${value%[KMB]}"
    [[ "$value" =~ ^[1-9][0-9]*$ ]] || {
        echo "error: TOKENS must be a positive whole number with an optional K/M/B suffix (e.g. 5B), got '$1'" >&2
        return 2
    }
    echo $((value * scale))
}

# Fail, naming the setting, unless VALUE is a whole number of at least 1 (bash arithmetic would read 'x' as a
# variable and '08' as octal)
positive_int() {  # NAME VALUE
    [[ "$2" =~ ^[1-9][0-9]*$ ]] && return
    echo "error: $1 must be a whole number of at least 1, got '$2'" >&2
    return 2
}

# (any other value would start the full run it was meant to check)
[[ "${DRY_RUN:-0}" == [01] ]] || { echo "error: DRY_RUN must be 0 or 1, got '$DRY_RUN'" >&2; exit 2; }

# Where runs go: OUT_ROOT, else out. A dry run goes to its dry_run/ subfolder: in the real run's folder, its
# tiny checkpoint would be resumed by the real launch (which then refuses it).
out_root() {
    local root="${OUT_ROOT:-out}"
    if [[ "${DRY_RUN:-0}" == 1 ]]; then
        root="$root/dry_run"
    fi
    echo "$root"
}

launch() {
    local run_name="$1" configs=()
    shift
    while [[ $# -gt 0 && "$1" != --* ]]; do configs+=("$1"); shift; done
    cd "$REPO"  # paths (config, OUT_ROOT, DATA_DIR) are relative to the repository root
    local dry_run="${DRY_RUN:-0}"
    local ngpu="${NGPU:-$([[ "$dry_run" == 1 ]] && echo 1 || echo 8)}"
    local nnodes="${NNODES:-1}"
    positive_int NGPU "$ngpu" || return
    positive_int NNODES "$nnodes" || return
    [[ -z "${MICRO_BATCH:-}" ]] || positive_int MICRO_BATCH "$MICRO_BATCH" || return
    local overrides=() max_tokens
    if [[ -n "${TOKENS:-}" ]]; then
        run_name="${run_name}_${TOKENS}"
        max_tokens="$(tokens_to_int "$TOKENS")" || return
        overrides+=("--max_tokens=$max_tokens")
    fi
    local out_dir="$(out_root)/$run_name"
    overrides+=("--out_dir=$out_dir" "--wandb_run_name=$run_name")
    [[ -n "${MICRO_BATCH:-}" ]] && overrides+=("--micro_batch_size=$MICRO_BATCH")
    [[ -n "${DATA_DIR:-}" ]] && overrides+=("--data_dir=$DATA_DIR")
    if [[ "$dry_run" == 1 ]]; then
        dry_run_args $((ngpu * nnodes))
        overrides+=("${DRY_RUN_ARGS[@]}")
    fi
    if [[ -f "$out_dir/ckpt.pt" ]]; then
        echo "$out_dir/ckpt.pt exists: resuming it"
        overrides+=(--init_from=resume)
    fi

    if [[ "${SLURM:-0}" == 1 ]]; then  # (a dry run asks for no GPU: it runs on the CPU)
        local sbatch=(sbatch "--job-name=$run_name" "--nodes=$nnodes" "--ntasks-per-node=$ngpu"
                      "--gpus-per-node=$([[ "$dry_run" == 1 ]] && echo 0 || echo "$ngpu")")
        local extra=()
        read -r -a extra <<< "${SBATCH_ARGS:-}"
        (set -x; "${sbatch[@]}" "${extra[@]}" scripts/slurm/train.sbatch "${configs[@]}" "${overrides[@]}" "$@")
        return
    fi
    local launcher=(python3)  # one process needs no torchrun
    if [[ "$nnodes" -gt 1 || -n "${RDZV_ENDPOINT:-}" ]]; then
        launcher=(torchrun "--nnodes=$nnodes" "--nproc_per_node=$ngpu" --rdzv_backend=c10d
                  "--rdzv_endpoint=${RDZV_ENDPOINT:?set RDZV_ENDPOINT=host:port for a multi-node run}"
                  "--rdzv_id=${RDZV_ID:-$run_name}")
    elif [[ "$ngpu" -gt 1 ]]; then
        launcher=(torchrun --standalone "--nproc_per_node=$ngpu")
    fi
    (set -x; "${launcher[@]}" train.py "${configs[@]}" "${overrides[@]}" "$@")
}

# DRY_RUN=1's train.py overrides, into the array DRY_RUN_ARGS (an array, so that a DATA_DIR holding spaces
# stays one argument): a tiny CPU model for 2 steps of 2 micro-steps, the batch made to divide for
# WORLD_SIZE processes; data from DATA_DIR, else the quickstart corpus.
dry_run_args() {  # WORLD_SIZE
    DRY_RUN_ARGS=(--device=cpu --compile=False --n_layer=2 --n_head=2 --n_embd=32 --block_size=32 --vocab_size=50304
                  --micro_batch_size=4 "--total_batch_size=$((4 * 32 * 2 * $1))" --max_tokens=0 --max_iters=2
                  --warmup_iters=1 --eval_interval=2 --eval_sequences=8 --log_interval=1
                  "--data_dir=${DATA_DIR:-$REPO/data/stdlib}")
}

