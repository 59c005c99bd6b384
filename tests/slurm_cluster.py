"""
A real one-node SLURM cluster for the tests (Debian's slurm-wlm and munge, which .ci/run installs; this
file installs nothing): munged, slurmctld and slurmd started as root on localhost with a slurm.conf and a
munge key written into a temporary folder, stopped by their process ids at the end. The SLURM commands
find it through SLURM_CONF (SlurmCluster.env).
"""

import os
import shutil
import subprocess
import time
from pathlib import Path

from conftest import free_port

DAEMONS = ("munged", "slurmctld", "slurmd", "sbatch", "scontrol", "squeue")


def missing() -> str | None:
    """Why no cluster can start here (a reason for pytest.skip), or None."""
    absent = [name for name in DAEMONS if shutil.which(name) is None and not os.path.exists(f"/usr/sbin/{name}")]
    if absent:
        return f"SLURM is not installed ({', '.join(absent)} missing; apt-get install slurm-wlm munge)"
    if os.geteuid() != 0:
        return "the test cluster's daemons run as root"
    return None


class SlurmCluster:
    """Start with start(); submit with the env it gives; stop() ends the daemons."""

    def __init__(self, folder: Path):
        self.folder = folder
        self.processes: list[subprocess.Popen] = []
        self.conf = folder / "slurm.conf"
        self.env = {**os.environ, "SLURM_CONF": str(self.conf)}

    def _write_config(self) -> None:
        f = self.folder
        for sub in ("state", "spool", "log"):
            (f / sub).mkdir(exist_ok=True)
        cpus = os.cpu_count() or 2
        self.conf.write_text(f"""\
ClusterName=testcluster
SlurmctldHost=localhost
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket={f}/munge.socket
CredType=cred/munge
SlurmctldPort={free_port()}
SlurmdPort={free_port()}
StateSaveLocation={f}/state
SlurmdSpoolDir={f}/spool
SlurmctldPidFile={f}/slurmctld.pid
SlurmdPidFile={f}/slurmd.pid
SlurmctldLogFile={f}/log/slurmctld.log
SlurmdLogFile={f}/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/builtin
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
MpiDefault=none
ReturnToService=2
JobRequeue=1
KillWait=30
MinJobAge=3600
NodeName=localhost NodeHostname=localhost CPUs={cpus} State=UNKNOWN
PartitionName=debug Nodes=localhost Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:4
""")

    def start(self, timeout: float = 60) -> "SlurmCluster":
        self._write_config()
        f = self.folder
        key = f / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o400)
        log = open(f / "log" / "daemons.log", "a")
        self.processes.append(subprocess.Popen(
            ["munged", "--foreground", "--force", f"--socket={f}/munge.socket", f"--key-file={key}",
             f"--pid-file={f}/munged.pid", f"--log-file={f}/log/munged.log", f"--seed-file={f}/munge.seed"],
            stdout=log, stderr=subprocess.STDOUT))
        self._wait(lambda: (f / "munge.socket").exists(), timeout, "munged's socket")
        self.processes.append(subprocess.Popen(["slurmctld", "-D", "-i", "-f", str(self.conf)], env=self.env,
                                               stdout=log, stderr=subprocess.STDOUT))
        self.processes.append(subprocess.Popen(["slurmd", "-D", "-N", "localhost", "-f", str(self.conf)], env=self.env,
                                               stdout=log, stderr=subprocess.STDOUT))
        self._wait(self._idle, timeout, "the node to be idle")
        return self

    def _idle(self) -> bool:
        proc = subprocess.run(["sinfo", "-h", "-o", "%t"], env=self.env, capture_output=True, text=True)
        return proc.returncode == 0 and proc.stdout.strip() in ("idle", "mix", "alloc")

    def _wait(self, ready, timeout: float, what: str) -> None:
        deadline = time.time() + timeout
        while not ready():
            if time.time() > deadline or any(p.poll() is not None for p in self.processes):
                raise RuntimeError(f"the test SLURM cluster did not start ({what}); see {self.folder}/log:\n"
                                   + self.logs()[-4000:])
            time.sleep(0.5)

    def logs(self) -> str:
        return "\n".join(p.read_text(errors="replace") for p in sorted((self.folder / "log").glob("*.log")))

    def run(self, *command: str, check: bool = True, cwd: str | None = None) -> subprocess.CompletedProcess:
        """A SLURM command (sbatch, scontrol, squeue, scancel ...) against this cluster."""
        proc = subprocess.run(list(command), env=self.env, capture_output=True, text=True, timeout=120, cwd=cwd)
        if check and proc.returncode != 0:
            raise AssertionError(f"{' '.join(command)} failed ({proc.returncode}): {proc.stderr}")
        return proc

    def job_field(self, job: str, key: str) -> str:
        """A field of a job's record in slurmctld (MinJobAge keeps it an hour); "" when it has none."""
        out = self.run("scontrol", "show", "job", job, check=False).stdout
        return dict(item.split("=", 1) for item in out.split() if "=" in item).get(key, "")

    def job_state(self, job: str) -> str:
        """PENDING, RUNNING, COMPLETED, FAILED, CANCELLED, ... (UNKNOWN before slurmctld knows the job)."""
        return self.job_field(job, "JobState") or "UNKNOWN"

    def stop(self) -> None:
        for proc in reversed(self.processes):
            proc.terminate()
        for proc in reversed(self.processes):
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
