"""A run folder whose every row was answered: `doccount evaluate` over four DocCount pages against the
loopback test server, as the `answered_run` fixture (the modules that use it import answered_run_fixture)."""

from __future__ import annotations

from pathlib import Path

import pytest

from support.cli import eval_args, run_cli
from support.datagen import doccount_reply, doccount_rows, write_doccount
from support.openai_test_server import TestServer


@pytest.fixture(name="answered_run")
def answered_run_fixture(tmp_path: Path, server: TestServer) -> Path:
    """tmp_path/run, its data in tmp_path/d/*.parquet."""
    rows = doccount_rows(4)
    write_doccount(tmp_path / "d" / "test-0.parquet", rows)
    server.update_config(answers=doccount_reply(rows))
    res = run_cli(
        "evaluate", *eval_args(server.base_url, str(tmp_path / "d" / "*.parquet"), tmp_path / "run")
    )
    assert res.returncode == 0, res.stderr
    return tmp_path / "run"
