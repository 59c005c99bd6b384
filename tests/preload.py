"""
A preloaded python3 for the processes the tests start. One server imports torch and the project once; each
`python3 train.py ...` (or `-m module`, or `-c code`) that a test runs through the client below is a child
forked from it, instead of a fresh interpreter that imports torch again (4-5 s of CPU on the 2-core CI
machine, where a tiny train.py run's own work is a second or two). Under torchrun the client is also each
rank's program (`--no-python`), so a 2-rank launch costs two forks, not two imports.

The child is a real process running the real entry point as __main__: its own pid and exit status (an
uncaught exception prints its traceback and exits 1, a signal that kills it kills the client the same way),
the client's stdin, stdout and stderr (passed over the socket), working directory, environment and argv; a
signal the client receives (torchrun's SIGTERM, a test's SIGUSR1) is forwarded to it, and if the client dies
the server kills it. What it cannot have is an interpreter started in its environment: the variables read
at the interpreter's start or at the preloaded imports (READ_AT_START) must equal the server's. A command whose
differ, or whose script lives outside this repository (its imports may be another copy of ours), or that is
not a script, -m or -c, runs the real python3. Nor does a test that looks at a process from outside (its
/proc/PID/environ, or a SIGKILL that must stop it at once) use this.

    python3 tests/preload.py serve SOCKET   # the server (conftest starts one per test session)
    BIN/python3 ARGS, BIN/torchrun ARGS     # the clients conftest.start_preloaded_python writes
"""

import gc
import json
import os
import selectors
import signal
import socket
import struct
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# What the server imports: the libraries, with what torch imports on first use (dynamo when an optimizer is
# built, 0.9 s; inductor's compiler, 2 s) and scipy's statistics (the report), and the project's library modules
# (train.py's imports). Not the entry points (train, sample, eval.harness, ...): run as __main__, each must be the
# only copy that runs its module code (eval.harness registers its lm-eval model once).
PRELOADED = ["torch", "torch._dynamo", "torch._inductor.compile_fx", "numpy", "scipy.stats", "tiktoken", "datasets",
             "lm_eval", "checkpoint", "config", "model", "optim", "parallel", "runlog", "runtime", "data.loader",
             "data.prepare", "data.shards", "eval.scoring"]
FORWARDED_SIGNALS = [signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2, signal.SIGQUIT]
# Environment variables read at the interpreter's start or the preloaded imports, which a fork cannot change
READ_AT_START = ("PYTHON", "OMP_", "MKL_", "CUDA_", "HF_", "TORCH_LOGS", "TORCH_CPP_", "TORCH_SHOW_",
                 "TORCH_DISTRIBUTED_DEBUG", "TORCHINDUCTOR_", "TORCHDYNAMO_", "TORCH_COMPILE_")
PER_COMMAND = {"PYTHONPATH", "PYTHONUNBUFFERED"}  # ... except these, which the child applies itself
HEADER = struct.Struct("!Q")  # the length of the JSON request that follows


# --- the client (stdlib only: it starts with python3 -S in milliseconds) ---

def client(server_socket: str, real_python: str) -> None:
    args = sys.argv[1:]
    conn = socket.socket(socket.AF_UNIX)
    try:
        conn.connect(server_socket)
    except OSError:
        os.execv(real_python, [real_python, *args])  # no server: the real interpreter does the same work
    request = json.dumps({"argv": args, "cwd": os.getcwd(), "env": dict(os.environ)}).encode()
    socket.send_fds(conn, [HEADER.pack(len(request))], [0, 1, 2])
    conn.sendall(request)
    replies = conn.makefile("r")
    first = replies.readline().split()
    if first[0] != "pid":  # not a command the server can run: the real interpreter runs it
        os.execv(real_python, [real_python, *args])
    pid = int(first[1])

    def forward(signum: int, frame) -> None:
        try:
            os.kill(pid, signum)
        except ProcessLookupError:  # the child has just ended (torchrun stopping the other ranks): its status follows
            pass

    for signum in FORWARDED_SIGNALS:
        signal.signal(signum, forward)
    last = replies.readline().split()
    if not last:
        sys.exit(f"tests/preload.py: the server stopped before child {pid} ended")
    status = int(last[1])
    if os.WIFSIGNALED(status):  # so that whoever waits on us sees what killed the child
        die_of(os.WTERMSIG(status))
    sys.exit(os.waitstatus_to_exitcode(status))


