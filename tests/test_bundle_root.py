"""The container files an archive carries (`doccount archive --bundle-root`, evaluator/cli/archive.py):
without them (an install that is no checkout) the archive is still written, with one note naming the
files left out and the option that includes them."""

from __future__ import annotations

from support.cli import eval_args, run_cli
from support.datagen import doccount_reply, doccount_rows, write_doccount


def test_archive_without_the_container_files_says_so_in_one_line(tmp_path, server) -> None:
    rows = doccount_rows(4)
    write_doccount(tmp_path / "d" / "test-0.parquet", rows)
    server.update_config(answers=doccount_reply(rows))
    run = tmp_path / "run"
    res = run_cli("evaluate", *eval_args(server.base_url, str(tmp_path / "d" / "*.parquet"), run))
    assert res.returncode == 0, res.stderr
    assert run_cli("score", str(run), "--no-report").returncode == 0
    (tmp_path / "empty").mkdir()
    res = run_cli(
        "archive", str(run), "--output", str(tmp_path / "a.tar.gz"), "--bundle-root", str(tmp_path / "empty")
    )
    assert res.returncode == 0, res.stderr
    notes = [line for line in res.stderr.splitlines() if line.startswith("note:")]
    assert len(notes) == 1 and "Dockerfile.eval" in notes[0] and "--bundle-root" in notes[0], notes
