"""evaluator.archive.verify: an archive scored before summary.json counted timeouts still verifies."""

from __future__ import annotations

import json
from pathlib import Path

from support.archives import rewrite
from support.cli import FAST_RETRIES, eval_args, run_cli
from support.datagen import doccount_reply, doccount_rows, write_doccount
from support.openai_test_server import TestServer


def test_an_archive_scored_before_timeouts_were_counted_verifies(tmp_path: Path) -> None:
    rows = doccount_rows(3)
    write_doccount(tmp_path / "data" / "test-00000-of-00001.parquet", rows)
    run = tmp_path / "orig"
    with TestServer({"answers": doccount_reply(rows)}) as srv:
        args = eval_args(srv.base_url, str(tmp_path / "data" / "*.parquet"), run)
        assert run_cli("evaluate", *args, *FAST_RETRIES).returncode == 0
    assert run_cli("score", "--run-root", str(run)).returncode == 0
    made = run_cli("archive", "--run-root", str(run), "--output", str(tmp_path / "a.tar.gz"))
    assert made.returncode == 0, made.stderr

    def older(files: dict[str, bytes]) -> None:
        [name] = [n for n in files if n.endswith("scores/summary.json")]
        summary = json.loads(files[name])
        del summary["timeouts"]
        files[name] = json.dumps(summary, indent=2).encode()

    old = rewrite(tmp_path / "a.tar.gz", tmp_path / "old.tar.gz", older, resum=True)
    res = run_cli("verify", str(old))
    assert res.returncode == 0, res.stdout + res.stderr
    assert "re-score: summary.json matches" in res.stdout