def die_of(signum: int) -> None:
    """End this process by signal signum, as its default action does."""
    if signum != signal.SIGKILL:  # (which has no handler to reset)
        signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)


# --- the server ---

def as_command(argv: list[str], env: dict[str, str]) -> tuple[list[str], dict[str, str]]:
    """python3's -u (torchrun starts its ranks with it) as the PYTHONUNBUFFERED it stands for."""
    while argv[:1] == ["-u"]:
        argv, env = argv[1:], {**env, "PYTHONUNBUFFERED": "1"}
    return argv, env


def runnable(argv: list[str], cwd: str, env: dict[str, str], server_env: dict[str, str],
             set_by_imports: dict[str, str]) -> bool:
    """Whether a forked child runs this command as python3 would: a script of this repository, a module or
    code run from inside it, and the start-up variables the server started with (less those the preloaded
    imports set: the client's process may have made the same imports)."""
    if not argv or (argv[0] not in ("-m", "-c") and not argv[0].endswith(".py")):
        return False
    where = cwd if argv[0] in ("-m", "-c") else os.path.dirname(os.path.join(cwd, argv[0]))
    if os.path.commonpath([os.path.realpath(where), REPO]) != REPO:
        return False
    def start_up(environment: dict[str, str]) -> dict[str, str]:
        return {k: v for k, v in environment.items()
                if k.startswith(READ_AT_START) and k not in PER_COMMAND and k not in set_by_imports}
    return start_up(env) == start_up(server_env)


