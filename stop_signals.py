"""
The signals that ask a run to stop (SIGTERM: a user's scancel) or to stop and be requeued (SIGUSR1: SLURM's
warning before the time limit, or a preemption), kept from an entry point's first line. One arriving while
the process still imports torch (a minute on a busy node's shared filesystem) would otherwise end it (the
default action of both), and SLURM would record the job as failed instead of requeueing it. Standard
library only, so that train.py imports it before anything else; runtime.StopSignal adopts what was kept.
"""

import signal

REQUEUE_SIGNAL = signal.SIGUSR1  # SLURM's usual choice: sbatch --signal=USR1@<seconds>, scancel --signal=USR1
EARLY_SIGNALS: list[str] = []  # stop and requeue signals that came before the run's StopSignal existed


def keep_early_stop_signals() -> None:
    """From the start of an entry point: SIGTERM or the requeue signal arriving during start-up (imports,
    data, model, a resume's load: minutes at scale) is kept for the run's StopSignal, which stops at its
    first step, instead of ending the process."""
    for sig in (signal.SIGTERM, REQUEUE_SIGNAL):
        signal.signal(sig, lambda signum, frame: EARLY_SIGNALS.append(signal.Signals(signum).name))
