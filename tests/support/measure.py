"""Cost of a piece of code, measured in a fresh interpreter: its CPU time and the process's peak RSS
(resource.getrusage), so a test can bound both without the test process's own memory in the figure, and a
run that would take hours is stopped at a deadline (then the test fails, naming it)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

from support.cli import REPO, clean_env

_REPORT = """
import json as _json, resource as _resource
print("MEASURE " + _json.dumps({"cpu_s": _cpu, "peak_mib": _resource.getrusage(_resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


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
        done = subprocess.run(
            [sys.executable, "-c", code],
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
