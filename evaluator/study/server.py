"""One model server as a process: started under its guard (evaluator.study.guard), waited for until it
is ready and serves the right model, watched, and stopped with its whole process tree.

Ready: GET /health answers 200 and GET /v1/models (asked with the server's token, read through
runfolder.provenance.server_info) lists the served name; a server listing other models is refused at
once, one that exits before it is ready may be tried again (unit.serve_and_evaluate).

Whose socket answers on the port: the port is on every command line, and vLLM binds it only once loaded;
another user's process that binds it first would receive the run's token. So before the first request
with the token, every listening socket a connection to 127.0.0.1:PORT can reach (/proc/net/tcp, tcp6)
must be held by the server's own process tree (process launcher) or, for a container, opened by this
user or root. The parsing is pure (`listeners`); reading /proc is apart (`port_sockets`, `tree_sockets`).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import NamedTuple

import httpx2 as httpx

from evaluator.core.atomic import no_follow
from evaluator.core.errors import EvaluatorError
from evaluator.request.bounds import MAX_SMALL_BYTES, BoundedGets, ReplyTooLarge
from evaluator.runfolder.provenance import server_info
from evaluator.study.launch import HOST, ServerSpec, free_port, launch_argv, release_port, remove_argv
from evaluator.study.secrets import credential_named

POLL_S = 0.25
# the credential-named variables a server may need: a gated model's weights not yet in the HF cache
SERVER_NEEDS = ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN")
ERROR_RE = re.compile(r"error|exception|traceback|out of memory|killed|failed|refused|denied", re.I)


class ServerFailure(EvaluatorError):
    """The server did not become a usable server; `retry` when another start may succeed."""

    def __init__(self, message: str, retry: bool) -> None:
        super().__init__(message)
        self.message, self.retry = message, retry


class Stopped(EvaluatorError):
    """The sweep asked to stop while the server was starting."""


def last_error_line(log: Path, tail_bytes: int = 65536) -> str | None:
    """The server log's last line that reads as an error (else its last line), clipped, for the table."""
    try:
        with open(log, "rb") as f:
            f.seek(max(0, f.seek(0, os.SEEK_END) - tail_bytes))
            lines = [ln.strip() for ln in f.read().decode("utf-8", "replace").splitlines()]
    except OSError:
        return None
    lines = [ln for ln in lines if ln and not ln.startswith(("guard:", "--- "))]
    errors = [ln for ln in lines if ERROR_RE.search(ln)]
    line = (errors or lines or [""])[-1]
    return line[:300] if line else None


def server_environment(env: Mapping[str, str], drop: Iterable[str]) -> dict[str, str]:
    """What a server inherits: `env` without `drop` and every credential-named variable (the Slurm
    executor's rule) but SERVER_NEEDS; the unit adds its own token. Pure."""
    gone = set(drop)
    return {k: v for k, v in env.items() if k not in gone and (k in SERVER_NEEDS or not credential_named(k))}


class Server:
    """One start of one server: `start`, `wait_ready`, `alive`, `stop`. The port is this start's own."""

    def __init__(self, spec: ServerSpec, run: str, gpus: list[str], log: Path, env: dict[str, str]) -> None:
        self.spec, self.run, self.gpus, self.log, self.env = spec, run, gpus, log, env
        self.port = 0
        self.argv: list[str] = []
        self.proc: subprocess.Popen[bytes] | None = None
        self.grace_s = 10.0

    @property
    def token(self) -> str | None:
        """The key this server requires on /v1 (its VLLM_API_KEY, set by the unit); None when it has none."""
        return self.env.get("VLLM_API_KEY") or None

    @property
    def base_url(self) -> str:
        return f"http://{HOST}:{self.port}/v1"

    def start(self, attempt: int, grace_s: float) -> None:
        self.grace_s = grace_s
        self.port = free_port()
        self.argv, stop_argv = launch_argv(self.spec, self.run, self.port, self.gpus)
        guard = [sys.executable, "-m", "evaluator.study.guard", "--parent", str(os.getpid())]
        guard += ["--grace", str(grace_s)] + (["--stop", json.dumps(stop_argv)] if stop_argv else [])
        remove = remove_argv(self.spec, self.run, self.port)
        guard += ["--remove", json.dumps(remove)] if remove else []
        env = {**self.env, "CUDA_VISIBLE_DEVICES": ",".join(self.gpus)}
        with open(self.log, "ab", opener=no_follow) as log:
            log.write(f"--- try {attempt}: {' '.join(self.argv)}\n".encode())
            log.flush()
            # its own process group (session): stopped as a whole, never by a Ctrl-C meant for us
            self.proc = subprocess.Popen(
                [*guard, "--", *self.argv], env=env, stdin=subprocess.DEVNULL, stdout=log,
                stderr=subprocess.STDOUT, start_new_session=True,
            )  # fmt: skip

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def wait_ready(self, timeout_s: float, stop: threading.Event) -> dict:
        """Until /health is 200 and /v1/models lists the served name; what the server said (server_info)."""
        deadline = time.monotonic() + timeout_s
        with BoundedGets(5.0, MAX_SMALL_BYTES) as http:  # a dripping /health costs 5 s per look, no more
            while True:
                if stop.is_set():
                    raise Stopped()
                if not self.alive():
                    code = self.proc.returncode if self.proc else None
                    why = last_error_line(self.log) or "no output"
                    raise ServerFailure(f"the server exited ({code}) before it was ready: {why}", retry=True)
                if self._healthy(http):
                    self._check_owner()  # before the first request that carries the token
                    return self._check_identity()
                if time.monotonic() > deadline:
                    raise ServerFailure(f"the server was not ready within {timeout_s:g} s", retry=True)
                stop.wait(POLL_S)

    def _healthy(self, http: BoundedGets) -> bool:
        try:
            return http.get(f"http://{HOST}:{self.port}/health").status_code == 200
        except (httpx.HTTPError, TimeoutError, ReplyTooLarge):
            return False

    def _check_owner(self) -> None:
        assert self.proc is not None
        stranger = foreign_listener(self.port, self.proc.pid, self.spec.launcher == "container")
        if stranger:
            raise ServerFailure(
                f"port {self.port} is answered by a process the sweep did not start ({stranger}); "
                "its token was not sent and nothing was evaluated: re-run the sweep (it picks another port)",
                retry=False,
            )

    def _check_identity(self) -> dict:
        info = server_info(self.base_url, self.token)  # /v1/models needs the token; /health does not
        models = info.get("models")
        if not isinstance(models, list) or self.spec.served_name not in models:
            raise ServerFailure(
                f"the server on port {self.port} does not serve {self.spec.served_name!r} "
                f"(its /v1/models lists {models!r}); not evaluated",
                retry=False,
            )
        return info

    def stop(self) -> int | None:
        """SIGTERM to the server's process group (its guard stops a container too), SIGKILL after the grace."""
        proc = self.proc
        if proc is None:
            return None
        try:
            if proc.poll() is None:
                _signal_group(proc.pid, signal.SIGTERM)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(self.grace_s + 5)
            _signal_group(proc.pid, signal.SIGKILL)  # whatever is left of the tree
            return proc.wait()
        finally:
            release_port(self.port)


