"""No image of the data in an archive, whatever a member's name (evaluator/archive/images.py; issue 46
point 12). A real run, its page with thumbnails written into its own scores/ folder under another name,
then `archive` and `verify` as a user runs them; and an archive crafted to carry a thumbnail page."""

from __future__ import annotations

import base64
import re
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from support.archives import members, repacked
from support.cli import run_cli
from support.datagen import doccount_reply, doccount_rows, image_bytes, write_doccount
from support.openai_test_server import TestServer

from evaluator.archive.images import has_mark

pytestmark = pytest.mark.timeout(300)
# what a thumbnail looks like in a page, found without the code under test: a data: URL of an image, or a
# JPEG's bytes in base64
THUMBNAIL = re.compile(rb"data:image/(jpeg|webp|gif)|/9j/[4-7]")


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A scored run whose scores/ also holds full.html: `doccount report --output RUN/scores/full.html`."""
    base = tmp_path_factory.mktemp("images")
    rows = doccount_rows(3)
    data = str(write_doccount(base / "data" / "test-0.parquet", rows))
    run = base / "r"
    with TestServer({"answers": doccount_reply(rows)}) as srv:
        res = run_cli("evaluate", "--model", "test-model", "--base-url", srv.base_url, "--data-files", data,
                      "--run-root", str(run), "--quiet")  # fmt: skip
        assert res.returncode == 0, res.stderr
    assert run_cli("score", str(run)).returncode == 0
    res = run_cli("report", str(run), "--data-files", data, "--output", str(run / "scores" / "full.html"))
    assert res.returncode == 0, res.stderr
    assert THUMBNAIL.search((run / "scores" / "full.html").read_bytes())  # the page shows the data
    return run


def test_a_page_with_thumbnails_in_the_run_folder_is_not_archived(run: Path, tmp_path: Path) -> None:
    """On main the archive carried scores/full.html, a page of JPEG thumbnails of the data, and verify said
    OK. Now it is left out (a note names it) and no member of the archive holds a thumbnail."""
    out = tmp_path / "r.tar.gz"
    res = run_cli("archive", str(run), "--output", str(out))
    assert res.returncode == 0, res.stderr
    assert "not archived" in res.stderr and "scores/full.html" in res.stderr, res.stderr
    files = members(out)
    assert not any(name.endswith("full.html") for name in files), sorted(files)
    assert [n for n, b in files.items() if THUMBNAIL.search(b)] == []
    res = run_cli("verify", str(out))
    assert res.returncode == 0 and "images: none but the score plots" in res.stdout, res.stdout + res.stderr


@pytest.mark.parametrize("name", ["runs/r/scores/full.html", "runs/r/notes.txt", "prompts/extra.md"])
def test_an_archive_carrying_a_thumbnail_page_does_not_verify(run: Path, tmp_path: Path, name: str) -> None:
    """The page added under any name, SHA256SUMS recomputed: on main verify said OK."""
    out = tmp_path / "r.tar.gz"
    assert run_cli("archive", str(run), "--output", str(out)).returncode == 0
    page = (run / "scores" / "full.html").read_bytes()
    crafted = repacked(out, tmp_path / "c.tar.gz", {name: page})
    res = run_cli("verify", str(crafted))
    assert res.returncode == 1, res.stdout + res.stderr
    assert f"MISMATCH {name}: holds image data" in res.stdout, res.stdout


def test_an_image_in_a_plot_s_place_or_in_the_report_does_not_verify(run: Path, tmp_path: Path) -> None:
    """A JPEG of the data named as a score plot, and the archive's report.html embedding a JPEG."""
    out = tmp_path / "r.tar.gz"
    assert run_cli("archive", str(run), "--output", str(out)).returncode == 0
    files = {n.split("/", 1)[1]: b for n, b in members(out).items()}
    jpeg = image_bytes(0)
    url = b"data:image/png;base64," + base64.b64encode(jpeg)
    report = files["runs/r/scores/report.html"].replace(b"</body>", b'<img src="' + url + b'"></body>')
    crafted = repacked(
        out,
        tmp_path / "c.tar.gz",
        {"runs/r/scores/predicted_vs_true.png": jpeg, "runs/r/scores/report.html": report},
    )
    res = run_cli("verify", str(crafted))
    assert res.returncode == 1, res.stdout + res.stderr
    assert "MISMATCH runs/r/scores/predicted_vs_true.png: is not a PNG" in res.stdout, res.stdout
    assert "MISMATCH runs/r/scores/report.html: embeds an image that is not one of the archived" in res.stdout


@given(st.binary(max_size=200), st.binary(max_size=200), st.integers(1, 64))
def test_a_mark_is_found_whatever_the_chunking(before: bytes, after: bytes, size: int) -> None:
    data = before + b"data:image/jpeg;base64," + after
    chunks = [data[i : i + size] for i in range(0, len(data), size)]
    assert has_mark(chunks)
