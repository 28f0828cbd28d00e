"""Shared fixtures: test data written as parquet, a loopback test server, and the CLI run as a process."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

TESTS = Path(__file__).resolve().parent
sys.path.insert(0, str(TESTS))

from batch_emulator import BatchEmulator  # noqa: E402
from datagen import complete_records as read_records  # noqa: E402,F401  (the tests import it from here)
from datagen import doccount_rows, write_doccount  # noqa: E402
from openai_test_server import TestServer  # noqa: E402

REPO = TESTS.parent
FAST_RETRIES = ["--retry-backoff", "0.01", "--retry-max-wait", "0.05"]


def clean_env(**extra: str) -> dict[str, str]:
    """This environment without the variables the evaluator reads (so a developer's own key never leaks in)."""
    env = {
        k: v for k, v in os.environ.items() if k not in ("MODEL_API_KEY", "MODEL_API_BASE_URL", "RUN_NAME")
    }
    env.update(extra)
    return env


def run_cli(
    *args: str, env: dict[str, str] | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """Run the real console entry point in a subprocess (exit codes and stderr are part of the contract)."""
    return subprocess.run(
        [sys.executable, "-m", "evaluator.cli", *args],
        capture_output=True,
        text=True,
        env=clean_env(**(env or {})),
        cwd=str(REPO),
        timeout=timeout,
    )


# The console entry points, run by the interpreter that runs the tests.
EVALUATE = [sys.executable, "-c", "from evaluator.cli import evaluate_main; evaluate_main()"]
SCORE = [sys.executable, "-c", "from evaluator.cli import score_main; score_main()"]


def fast_eval_cmd(
    base_url: str, data_dir: Path, root: Path, *extra: str, timeout: float = 5, max_retries: int | None = None
) -> list[str]:
    """A doccount-evaluate command line with quick retries, for fault and crash tests."""
    cmd = [
        *EVALUATE,
        *eval_args(base_url, str(data_dir / "*.parquet"), root, model="test-model"),
        *FAST_RETRIES,
    ]
    cmd += ["--timeout", str(timeout)]
    if max_retries is not None:
        cmd += ["--max-retries", str(max_retries)]
    return [*cmd, *extra]


def eval_args(base_url: str, data: str, run: str | Path, model: str = "m") -> list[str]:
    """The usual evaluate arguments: model, endpoint, data glob, run folder."""
    return ["--model", model, "--base-url", base_url, "--data-files", data, "--run-root", str(run)]


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
    """A Batch API emulator whose batches move on every 20 ms (tests/batch_emulator.py)."""
    with BatchEmulator({"step_s": 0.02}) as e:
        yield e


@pytest.fixture
def data12(tmp_path: Path) -> str:
    """Twelve DocCount rows as a parquet glob."""
    write_doccount(tmp_path / "data" / "test-00000-of-00001.parquet", doccount_rows(12))
    return str(tmp_path / "data" / "test-*.parquet")
