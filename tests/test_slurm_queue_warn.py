"""When `sacct` fails (slurmdbd down, no accounting), the sweep says so on its stderr instead of going
quiet: the jobs stay UNKNOWN until a later poll can read them."""

from __future__ import annotations

import logging
import stat
from pathlib import Path

import pytest

from evaluator.study.executors.slurm_queue import read_queue


def tool(folder: Path, name: str, body: str) -> None:
    path = folder / name
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


def test_a_failing_sacct_is_reported_and_the_job_stays_unknown(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # squeue no longer knows the job (exit 1, as Slurm says for a forgotten id); sacct cannot reach slurmdbd
    tool(tmp_path, "squeue", "echo 'slurm_load_jobs error: Invalid job id specified' >&2; exit 1")
    tool(
        tmp_path,
        "sacct",
        "echo 'sacct: error: Problem talking to the database: Connection refused' >&2; exit 1",
    )
    monkeypatch.setenv("PATH", f"{tmp_path}:/usr/bin:/bin")
    with caplog.at_level(logging.INFO):
        views = read_queue(["17"])
    assert views["17"].state == "UNKNOWN"
    said = [r.getMessage() for r in caplog.records]
    assert any("sacct failed" in m and "Connection refused" in m for m in said), said
