"""`run`: subprocess.run for the evaluator's command lines, forked from a pre-warmed interpreter
(support/zygote.py) instead of a fresh one.

The child is still a real process with its own file descriptors, environment, working directory, argv
and exit status, so exit codes, stdout and stderr are tested as before; what it skips is importing
openai, numpy and matplotlib again (most of a second of CPU each time). Tests that signal, kill or
watch a process while it runs use subprocess.Popen as before. A command this cannot start the way a
fresh interpreter would goes to subprocess.run unchanged: another interpreter, interpreter options, an
environment that changes how Python itself starts, output not captured, or a child that watches its
parent. So does every command when DOCCOUNT_TEST_COLD=1 is set. tests/test_launch.py checks that both
ways give the same results.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import locale
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ZYGOTE = Path(__file__).with_name("zygote.py")
# variables that change how the interpreter starts or decodes, and those the warm interpreter's libraries
# read when imported: openai (openai/__init__.py, _utils/_logs.py), numpy's OpenBLAS, matplotlib (its
# backend, config and cache folders); a command whose environment sets them differently from the warm
# interpreter's gets a fresh interpreter
STARTUP_VARS = ("PYTHON", "LANG", "LC_", "OPENAI_", "AZURE_OPENAI", "OPENBLAS", "OMP_", "MPL", "HOME", "XDG_")

_zygote: dict[str, Any] = {}
_lock = threading.Lock()


def _startup_env(env: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if k.startswith(STARTUP_VARS)}


def _start_zygote() -> dict[str, Any] | None:
    """The warm interpreter of this process, started on first use (None: it cannot be used here)."""
    if sys.platform != "linux":
        return None
    folder = tempfile.mkdtemp(prefix="doccount-zygote-")
    path = os.path.join(folder, "sock")
    env = {k: v for k, v in os.environ.items() if k not in ("MODEL_API_KEY", "MODEL_API_BASE_URL")}
    proc = subprocess.Popen(
        [sys.executable, str(ZYGOTE), path],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=env,
        cwd=folder,
    )
    assert proc.stdout is not None
    ready = proc.stdout.readline().decode().split()
    if ready[:1] != ["ready"] or ready[1:] != ["1"]:  # not started, or not single-threaded: fork is unsafe
        proc.kill()
        shutil.rmtree(folder, ignore_errors=True)
        return None
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    atexit.register(proc.kill)  # runs first: atexit calls in reverse order
    return {"proc": proc, "path": path, "startup": _startup_env(env)}


def zygote() -> dict[str, Any] | None:
    with _lock:
        if "state" not in _zygote:
            _zygote["state"] = _start_zygote()
        return _zygote["state"]


def _request(cmd: Sequence[str], env: dict[str, str], cwd: str) -> dict[str, Any] | None:
    """What the zygote needs to start `cmd` as a fresh interpreter would, or None if it cannot."""
    args = [str(a) for a in cmd]
    if len(args) < 3 or args[0] != sys.executable or args[1] not in ("-m", "-c"):
        return None
    mode, target, rest = args[1], args[2], args[3:]
    argv = ["-c", *rest] if mode == "-c" else [target, *rest]  # runpy puts the module's path in argv[0]
    return {"argv": argv, "env": env, "cwd": cwd, "mode": mode, "target": target}


def _pipe_reader(fd: int, out: list[bytes]) -> threading.Thread:
    def read() -> None:
        with os.fdopen(fd, "rb") as f:
            out.append(f.read())

    thread = threading.Thread(target=read, daemon=True)
    thread.start()
    return thread


def _decode(data: bytes) -> str:
    # as subprocess does in text mode: the locale's encoding, universal newlines
    text = data.decode(locale.getpreferredencoding(False))
    return text.replace("\r\n", "\n").replace("\r", "\n")


def run(
    cmd: Sequence[str],
    *,
    env: dict[str, str] | None = None,
    cwd: str | Path | None = None,
    timeout: float | None = None,
    text: bool = False,
    capture_output: bool = False,
    input: bytes | str | None = None,  # noqa: A002 - subprocess.run's name
    stdin: int | None = None,
    **kwargs: Any,
) -> subprocess.CompletedProcess:
    """subprocess.run(cmd, ...) with output captured; forked from the warm interpreter where it can be."""
    run_env = dict(os.environ if env is None else env)
    wanted = os.environ.get("DOCCOUNT_TEST_COLD") != "1" and capture_output and not kwargs
    warm = zygote() if wanted and stdin in (None, subprocess.DEVNULL) else None
    request = _request(cmd, run_env, str(cwd or os.getcwd())) if warm else None
    # a child told to watch its parent (evaluation/orphan.py) needs the caller as its parent, not the zygote
    parent_watched = "DOCCOUNT_PARENT_PID" in run_env
    if warm is None or request is None or parent_watched or _startup_env(run_env) != warm["startup"]:
        return subprocess.run(
            cmd, env=env, cwd=cwd, timeout=timeout, text=text, capture_output=capture_output,
            input=input, stdin=stdin, **kwargs,
        )  # fmt: skip
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.connect(warm["path"])
    except OSError as exc:  # the warm interpreter died: correct results matter more than speed
        conn.close()
        warnings.warn(f"the warm interpreter is gone ({exc}); this process starts fresh", stacklevel=2)
        _zygote.pop("state", None)  # the next command starts a new one
        warm["proc"].kill()
        return subprocess.run(cmd, env=env, cwd=cwd, timeout=timeout, text=text, capture_output=capture_output,
                              input=input, stdin=stdin)  # fmt: skip
    with conn:
        return _run_warm(conn, list(cmd), request, timeout, text, input)


def _run_warm(
    conn: socket.socket,
    cmd: list[str],
    request: dict[str, Any],
    timeout: float | None,
    text: bool,
    input: Any,
) -> subprocess.CompletedProcess:
    in_r, in_w = os.pipe()
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    outs: list[bytes] = []
    errs: list[bytes] = []
    socket.send_fds(conn, [b"x"], [in_r, out_w, err_w])
    conn.sendall(json.dumps(request).encode() + b"\n")
    for fd in (in_r, out_w, err_w):
        os.close(fd)
    readers = [_pipe_reader(out_r, outs), _pipe_reader(err_r, errs)]
    data = input.encode(locale.getpreferredencoding(False)) if isinstance(input, str) else input
    with os.fdopen(in_w, "wb") as child_stdin:  # closed at once without input: the child reads EOF
        if data:
            with contextlib.suppress(BrokenPipeError):  # the child ended without reading it all
                child_stdin.write(data)
    conn.settimeout(timeout)
    lines = conn.makefile("rb")
    pid = int(lines.readline())
    try:
        code = int(lines.readline())
    except TimeoutError:
        os.kill(pid, 9)
        for reader in readers:
            reader.join()
        raise subprocess.TimeoutExpired(cmd, timeout or 0, b"".join(outs), b"".join(errs)) from None
    for reader in readers:
        reader.join()
    out, err = b"".join(outs), b"".join(errs)
    if text:
        return subprocess.CompletedProcess(cmd, code, _decode(out), _decode(err))
    return subprocess.CompletedProcess(cmd, code, out, err)
