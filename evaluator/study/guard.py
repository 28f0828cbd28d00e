"""A model server's guard: `python -m evaluator.study.guard --parent PID [--grace S] [--stop JSON]
[--remove JSON] -- CMD...`

Started by the unit in a session of its own, it starts the server (CMD) in that process group and stops
its whole tree (and a container, by `--stop`'s argv) on SIGTERM or SIGINT, or when its parent is gone,
even by `kill -9` (it is re-parented, noticed within a poll): SIGTERM to the group, SIGKILL after the
grace period. The server also gets PR_SET_PDEATHSIG, so a guard killed by SIGKILL takes it along. Last,
`--remove` (a container's `rm -f NAME`) runs however the server ended: podman removes a `run --rm`
container in a cleanup process of its own after `stop` returns. Exit code: the server's.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import json
import os
import signal
import subprocess
import sys
import time

POLL_S = 0.2
PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    """preexec: SIGTERM this process when the guard dies (Linux only; elsewhere the group kill covers it)."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


def _parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m evaluator.study.guard")
    p.add_argument("--parent", type=int, required=True)
    p.add_argument("--grace", type=float, default=10.0)
    p.add_argument("--stop", default=None, help="JSON argv run first when stopping (a container's stop)")
    p.add_argument(
        "--remove", default=None, help="JSON argv run last, after the server ended (a container's rm)"
    )
    p.add_argument("cmd", nargs=argparse.REMAINDER)
    ns = p.parse_args(argv)
    ns.cmd = ns.cmd[1:] if ns.cmd[:1] == ["--"] else ns.cmd
    if not ns.cmd:
        p.error("no server command after --")
    return ns


def group_members(pgid: int) -> list[int]:
    """Pids of the process group other than this process (Linux /proc; empty elsewhere)."""
    me, out = os.getpid(), []
    for entry in os.listdir("/proc") if os.path.isdir("/proc") else []:
        if not entry.isdigit() or int(entry) == me:
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            out.append(int(entry))
    return out


def kill_others(pgid: int, sig: int) -> None:
    for pid in group_members(pgid):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)


def run_quietly(argv: list[str] | None, timeout_s: float, errors: bool = True) -> None:
    """A container's stop or rm; its failure (e.g. the container is already gone) is only reported."""
    if not argv:
        return
    quiet = None if errors else subprocess.DEVNULL  # rm of a container podman already removed says so
    try:
        subprocess.run(
            argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=quiet, timeout=timeout_s
        )
    except (OSError, subprocess.SubprocessError) as exc:
        print(f"guard: {' '.join(argv)} failed: {exc}", file=sys.stderr, flush=True)


def stop_group(child: subprocess.Popen, grace_s: float, stop_argv: list[str] | None) -> None:
    """The container's stop (when any), SIGTERM to the group, SIGKILL to what is left after the grace."""
    run_quietly(stop_argv, grace_s + 5)
    pgid = os.getpgid(0)
    kill_others(pgid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while (child.poll() is None or group_members(pgid)) and time.monotonic() < deadline:
        time.sleep(POLL_S / 2)
    if group_members(pgid):
        print(f"guard: the server ignored SIGTERM for {grace_s:g} s: SIGKILL", file=sys.stderr, flush=True)
        kill_others(pgid, signal.SIGKILL)
    child.wait()


def main(argv: list[str] | None = None) -> int:
    ns = _parse(sys.argv[1:] if argv is None else argv)
    stop_argv = json.loads(ns.stop) if ns.stop else None
    if os.getpgid(0) != os.getpid():
        os.setpgid(0, 0)  # a group of its own: stopping it must never reach whoever started it
    asked: list[int] = []
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda s, _f: asked.append(s))
    child = subprocess.Popen(ns.cmd, stdin=subprocess.DEVNULL, preexec_fn=_die_with_parent)  # noqa: PLW1509
    while child.poll() is None:
        if asked or os.getppid() != ns.parent:
            why = "asked to stop" if asked else f"its parent {ns.parent} is gone"
            print(f"guard: stopping the server ({why})", file=sys.stderr, flush=True)
            stop_group(child, ns.grace, stop_argv)
            break
        time.sleep(POLL_S)
    kill_others(os.getpgid(0), signal.SIGKILL)  # what the server left behind in its group
    run_quietly(json.loads(ns.remove) if ns.remove else None, 60, errors=False)
    return child.returncode if child.returncode >= 0 else 128 - child.returncode


if __name__ == "__main__":
    sys.exit(main())