def _signal_group(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


LISTEN = "0A"
# local addresses (as /proc/net/tcp* spell them) of a socket that a connection to 127.0.0.1 can reach
LOOPBACK_V4 = {"0100007F", "00000000"}  # 127.0.0.1 and 0.0.0.0, each 32-bit word little-endian
LOOPBACK_V6 = {"0" * 32, "0000000000000000FFFF00000100007F"}  # :: (dual stack) and ::ffff:127.0.0.1


class Listener(NamedTuple):
    inode: int
    uid: int


def listeners(table: str, port: int, v6: bool) -> list[Listener]:
    """The listening sockets of a /proc/net/tcp (or tcp6) text a connection to 127.0.0.1:`port` can reach."""
    wanted = LOOPBACK_V6 if v6 else LOOPBACK_V4
    out = []
    for line in table.splitlines()[1:]:
        fields = line.split()
        if len(fields) < 10 or fields[3] != LISTEN:
            continue
        address, _, hex_port = fields[1].partition(":")
        with contextlib.suppress(ValueError):
            if int(hex_port, 16) == port and address.upper() in wanted:
                out.append(Listener(inode=int(fields[9]), uid=int(fields[7])))
    return out


def port_sockets(port: int, proc: Path = Path("/proc")) -> list[Listener]:
    """Every listening socket on this host a connection to 127.0.0.1:`port` can reach."""
    out = []
    for name, v6 in (("tcp", False), ("tcp6", True)):
        with contextlib.suppress(OSError):
            out += listeners((proc / "net" / name).read_text(encoding="ascii", errors="replace"), port, v6)
    return out


def tree_sockets(root_pid: int, proc: Path = Path("/proc")) -> set[int]:
    """The socket inodes held by `root_pid`, the processes of its session (it leads one: the server is
    started in a session of its own) and its descendants."""
    parents: dict[int, int] = {}
    session: set[int] = set()
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError, ValueError, IndexError):
            fields = (entry / "stat").read_text(errors="replace").rpartition(")")[2].split()
            pid = int(entry.name)
            parents[pid] = int(fields[1])  # state, ppid, pgrp, session, ...
            if int(fields[3]) == root_pid:
                session.add(pid)
    tree = {root_pid} | session
    # its descendants (a child may have left the session)
    while more := {pid for pid, parent in parents.items() if parent in tree} - tree:
        tree |= more
    return {inode for pid in tree for inode in _sockets_of(proc / str(pid) / "fd")}


def _sockets_of(fd_dir: Path) -> Iterable[int]:
    with contextlib.suppress(OSError):
        for fd in os.listdir(fd_dir):
            with contextlib.suppress(OSError):
                link = os.readlink(fd_dir / fd)
                if link.startswith("socket:[") and link.endswith("]"):
                    yield int(link[8:-1])


def foreign_listener(port: int, root_pid: int, container: bool) -> str | None:
    """None when every socket that answers 127.0.0.1:`port` is the server's own (see the module's
    docstring); else what holds it instead, for the run's one line."""
    found = port_sockets(port)
    if not found:
        return "no listening socket is on it"
    if container:
        own = {os.getuid(), 0}
        strangers = [s for s in found if s.uid not in own]
    else:
        held = tree_sockets(root_pid)
        strangers = [s for s in found if s.inode not in held]
    if not strangers:
        return None
    return f"a socket of uid {strangers[0].uid} the sweep did not open listens on it"
