"""The run folder of `score`, `report` and `archive` (evaluator/cli/base.py run_folder_arguments,
one_run_folder): a plain argument or `--run-root`; none, or two different ones, is one usage line."""

from __future__ import annotations

import pytest
from support.answered import answered_run_fixture  # noqa: F401  (the `answered_run` fixture)
from support.cli import run_cli


def test_score_report_and_archive_take_the_folder_as_an_argument(tmp_path, answered_run) -> None:
    run = str(answered_run)
    res = run_cli("score", run, "--no-report")
    assert res.returncode == 0, res.stderr
    assert (answered_run / "scores" / "summary.json").is_file()
    res = run_cli("report", run, "--no-images", "--output", str(tmp_path / "page.html"))
    assert res.returncode == 0, res.stderr
    assert (tmp_path / "page.html").is_file()
    res = run_cli("archive", run, "--output", str(tmp_path / "run.tar.gz"))
    assert res.returncode == 0, res.stderr
    assert (tmp_path / "run.tar.gz").is_file()
    assert run_cli("score", "--run-root", run, "--no-report").returncode == 0  # the README's form too


@pytest.mark.parametrize("command", ["score", "report", "archive"])
def test_no_folder_or_two_different_ones_is_one_usage_line(tmp_path, command: str) -> None:
    extra = ["--output", str(tmp_path / "x.tar.gz")] if command == "archive" else []
    res = run_cli(command, *extra)
    assert res.returncode == 2
    assert res.stderr.strip().splitlines() == [
        f"error: give the run folder: doccount {command} runs/NAME (or --run-root runs/NAME) "
        f"(see `doccount {command} --help`)"
    ]
    res = run_cli(command, str(tmp_path / "a"), "--run-root", str(tmp_path / "b"), *extra)
    assert res.returncode == 2 and "two run folders given" in res.stderr
