"""A pre-warmed interpreter that forks the tests' CLI processes (started by support/launch.py, one per
pytest worker).

Each evaluate, check-endpoint or score process spends most of a second of CPU importing openai or
matplotlib before it does anything, and the suite starts hundreds of them. This process imports those libraries once, then
forks one child per request. A child is a real, separate process: it gets its own stdin/stdout/stderr
file descriptors, environment, working directory and argv, runs the evaluator's real entry point (as
`python -m MODULE` or `python -c CODE` would) and ends with its own exit status, which is sent back
to the caller.

Only the libraries in PRELOAD are loaded here, and no evaluator module: the code under test is imported
fresh in every child. The variables those libraries read when imported are in launch.STARTUP_VARS, so a
command that sets them otherwise gets a fresh interpreter. The process stays single-threaded (checked at start:
forking a process with other threads can leave a lock held in the child), and ends when its parent's
pipe closes.

Protocol on a Unix socket, one connection per child: the caller sends 3 file descriptors (stdin,
stdout, stderr) with one byte, then one JSON line {"argv", "env", "cwd", "mode", "target"}; this
process answers "PID\n" once forked and "EXIT\n" (subprocess's returncode: negative for a signal) once
the child has ended.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import runpy
import select
import signal
import socket
import sys
import traceback

# openai (with pydantic and httpx under it), numpy and matplotlib are most of a child's start-up. numpy's
# OpenBLAS starts a thread pool when loaded, and a fork copies no thread while OpenBLAS's state says they
# are there: it is loaded with one thread here (children then run BLAS on one thread; the evaluator's
# numbers do not depend on it). Not pyarrow: its import starts a thread of its own.
PRELOAD = (
    "openai",
    "numpy",
    "matplotlib",
    "matplotlib.style",
    "matplotlib.figure",
    "matplotlib.backends.backend_agg",
)


def read_request(conn: socket.socket) -> tuple[dict, list[int]]:
    _, fds, _, _ = socket.recv_fds(conn, 1, 3)
    data = b""
    while not data.endswith(b"\n"):
        chunk = conn.recv(1 << 16)
        if not chunk:
            raise EOFError("the caller closed the connection mid-request")
        data += chunk
    return json.loads(data), fds


def run_child(request: dict, fds: list[int]) -> None:
    """In the forked child: become the requested process, run it, exit with its status."""
    signal.set_wakeup_fd(-1)
    for target, fd in zip((0, 1, 2), fds, strict=True):
        os.dup2(fd, target)
        os.close(fd)
    for sig in (signal.SIGTERM, signal.SIGCHLD, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)  # as a fresh interpreter has it
    os.environ.clear()
    os.environ.update(request["env"])
    os.chdir(request["cwd"])
    sys.argv = list(request["argv"])
    # sys.path[0] as the interpreter sets it: '' for -c, the working directory for -m (not this folder)
    sys.path[0] = "" if request["mode"] == "-c" else os.getcwd()
    code: int | str | None = 0
    try:
        if request["mode"] == "-m":
            runpy.run_module(request["target"], run_name="__main__", alter_sys=True)
        else:
            exec(compile(request["target"], "<string>", "exec"), {"__name__": "__main__"})  # noqa: S102
    except SystemExit as exc:
        code = exc.code
    except BaseException:  # noqa: BLE001 - printed as the interpreter would, then exit 1
        traceback.print_exc()
        code = 1
    if isinstance(code, str):
        print(code, file=sys.stderr)
        code = 1
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):  # a closed pipe: nothing more can be said
            stream.flush()
    os._exit(code or 0)


def serve(path: str) -> None:
    os.environ["OPENBLAS_NUM_THREADS"] = (
        "1"  # read once, when numpy loads OpenBLAS; children get their own env
    )
    for name in PRELOAD:
        importlib.import_module(name)
    threads = len(os.listdir("/proc/self/task"))
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(16)
    # a child's end wakes the select below: SIGCHLD writes a byte to this pipe
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    print(f"ready {threads}", flush=True)
    waiting: dict[int, socket.socket] = {}
    while True:
        readable, _, _ = select.select([listener, sys.stdin, wake_r], [], [], 1.0)
        if sys.stdin in readable and not os.read(sys.stdin.fileno(), 1024):
            return  # the pytest worker is gone
        if wake_r in readable:
            os.read(wake_r, 4096)
        if listener in readable:
            conn, _ = listener.accept()
            request, fds = read_request(conn)
            pid = os.fork()
            if pid == 0:
                for fd in (wake_r, wake_w):
                    os.close(fd)
                listener.close()
                conn.close()
                run_child(request, fds)
            for fd in fds:
                os.close(fd)
            conn.sendall(f"{pid}\n".encode())
            waiting[pid] = conn
        while waiting:
            pid, status = os.waitpid(-1, os.WNOHANG)
            if pid == 0:
                break
            conn = waiting.pop(pid, None)
            if conn is not None:
                with contextlib.suppress(OSError):  # the caller gave up (its timeout killed the child)
                    conn.sendall(f"{os.waitstatus_to_exitcode(status)}\n".encode())
                conn.close()


if __name__ == "__main__":
    serve(sys.argv[1])
