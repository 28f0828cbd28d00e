"""Start-up cost of the commands that never talk to an endpoint: they must not import the openai client
(about 0.7 s of CPU in every `doccount` process; the test suite and users' scripts spawn hundreds)."""

from __future__ import annotations

import subprocess
import sys

import pytest


def imported_modules(args: list[str]) -> set[str]:
    """The modules a `python -m evaluator.cli ARGS` process imported, from `-X importtime`'s stderr."""
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "evaluator.cli", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.startswith("Usage: doccount")
    names = set()
    for line in proc.stderr.splitlines():
        if line.startswith("import time:") and line.count("|") == 2:
            names.add(line.rsplit("|", 1)[1].strip())
    assert "evaluator.cli.main" in names  # the stderr was importtime's
    return names


@pytest.mark.parametrize("args", [["--help"], ["score", "--help"], ["verify", "--help"]])
def test_offline_commands_do_not_import_openai(args: list[str]) -> None:
    names = imported_modules(args)
    assert not {n for n in names if n == "openai" or n.startswith("openai.")}
