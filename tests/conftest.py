"""Shared fixtures: test data written as parquet, a loopback test server, a Batch API emulator. Code the
tests share lives in tests/support/ (test modules import it from there, never from here)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

TESTS = Path(__file__).resolve().parent
sys.path.insert(0, str(TESTS))

from support.batch_emulator import BatchEmulator  # noqa: E402
from support.cli import run_cli  # noqa: E402
from support.datagen import doccount_rows, write_doccount  # noqa: E402
from support.once import built_once  # noqa: E402
from support.openai_test_server import TestServer  # noqa: E402
from support.reports import make_run  # noqa: E402


@pytest.fixture
def doc_rows() -> list[dict[str, Any]]:
    return doccount_rows(12)


@pytest.fixture
def doc_data(tmp_path: Path, doc_rows: list[dict[str, Any]]) -> str:
    write_doccount(tmp_path / "data" / "test-00000-of-00001.parquet", doc_rows)
    return str(tmp_path / "data" / "test-*.parquet")


@pytest.fixture
def server() -> Iterator[TestServer]:
    with TestServer() as srv:
        yield srv


@pytest.fixture
def emu() -> Iterator[BatchEmulator]:
    """A Batch API emulator whose batches move on every 20 ms (tests/support/batch_emulator.py)."""
    with BatchEmulator({"step_s": 0.02}) as e:
        yield e


@pytest.fixture
def data12(tmp_path: Path) -> str:
    """Twelve DocCount rows as a parquet glob."""
    write_doccount(tmp_path / "data" / "test-00000-of-00001.parquet", doccount_rows(12))
    return str(tmp_path / "data" / "test-*.parquet")


@pytest.fixture(scope="session")
def report_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, list[dict], dict]]:
    """Two scored runs with reports, built once for test_report and test_report_browser: A and its variant B
    (rows 0 and 1 differ); see support/reports.py."""

    def build(base: Path) -> dict[str, tuple[Path, list[dict], dict]]:
        with TestServer() as server:
            return {"a": make_run(base / "a", server), "b": make_run(base / "b", server, variant=True)}

    return built_once(tmp_path_factory, "report-runs", build)


@pytest.fixture(scope="session")
def demo_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Path]:
    """One `doccount demo` with its defaults (40 pages, seed 0: what the README quotes), and its run folder.
    test_readme and test_demo_pipeline both read it: built once per session (support/once.py)."""

    def build(base: Path) -> tuple[Any, Path]:
        res = run_cli(
            "demo", "--run-root", str(base / "demo"), "--data-root", str(base / "data"), timeout=900
        )
        return res, base / "demo"

    return built_once(tmp_path_factory, "demo", build)