def become(argv: list[str], cwd: str, env: dict[str, str], set_by_imports: dict[str, str], fds: list[int],
           client_path: str) -> None:
    """In the forked child: take the client's streams, directory, environment (with what the preloaded modules'
    imports set in it, as they would have) and argv, run the command as __main__, and end as python3 would.
    Its sys.executable is the client, so that the python3 it starts (a sweep's runs) is a child of the server
    too, where it can be."""
    import ctypes
    import io

    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG: never outlive the server
    sys.executable = client_path

    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    os.chdir(cwd)
    os.environ.clear()
    os.environ.update(env)
    for name, value in set_by_imports.items():
        os.environ.setdefault(name, value)
    unbuffered = bool(env.get("PYTHONUNBUFFERED"))
    sys.stdin = io.TextIOWrapper(io.BufferedReader(io.FileIO(0, "r", closefd=False)))
    for fd, name in ((1, "stdout"), (2, "stderr")):
        raw = io.FileIO(fd, "w", closefd=False)
        setattr(sys, name, io.TextIOWrapper(raw if unbuffered else io.BufferedWriter(raw), write_through=unbuffered,
                                            line_buffering=name == "stderr" or raw.isatty(),
                                            errors="backslashreplace" if name == "stderr" else "strict"))
    try:
        run_as_main(argv, cwd, [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
        status = 0
    except SystemExit as stop:  # sys.exit(None or a status), or sys.exit(message): printed, status 1
        if stop.code is None or isinstance(stop.code, int):
            status = stop.code or 0
        else:
            print(stop.code, file=sys.stderr)
            status = 1
    except BaseException as error:  # the traceback python3 prints: from the command's own first frame
        trace = error.__traceback__
        while trace and trace.tb_frame.f_code.co_filename in (__file__, "<frozen runpy>"):
            trace = trace.tb_next
        sys.excepthook(type(error), error.with_traceback(trace), trace)
        status = 1
        if isinstance(error, KeyboardInterrupt):  # python3 then ends by the SIGINT itself
            status = -signal.SIGINT
    exit_as_python(status)


def run_as_main(argv: list[str], cwd: str, search_path: list[str]) -> None:
    import runpy

    if argv[0] == "-c":
        sys.argv, sys.path[0:1] = ["-c", *argv[2:]], ["", *search_path]
        exec(compile(argv[1], "<string>", "exec"), {"__name__": "__main__", "__builtins__": __builtins__})
    elif argv[0] == "-m":
        sys.argv, sys.path[0:1] = [argv[1], *argv[2:]], [cwd, *search_path]
        sys.modules.pop(argv[1], None)  # (python3 -m data.prepare starts without data.prepare imported)
        runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
    else:
        script = os.path.join(cwd, argv[0])
        sys.argv, sys.path[0:1] = list(argv), [os.path.dirname(os.path.realpath(script)), *search_path]
        runpy.run_path(script, run_name="__main__")


def exit_as_python(status: int) -> None:
    """python3's shutdown, less its teardown of every module (1.7 s once torch is imported, and nothing a test
    can see): threading's shutdown (its exit hooks, which stop executors' workers, then a join of the
    non-daemon threads), the atexit functions, a flush, the exit."""
    import atexit
    import threading

    threading._shutdown()  # (private, but what the interpreter itself calls first on the way out)
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    if status < 0:
        die_of(-status)
    os._exit(status & 0xFF)


def fork_can_use_cuda() -> bool:
    """Whether a child forked now may use CUDA (on a machine without CUDA: True, it never will)."""
    import torch

    pid = os.fork()
    if pid == 0:
        os._exit(1 if torch.cuda._is_in_bad_fork() else 0)
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0


def serve(server_socket: str) -> None:
    import importlib

    sys.path.insert(0, REPO)
    client_path = os.path.join(os.path.dirname(server_socket), "python3")  # (conftest writes it beside the socket)
    server_env = dict(os.environ)
    for module in PRELOADED:
        importlib.import_module(module)
    # A child forked after the CUDA driver was first asked anything cannot use CUDA (torch refuses: "Cannot
    # re-initialize CUDA in forked subprocess"), and on a GPU machine some import asks it. Where a forked child
    # finds itself so, every command runs the real python3.
    forks_can_use_cuda = fork_can_use_cuda()
    # The imports' objects out of the collector's reach: a forked child's full collection (train.py's at the end
    # of a run, ranks.py's between scenarios) would otherwise walk all of them and copy every page it touches
    # (0.27 s of CPU a child, 0.015 frozen)
    gc.collect()
    gc.freeze()
    set_by_imports = {name: value for name, value in os.environ.items() if server_env.get(name) != value}
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(server_socket)
    listener.listen(64)
    selector = selectors.DefaultSelector()
    selector.register(listener, selectors.EVENT_READ)
    children: dict[int, socket.socket] = {}  # pid: its client's connection
    while True:
        for key, _ in selector.select(timeout=0.02):
            if key.fileobj is listener:
                conn, _ = listener.accept()
                message, fds, _, _ = socket.recv_fds(conn, HEADER.size, 3)
                (length,) = HEADER.unpack(message)
                request = b""
                while len(request) < length:
                    request += conn.recv(length - len(request))
                request = json.loads(request)
                argv, env = as_command(request["argv"], request["env"])
                if forks_can_use_cuda and runnable(argv, request["cwd"], env, server_env, set_by_imports):
                    pid = os.fork()
                    if pid == 0:  # the child: none of the server's sockets, then the command
                        selector.close()
                        listener.close()
                        for other in [conn, *children.values()]:
                            other.close()
                        become(argv, request["cwd"], env, set_by_imports, fds, client_path)
                    conn.sendall(f"pid {pid}\n".encode())
                    children[pid] = conn
                    selector.register(conn, selectors.EVENT_READ, pid)
                else:
                    conn.sendall(b"real\n")
                    conn.close()
                for fd in fds:  # (the child has its own copies)
                    os.close(fd)
            elif not key.fileobj.recv(1):  # a client hung up (killed by its test's timeout): its child goes too
                selector.unregister(key.fileobj)
                os.kill(key.data, signal.SIGKILL)
        while children:
            pid, status = os.waitpid(-1, os.WNOHANG)
            if pid == 0:
                break
            conn = children.pop(pid)
            try:
                conn.sendall(f"exit {status}\n".encode())
            except OSError:
                pass
            if conn.fileno() in selector.get_map():
                selector.unregister(conn)
            conn.close()


if __name__ == "__main__":
    serve(sys.argv[2])
