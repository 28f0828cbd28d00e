"""Cost of a piece of code, measured in a fresh interpreter: its CPU time and the process's peak RSS
(resource.getrusage), so a test can bound both without the test process's own memory in the figure, and a
run that would take hours is stopped at a deadline (then the test fails, naming it)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

from support.cli import REPO, clean_env

_REPORT = """
import json as _json, resource as _resource
print("MEASURE " + _json.dumps({"cpu_s": _cpu, "peak_mib": _resource.getrusage(_resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


# The measured interpreter is started by a fresh small one, not forked from pytest: a child forked from a
# large process starts its ru_maxrss at that process's size.
_RELAY = "import subprocess, sys\nsys.exit(subprocess.run(sys.argv[1:]).returncode)\n"


def measured(setup: str, work: str, deadline_s: float = 60.0) -> dict[str, float]:
    """{"cpu_s": CPU seconds of `work` alone, "peak_mib": the process's peak RSS}: `setup` runs first (not
    timed), then `work`. AssertionError when it has not ended within deadline_s."""
    code = "\n".join(
        [
            textwrap.dedent(setup),
            "import time as _time",
            "_t0 = _time.process_time()",
            textwrap.dedent(work),
            "_cpu = _time.process_time() - _t0",
            _REPORT,
        ]
    )
    try:
        done = subprocess.run(  # through a small parent: ru_maxrss survives exec (see _PARENT below)
            [sys.executable, "-c", _RELAY, sys.executable, "-c", code],
            capture_output=True,
            text=True,
            env=clean_env(),
            cwd=str(REPO),
            timeout=deadline_s,
        )
    except subprocess.TimeoutExpired:
        raise AssertionError(f"not done within {deadline_s:g} s: {work.strip()[:200]}") from None
    assert done.returncode == 0, done.stderr[-2000:]
    line = next(x for x in done.stdout.splitlines() if x.startswith("MEASURE "))
    return json.loads(line[len("MEASURE ") :])


# A small parent for the measured child: a child forked from pytest itself would count pytest's pages in
# its peak (ru_maxrss survives exec), so a fresh interpreter forks it and reports its peak alone.
_PARENT = (
    "import os, subprocess, sys\n"
    "p = subprocess.Popen(sys.argv[2:])\n"
    "_, status, usage = os.wait4(p.pid, 0)\n"
    "open(sys.argv[1], 'w').write(str(usage.ru_maxrss * 1024))\n"
    "sys.exit(os.waitstatus_to_exitcode(status))\n"
)


def run_measured(
    cmd: list[str], timeout: float, env: dict[str, str] | None = None
) -> tuple[int, str, float, int]:
    """Run a command; its exit code, stderr, wall time and peak RSS in bytes. Killed past `timeout` (then
    AssertionError), so a hang fails the test instead of holding it."""
    with tempfile.NamedTemporaryFile(suffix=".rss") as rss:
        t0 = time.monotonic()
        proc = subprocess.Popen(
            [sys.executable, "-c", _PARENT, rss.name, *cmd],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            env=clean_env(**(env or {})),
            cwd=str(REPO),
            start_new_session=True,
        )
        try:
            _, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            _, err = proc.communicate()
            raise AssertionError(
                f"still running after {timeout} s (killed): {err.decode(errors='replace')[-2000:]}"
            ) from None
        elapsed = time.monotonic() - t0
        peak = int(Path(rss.name).read_text() or 0)
    return proc.returncode, err.decode("utf-8", "replace"), elapsed, peak
