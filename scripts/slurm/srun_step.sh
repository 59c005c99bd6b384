# Sourced by the sbatch scripts here: srun_step COMMAND... runs srun COMMAND as the job's step and passes the
# stop signals that reach the batch script alone (`scancel --signal=USR1 --batch`, `sbatch --signal=B:USR1@...`)
# on to every task through srun; returns the step's exit status. (A signal sent to the whole job reaches the
# tasks directly.) Bash waits for no trap while `wait` runs, so the loop waits again until the step has ended.
srun_step() {
    srun --kill-on-bad-exit=1 "$@" &
    local step=$! status
    trap "kill -USR1 $step" USR1
    trap "kill -TERM $step" TERM
    while true; do
        wait "$step"
        status=$?
        kill -0 "$step" 2>/dev/null || break
    done
    return "$status"
}
