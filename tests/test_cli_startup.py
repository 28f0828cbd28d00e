"""Start-up cost of the commands that never talk to an endpoint: they must not import the openai client
(about 0.7 s of CPU in every `doccount` process; the test suite and users' scripts spawn hundreds)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest


def imported_modules(args: list[str], code: int = 0) -> set[str]:
    """The modules a `python -m evaluator.cli ARGS` process imported, from `-X importtime`'s stderr."""
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "evaluator.cli", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == code, proc.stderr[-2000:]
    names = set()
    for line in proc.stderr.splitlines():
        if line.startswith("import time:") and line.count("|") == 2:
            names.add(line.rsplit("|", 1)[1].strip())
    assert "evaluator.cli.main" in names  # the stderr was importtime's
    return names


def openai_modules(names: set[str]) -> set[str]:
    return {n for n in names if n == "openai" or n.startswith("openai.")}


OFFLINE = ["score", "verify", "report", "archive", "compare", "leaderboard", "sweep", "evaluate"]


@pytest.mark.parametrize("args", [["--help"]] + [[name, "--help"] for name in OFFLINE])
def test_help_does_not_import_openai(args: list[str]) -> None:
    assert not openai_modules(imported_modules(args))


def test_help_does_not_import_pyarrow_numpy_or_matplotlib() -> None:
    names = imported_modules(["score", "--help"])
    assert not {n.split(".")[0] for n in names} & {"pyarrow", "numpy", "matplotlib"}


def test_an_error_line_does_not_import_openai(tmp_path: Path) -> None:
    """`score` of a folder that is not a run: its one error line, exit 2, still without openai."""
    assert not openai_modules(imported_modules(["score", str(tmp_path / "absent")], code=2))
