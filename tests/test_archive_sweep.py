"""A sweep's archive (evaluator/archive/sweep.py): its key variables read as the sweep read them, and one
unpack budget across the run archives nested in it and the copies verify makes (issue 46 points 2, 10)."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest
from support import launch
from support.archives import repacked
from support.cli import REPO, clean_env, run_cli
from support.datagen import doccount_reply, doccount_rows, write_doccount
from support.openai_test_server import TestServer

from evaluator.archive import read_archive

pytestmark = pytest.mark.timeout(300)
KEY = "sk-defaults-key-0123456789abcdefghijk"
TOKEN = "ghp_crafted-archive-wants-this-0123456789"


def bearer(key: str) -> str:
    return hashlib.sha256(f"Bearer {key}".encode()).hexdigest()


def reproduce(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return launch.run(
        [sys.executable, "-m", "evaluator.cli", "reproduce", *args], capture_output=True, text=True,
        env=clean_env(**env), cwd=str(REPO), stdin=subprocess.DEVNULL, timeout=240,
    )  # fmt: skip


def test_a_sweep_whose_key_variable_comes_from_defaults_reproduces(tmp_path: Path) -> None:
    """[defaults] api_key_env, runs with their own base_url: on main `reproduce --base-url a=URL` refused the
    legitimate archive as crafted ("sweep.toml names None"). Now the key goes to the named endpoint; a
    sweep.json naming another variable is still refused."""
    rows = doccount_rows(3)
    write_doccount(tmp_path / "data" / "test-0.parquet", rows)
    data = str(tmp_path / "data" / "*.parquet")
    with TestServer({"answers": doccount_reply(rows)}) as recorded:
        (tmp_path / "s.toml").write_text(
            f'name = "sw"\ndata_files = "{data}"\n\n[defaults]\napi_key_env = "D_KEY"\nmax_retries = 1\n'
            f'\n[[runs]]\nname = "a"\nmodel = "test-model"\nbase_url = "{recorded.base_url}"\n'
        )
        res = run_cli(
            "sweep", str(tmp_path / "s.toml"), "--run-root", str(tmp_path / "runs"), env={"D_KEY": KEY}
        )
        assert res.returncode == 0, res.stderr
        sweep = tmp_path / "sw.tar.gz"
        res = run_cli("archive", str(tmp_path / "runs" / "sw"), "--output", str(sweep), env={"D_KEY": KEY})
        assert res.returncode == 0, res.stderr
    assert json.loads(read_archive(sweep).files["sweep.json"])["runs"]["a"]["api_key_env"] == "D_KEY"
    with TestServer({"answers": doccount_reply(rows)}) as named:
        res = reproduce(str(sweep), "--base-url", f"a={named.base_url}", "--data-files", data,
                        "--run-root", str(tmp_path / "r"), env={"D_KEY": KEY})  # fmt: skip
        assert res.returncode == 0, res.stdout + res.stderr
        assert {r["headers"]["authorization_sha256"] for r in named.requests()} == {bearer(KEY)}
    state = json.loads(read_archive(sweep).files["sweep.json"])
    state["runs"]["a"]["api_key_env"] = "GITHUB_TOKEN"
    crafted = repacked(sweep, tmp_path / "crafted.tar.gz", {"sweep.json": json.dumps(state).encode()})
    res = reproduce(str(crafted), "--base-url", f"a={named.base_url}", "--data-files", data,
                    "--run-root", str(tmp_path / "r2"), env={"GITHUB_TOKEN": TOKEN, "D_KEY": KEY})  # fmt: skip
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert res.returncode == 2 and len(lines) == 1 and "GITHUB_TOKEN" in lines[0] and "D_KEY" in lines[0], (
        res.stderr
    )
    assert TOKEN not in res.stderr and not (tmp_path / "r2").exists()
