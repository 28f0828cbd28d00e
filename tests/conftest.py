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
from support.datagen import doccount_rows, write_doccount  # noqa: E402
from support.openai_test_server import TestServer  # noqa: E402
from support.reports import make_run  # noqa: E402

# Modules whose tests share one costly module- or session-scoped setup (runs evaluated and scored through
# the CLI, a wheel built and installed, a model loaded): under pytest-xdist (`make test`) each stays on one
# worker, so that the setup is made once, not once per worker. Every other test goes to any worker.
SHARED_SETUP = {
    "test_archive": "archive",
    "test_compare": "compare",
    "test_demo_data": "demo_data",
    "test_hub": "hub",
    "test_reference_server": "reference_server",
    "test_report": "report",
    "test_report_browser": "report",  # the same two runs as test_report (report_runs below)
    "test_report_counts": "report_counts",
    "test_scoring": "scoring",
    "test_sweep_readme": "sweep_readme",
    "test_trust_archive": "trust_archive",
    "test_wheel": "wheel",
}


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the marks (--dist loadgroup)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        group = SHARED_SETUP.get(item.path.stem)
        if group and not item.get_closest_marker("xdist_group"):
            item.add_marker(pytest.mark.xdist_group(group))


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
    base = tmp_path_factory.mktemp("report-runs")
    with TestServer() as server:
        return {"a": make_run(base / "a", server), "b": make_run(base / "b", server, variant=True)}
