"""An archive carries no image of the data, and its report.html is checked by verify (#39, 11).

A real run whose data has images gets a local report with thumbnails; `doccount archive` packs a report
without them (nor the data's question texts), `verify` rebuilds that page from the archived records and
compares it byte for byte, so an edited page with its checksum recomputed does not verify.
"""

from __future__ import annotations

import re
from pathlib import Path
from types import SimpleNamespace

import pytest
from support.archives import repacked
from support.cli import eval_args, run_cli
from support.datagen import doccount_reply, doccount_rows, write_doccount
from support.openai_test_server import TestServer

from evaluator.archive import read_archive

REPORT = "scores/report.html"


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> SimpleNamespace:
    base = tmp_path_factory.mktemp("report-archive")
    rows = doccount_rows(6)
    data = base / "data" / "test-00000-of-00001.parquet"
    write_doccount(data, rows)
    run = base / "run"
    with TestServer() as srv:
        srv.set_config({"answers": doccount_reply(rows, wrong={rows[1]["sample_id"]})})
        res = run_cli("evaluate", *eval_args(srv.base_url, str(data.parent / "*.parquet"), run), "--quiet")
        assert res.returncode == 0, res.stderr
    res = run_cli("score", "--run-root", str(run))
    assert res.returncode == 0, res.stderr
    res = run_cli("report", "--run-root", str(run), "--data-files", str(data.parent / "*.parquet"))
    assert res.returncode == 0, res.stderr
    archive = base / "run.tar.gz"
    res = run_cli("archive", "--run-root", str(run), "--output", str(archive))
    assert res.returncode == 0, res.stderr
    entry = f"runs/{run.name}/{REPORT}"
    return SimpleNamespace(run=run, rows=rows, archive=archive, entry=entry)


def test_the_local_report_keeps_its_thumbnails_and_the_archived_one_has_none(made: SimpleNamespace) -> None:
    local = (made.run / REPORT).read_text(encoding="utf-8")
    assert "data:image/jpeg" in local and 'class="thumb"' in local  # the data does have images
    assert made.rows[0]["question"] in local
    packed = read_archive(made.archive).files[made.entry].decode("utf-8")
    assert "data:image/jpeg" not in packed and "data:image/webp" not in packed
    assert not re.search(r"<img[^>]*class=\"thumb\"", packed)
    assert '<script type="application/json" id="report-images">{}</script>' in packed
    assert not any(r["question"] in packed for r in made.rows)  # nor the data's question texts
    assert "copy of the report: it shows nothing of the data" in packed
    assert all(r["sample_id"] in packed for r in made.rows)  # the page still has every question's row


def test_the_archive_of_a_run_with_images_verifies(made: SimpleNamespace) -> None:
    res = run_cli("verify", str(made.archive))
    assert res.returncode == 0, res.stdout + res.stderr
    assert "report: report.html matches the page rebuilt from the archived records" in res.stdout


@pytest.mark.parametrize(
    "how",
    ["thumbnails put back", "a link added", "the accuracy changed"],
)
def test_an_edited_report_with_its_checksum_recomputed_does_not_verify(
    made: SimpleNamespace, tmp_path: Path, how: str
) -> None:
    packed = read_archive(made.archive).files[made.entry]
    forged = {
        "thumbnails put back": (made.run / REPORT).read_bytes(),
        "a link added": packed.replace(b"</footer>", b'<a href="https://evil.example/">more</a></footer>', 1),
        "the accuracy changed": re.sub(rb"\d+\.\d%", b"99.9%", packed, count=1),
    }[how]
    assert forged != packed
    res = run_cli("verify", str(repacked(made.archive, tmp_path / "forged.tar.gz", {made.entry: forged})))
    assert res.returncode == 1, res.stdout + res.stderr
    mismatches = [line for line in res.stdout.splitlines() if line.startswith("MISMATCH")]
    assert len(mismatches) == 1 and made.entry in mismatches[0], res.stdout
    assert "Traceback" not in res.stderr


def test_archiving_again_later_gives_the_same_report(made: SimpleNamespace, tmp_path: Path) -> None:
    """The packed page's time stamp comes from the run, not the clock (the archive is deterministic)."""
    again = tmp_path / "again.tar.gz"
    res = run_cli("archive", "--run-root", str(made.run), "--output", str(again))
    assert res.returncode == 0, res.stderr
    assert read_archive(again).files[made.entry] == read_archive(made.archive).files[made.entry]
