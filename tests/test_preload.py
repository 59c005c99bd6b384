"""tests/preload.py, the preloaded python3 that most tests start their commands with: a command forked from
its server ends, prints and answers signals as the same command under the real python3, and a command it
cannot run as python3 would runs under the real one."""

import os
import signal
import subprocess
import sys
import time

import pytest

import eval.harness  # noqa: F401  (as other test modules import it: what it sets in os.environ must not stop preloading)
from conftest import PRELOADED_BIN, PYTHON, REPO

pytestmark = pytest.mark.quick
ENV = {**os.environ, "OMP_NUM_THREADS": "1"}  # the server's start-up variables
PRELOADED = "import sys; print('torch' in sys.modules)"  # True only in a child of the server


def run(python: str, *args: str, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([python, *args], capture_output=True, text=True, cwd=REPO, timeout=60,
                          **{"env": ENV, **kwargs})


@pytest.fixture(scope="module", autouse=True)
def server_ready():
    deadline = time.time() + 60
    while run(PYTHON, "-c", PRELOADED).stdout != "True\n":  # (until then the client runs the real python3)
        assert time.time() < deadline, open(f"{PRELOADED_BIN}/server.log").read()
        time.sleep(0.5)


@pytest.mark.parametrize("code", [
    "import sys; print('out'); print('err', file=sys.stderr); sys.exit(3)",
    "raise ValueError('a traceback from the first frame of the command')",
    "import sys; sys.exit('a message, and status 1')",
    "import sys; print(sys.argv, sys.path[0] == '', input())",
    "import os, signal; os.kill(os.getpid(), signal.SIGTERM)",
    "import os, signal; os.kill(os.getpid(), signal.SIGKILL)",
    "import atexit, threading, time; atexit.register(print, 'atexit'); threading.Thread(target=lambda: (time.sleep(0.2), print('thread'))).start()",
    "from concurrent.futures import ThreadPoolExecutor; ThreadPoolExecutor(1).submit(print, 'an idle executor at exit')",
])
def test_a_command_ends_as_under_python3(code):
    preloaded = run(PYTHON, "-c", code, "arg", input="stdin line\n")
    real = run(sys.executable, "-c", code, "arg", input="stdin line\n")
    assert (preloaded.returncode, preloaded.stdout, preloaded.stderr) == (real.returncode, real.stdout, real.stderr)


@pytest.mark.parametrize("args", [["sample.py", "--help"], ["-m", "experiments.report", "--help"], ["train.py", "--bad"],
                                  ["-m", "eval.harness", "--help"], ["-m", "data.prepare", "--help"]])
def test_scripts_and_modules_run_as_main(args):
    preloaded, real = run(PYTHON, *args), run(sys.executable, *args)
    assert (preloaded.returncode, preloaded.stdout, preloaded.stderr) == (real.returncode, real.stdout, real.stderr)


def test_the_python3_a_command_starts_is_preloaded_too():
    """A command's sys.executable is the preloaded python3 (a sweep starts its runs with it)."""
    code = f"import subprocess, sys; subprocess.run([sys.executable, '-c', {PRELOADED!r}])"
    assert run(PYTHON, "-c", code).stdout == "True\n"
    assert run(sys.executable, "-c", code).stdout == "False\n"


def test_signals_reach_the_command_and_a_killed_client_takes_it_along(tmp_path):
    marker = tmp_path / "pid"
    code = ("import os, signal, sys, time; signal.signal(signal.SIGUSR1, lambda *a: print('usr1', flush=True)); "
            f"open({str(marker)!r}, 'w').write(str(os.getpid())); time.sleep(60)")
    proc = subprocess.Popen([PYTHON, "-c", code], stdout=subprocess.PIPE, text=True, cwd=REPO, env=ENV)
    while not marker.exists() or not marker.read_text():
        time.sleep(0.05)
    child = int(marker.read_text())
    assert child != proc.pid
    proc.send_signal(signal.SIGUSR1)
    assert proc.stdout.readline() == "usr1\n"
    proc.kill()
    proc.wait()
    deadline = time.time() + 10
    while os.path.exists(f"/proc/{child}") and open(f"/proc/{child}/stat").read().split()[2] != "Z":
        assert time.time() < deadline, "the command outlived its killed client"
        time.sleep(0.05)


def test_what_a_fork_cannot_reproduce_runs_the_real_python3(tmp_path):
    assert run(PYTHON, "-c", PRELOADED).stdout == "True\n"
    assert run(PYTHON, "-c", PRELOADED, env={**ENV, "OMP_NUM_THREADS": "2"}).stdout == "False\n"  # read at start-up
    assert run(PYTHON, "-c", PRELOADED, env={**ENV, "PYTHONHASHSEED": "1"}).stdout == "False\n"
    outside = tmp_path / "outside.py"  # a script of another tree: its imports may be another copy of ours
    outside.write_text(PRELOADED)
    assert run(PYTHON, str(outside)).stdout == "False\n"
    assert run(PYTHON, "-V").stdout == run(sys.executable, "-V").stdout
