#!/usr/bin/env bash
# The GPU issue's measurements on one lent GPU, in stages, each bounded so that the whole fits one call of
# the device tool (10 minutes) and leaves what it measured under $OUT even if a later stage runs out:
#
#   bash bench/gpu_round.sh tests official fsdp   # stages, in the order given
#
#   env      the GPU, its clocks, the torch and library versions
#   mfu      GPT-2 small, AdamW, bench.gpu, one process per variant of $MFU_VARIANTS (';'-separated bench.gpu
#            options), each profiled: where a step's time goes, by kind of kernel. The default: what 2026-11-26
#            left unmeasured (the fused cross-entropy compiled, at 16 and 32; micro-batch 64 with and without it);
#            its rows then were "--micro-batch 16 --trace-dir $OUT;--micro-batch 32;--micro-batch 32 --sdpa flash"
#   autotune micro-batch 32 with inductor's max-autotune (its own matrix kernels, epilogues fused)
#   graphs   micro-batch 16 with CUDA graphs (compile mode reduce-overhead): the 2-6% of launch gaps
#   fsdp     GPT-2 small on one GPU under torchrun, DDP then FSDP (train.py's own wrapping), one optimizer of each
#            family: tokens/s, peak allocated and reserved memory
#   memory   memory-only rows (a log step's peak) of small, medium and large under DDP, and XL under FSDP with
#            activation checkpointing, each with bench.memory's prediction of what max_memory_allocated sees
#   xl       the memory stage's XL row alone
#   large    timed rows of llama-124m and llama-720m, then of large and XL under FSDP with activation checkpointing
#            (RUN_S caps each of a stage's runs, so that the first leaves the second its time)
#   matrix   whole training steps of the matrix optimizers beside AdamW's (bench.gpu's rows and its floor table:
#            step / floor, the whole step against AdamW's): GPT-2 small, then llama-124m, with Muon, Moonlight,
#            MARS-M, SOAP, Kron and Scion, one process per model (bench.gpu prints its floor table after the last
#            row, so a process cut off at its cap leaves rows but no floors; about 17 s a row on the H200)
#   matrix720  the same on llama-720m, with the first four
#   new      the same rows of the 2026 optimizers (NorMuon, AdaMuon, MuonClip, Dion, Dion2, NorDion2, SOAP-Muon,
#            Shampoo, AdamH, MuonH) on GPT-2 small
#   async    train.py on GPT-2 small, FSDP on one GPU, a checkpoint every 10 steps: how long a save holds
#            training up, synchronous against asynchronous (its log lines)
#   official MARS-AdamW against its authors' fused implementation (bench.official_mars on the official
#            MARS/optimizers folder carried in .gpu/MARS: its foreach path and its CUDA extension, whose build
#            starts in the background when the script starts, beside the stages before this one)
#   alone    the optimizer step alone, twice (fused AdamW against MARS-AdamW, 100 repeats: the kernels' time
#            from torch.profiler, and the span between CUDA events)
#   floor    the matrix optimizers' step against its floor (bench.optimizer_step's floor rows: Muon, Moonlight,
#            MARS-M, SOAP, Kron, Scion and the 2026 optimizers (NorMuon, AdaMuon, MuonClip, Dion, Shampoo, AdamH,
#            MuonH) beside fused AdamW, 20 repeats), one process per model: GPT-2 small,
#            llama-124m, then llama-720m if 150 s are left; FLOOR_S caps each process (default 180 s)
#   nanogpt  nanoGPT's own train.py at the same shape and micro-batch 16 (bench.nanogpt; .gpu/nanogpt)
#   tests    tests/test_cuda.py on 8 pytest-xdist workers, for at most $TESTS_S seconds (default: what is left);
#            TESTS_K: a pytest -k expression, to rerun only some cases
#
# Wheels the GPU image lacks travel in .whl/ (schedulefree; the GPU stages import nothing else it lacks), GPT-2's BPE in
# .gpu/tiktoken; BUDGET is the seconds the stages may use in all.
set -u
OUT=${OUT:-/tmp/gpu_round}
mkdir -p "$OUT"
BUDGET=${BUDGET:-570}
left() { echo $((BUDGET - SECONDS)); }
if ls .whl/*.whl >/dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
        && export PYTHONPATH=/tmp/site
fi
export TIKTOKEN_CACHE_DIR=$PWD/.gpu/tiktoken PYTHONUNBUFFERED=1

bench_gpu() {  # one bench.gpu process: GPT-2 small, AdamW, 20 measured steps, no optimizer-alone comparison
    timeout "$1" python3 -m bench.gpu --models small --optimizers adamw --memory-only "" --steps 20 --warmup 3 \
        --alone-repeats 0 "${@:2}" 2>>"$OUT/mfu.err" | tee -a "$OUT/mfu.txt"
}

{
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm,temperature.gpu,power.draw \
        --format=csv
    python3 -c "import torch, triton, schedulefree, sys
print('torch', torch.__version__, 'triton', triton.__version__, 'python', sys.version.split()[0])
print('cudnn', torch.backends.cudnn.version(), 'cudnn sdpa', torch.backends.cuda.cudnn_sdp_enabled())"
} 2>&1 | tee "$OUT/env.txt"

if [[ " $* " == *" official "* ]]; then  # the extension's build (CPU only) runs beside the stages before it
    MAX_JOBS=8 python3 -m bench.official_mars .gpu/MARS/MARS/optimizers --build-only >"$OUT/official_build.txt" 2>&1 &
fi

for stage in "$@"; do
    echo "=== $stage ($(left) s left)"
    [ "$(left)" -gt 60 ] || { echo "skipped: $stage (time)"; continue; }
    case $stage in
    mfu)
        IFS=';' read -ra variants <<< "${MFU_VARIANTS:---micro-batch 16 --fused-cross-entropy;--micro-batch 32 --fused-cross-entropy;--micro-batch 64;--micro-batch 64 --fused-cross-entropy}"
        for variant in "${variants[@]}"; do
            [ "$(left)" -gt 100 ] || { echo "skipped: $variant (time)" | tee -a "$OUT/mfu.txt"; continue; }
            bench_gpu 120 $variant --profile-steps 3
        done
        gzip -f "$OUT"/trace_*.json 2>/dev/null ;;
    autotune)
        bench_gpu "$(($(left) - 10))" --micro-batch 32 --compile-mode max-autotune-no-cudagraphs --profile-steps 3 ;;
    official)
        wait  # the extension's build
        cat "$OUT/official_build.txt"
        timeout $(( $(left) - 10 < 150 ? $(left) - 10 : 150 )) python3 -m bench.official_mars .gpu/MARS/MARS/optimizers \
            --repeats 100 2>>"$OUT/official.err" | tee "$OUT/official.txt" ;;
    alone)
        for run in 1 2; do
            timeout 100 python3 -m bench.gpu --models "" --memory-only "" --alone-repeats 100 2>>"$OUT/mfu.err" \
                | grep "optimizer step alone" | tee -a "$OUT/alone.txt"
        done ;;
    floor)
        for model in small llama-124m llama-720m; do
            need=60; [ $model = llama-720m ] && need=150  # (llama-720m: only with the time for its larger steps)
            [ "$(left)" -gt $need ] || { echo "skipped: $model (time)" | tee -a "$OUT/floor.txt"; continue; }
            run_s=$(( $(left) - 10 < ${FLOOR_S:-180} ? $(left) - 10 : ${FLOOR_S:-180} ))
            timeout "$run_s" python3 -m bench.optimizer_step --model $model --repeats 20 \
                --optimizers adamw-fused,muon,moonlight,mars-m,soap,kron,scion,normuon,adamuon,muonclip,dion,dion2,nordion2,soap-muon,shampoo,adamh,muonh \
                2>>"$OUT/floor.err" | tee -a "$OUT/floor.txt"
        done ;;
    graphs)
        bench_gpu 150 --micro-batch 16 --compile-mode reduce-overhead --profile-steps 3 ;;
    fsdp | memory | xl | large | matrix | matrix720 | new)
        families=adamw,mars-approx,mars-exact,muon
        xl_memory="--data-parallel fsdp --activation-checkpointing --models '' --memory-only xl --optimizers adamw,mars-exact,muon"
        case $stage in
        fsdp) runs=("--data-parallel ddp --models small --memory-only '' --optimizers $families"
                    "--data-parallel fsdp --models small --memory-only '' --optimizers $families") ;;
        memory) runs=("--models '' --memory-only small,medium,large --optimizers adamw,mars-exact,muon" "$xl_memory") ;;
        xl) runs=("$xl_memory") ;;
        large) runs=("--models llama-124m,llama-720m --memory-only '' --optimizers adamw,mars-approx,mars-exact,muon"
                     "--data-parallel fsdp --activation-checkpointing --models large,xl --memory-only '' --optimizers adamw,mars-approx,mars-exact,muon") ;;
        matrix) runs=("--models small --memory-only '' --optimizers adamw,muon,moonlight,mars-m,soap,kron,scion"
                      "--models llama-124m --memory-only '' --optimizers adamw,muon,moonlight,mars-m,soap,kron,scion") ;;
        matrix720) runs=("--models llama-720m --memory-only '' --optimizers adamw,muon,moonlight,mars-m,soap") ;;
        new) runs=("--models small --memory-only '' --optimizers adamw,normuon,adamuon,muonclip,dion,dion2,nordion2,soap-muon,shampoo,adamh,muonh") ;;
        esac
        for run in "${runs[@]}"; do
            [ "$(left)" -gt 120 ] || { echo "skipped: $run (time)" | tee -a "$OUT/$stage.txt"; continue; }
            run_s=$(($(left) - 10)); [ "$run_s" -le "${RUN_S:-$run_s}" ] || run_s=$RUN_S  # RUN_S: one run's cap
            eval timeout "$run_s" torchrun --standalone --nproc_per_node=1 -m bench.gpu --steps 10 --warmup 3 \
                --alone-repeats 0 $run 2>>"$OUT/$stage.err" | tee -a "$OUT/$stage.txt"
        done
        # bench.gpu prints its table when every row is done; a run cut off at its cap logged each row to stderr
        grep -E '^\[bench.gpu\] .*\|' "$OUT/$stage.err" >"$OUT/${stage}_rows.txt" ;;
    async)
        mkdir -p /tmp/random_tokens && python3 -c "from bench.gpu import synthetic_shards; synthetic_shards('/tmp/random_tokens', 1024, 50304)"
        for async in False True; do
            timeout 150 torchrun --standalone --nproc_per_node=1 train.py config/gpt2_small_mars.py \
                --data_dir=/tmp/random_tokens --out_dir=/tmp/async_$async --max_iters=30 --eval_interval=10 \
                --eval_sequences=16 --total_batch_size=16384 --compile=True --data_parallel=fsdp \
                --async_checkpoint=$async 2>&1 | grep -E "saved|writing|step 30/" | tee -a "$OUT/async.txt"
        done ;;
    nanogpt)
        timeout $(( $(left) - 10 < 150 ? $(left) - 10 : 150 )) python3 -m bench.nanogpt .gpu/nanogpt --models small --micro-batch 16 --steps 20 --warmup 5 \
            2>>"$OUT/nanogpt.err" | tee "$OUT/nanogpt.txt" ;;
    tests)
        # (pytest.ini's addopts name an xdist option that older xdist lacks; the image's may be older)
        timeout "$(( $(left) - 5 < ${TESTS_S:-600} ? $(left) - 5 : ${TESTS_S:-600} ))" python3 -m pytest -o addopts="-ra --dist loadgroup" -n 8 -v tests/test_cuda.py ${TESTS_K:+-k "$TESTS_K"} \
            2>&1 | tee "$OUT/test_cuda.txt" | grep -E "PASSED|FAILED|ERROR|SKIPPED|passed|failed|error" ;;
    esac
done
echo "=== done ($(left) s left)"
