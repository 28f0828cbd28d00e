"""Whose socket answers on a served run's port: the sweep's own server, or another local process.

A served run's port is on every command line (`--port`, readable by any user in /proc/*/cmdline), and
vLLM binds it only once it has loaded (tens of seconds). A process of another user that binds it first
and answers /health would otherwise receive the run's token and give its answers. So before the first
request that carries the token, the sweep reads the kernel's table of listening TCP sockets
(/proc/net/tcp, /proc/net/tcp6): every socket that a connection to 127.0.0.1:PORT can reach must be
one of the sockets the server's own processes hold (/proc/PID/fd of its guard's session and its
descendants; process launcher), or, for a container (whose processes are the runtime's children, not
the sweep's), one that this user or root opened. Once the server listens there, no other user can bind
the same address and port, so the check holds for the rest of the run.

The parsing is pure (`listeners`); the reading of /proc is kept apart (`port_sockets`, `tree_sockets`).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable
from pathlib import Path
from typing import NamedTuple

LISTEN = "0A"
# local addresses (as /proc/net/tcp* spell them) of a socket that a connection to 127.0.0.1 can reach
LOOPBACK_V4 = {"0100007F", "00000000"}  # 127.0.0.1 and 0.0.0.0, each 32-bit word little-endian
LOOPBACK_V6 = {"0" * 32, "0000000000000000FFFF00000100007F"}  # :: (dual stack) and ::ffff:127.0.0.1


class Listener(NamedTuple):
    inode: int
    uid: int


def listeners(table: str, port: int, v6: bool) -> list[Listener]:
    """The listening sockets of one /proc/net/tcp (or tcp6) text that a connection to 127.0.0.1:`port`
    can reach. Pure, linear in the text."""
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
    grew = True
    while grew:  # descendants (a child may have left the session)
        more = {pid for pid, parent in parents.items() if parent in tree} - tree
        tree |= more
        grew = bool(more)
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
