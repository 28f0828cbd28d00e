"""scores/report.html and the comparison page, built from real run folders (evaluate + score via the CLI).

The browser checks are in test_report_browser.py; these read the HTML as text.
"""

from __future__ import annotations

import base64
import io
import json
import re
import shutil
from html.parser import HTMLParser
from pathlib import Path

import pytest
from PIL import Image
from support.cli import REPO, run_cli
from support.datagen import doccount_rows, write_doccount
from support.reports import INJECTION

from evaluator.cli.base import show_output
from evaluator.report import clip_text, thumbnail_data_url, write_compare_report, write_report


@pytest.fixture
def runs(report_runs):
    return report_runs


def copy_run(run: Path, dst: Path) -> Path:
    shutil.copytree(run, dst)
    return dst


class RowParser(HTMLParser):
    """Collects the question rows (tr.q) with their data attributes, and every src/href."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: list[dict[str, str]] = []
        self.urls: list[str] = []
        self.thumbs: list[str] = []
        self.meta_csp: str | None = None
        self._row: dict[str, str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        if tag == "tr" and "q" in a.get("class", "").split():
            self._row = a
            self.rows.append(a)
        if tag == "img" and "thumb" in a.get("class", "").split() and self._row is not None:
            self.thumbs.append(self._row["data-sid"])
        for k in ("src", "href", "action", "poster", "srcset"):
            if k in a:
                self.urls.append(a[k])
        if tag == "meta" and a.get("http-equiv", "").lower() == "content-security-policy":
            self.meta_csp = a.get("content")


def parse(path: Path) -> tuple[str, RowParser]:
    text = path.read_text(encoding="utf-8")
    p = RowParser()
    p.feed(text)
    return text, p


def images_blob(text: str) -> dict[str, str]:
    m = re.search(r'<script type="application/json" id="report-images">(.*?)</script>', text, re.S)
    assert m
    return json.loads(m.group(1))


def test_report_has_every_question_and_nothing_external(runs) -> None:
    run, rows, expected = runs["a"]
    text, p = parse(run / "scores" / "report.html")
    ids = [r["sample_id"] for r in rows]
    assert [r["data-sid"] for r in p.rows] == ids  # full denominator, manifest order
    for r in p.rows:
        e = expected[r["data-sid"]]
        assert r["data-f-status"] == f"|{e['outcome']}|"
        assert r["data-f-result"] == ("|correct|" if e["correct"] else "|wrong|")
        err = e["error"]
        assert r["data-s-err"] == ("" if err is None else str(abs(err)))
        assert (
            r["data-f-dir"]
            == "|" + ("none" if err is None else "over" if err > 0 else "under" if err < 0 else "exact") + "|"
        )
    # thumbnails: every verified image, none for the data error and the replaced image
    assert p.thumbs == [sid for sid in ids if not expected[sid]["no_thumb"]]
    blob = images_blob(text)
    assert len(blob) == len(p.thumbs) and all(u.startswith("data:image/jpeg;base64,") for u in blob.values())
    assert "do not match the SHA-256 recorded in the run" in text and rows[7]["sample_id"] in text
    # header: model, accuracy with interval, class table, both plots inline
    assert "model-a" in text and "exact-count accuracy" in text and "95% Wilson interval" in text
    assert text.count('class="stats group-table"') == 1
    for cls in ("Brand Logo", "Photograph", "Table", "Chart / Graph"):
        assert f"<td>{cls}</td>" in text
    assert text.count('<img class="plot" src="data:image/png;base64,') == 2
    # question texts from the data, reasoning collapsed, fallback shown
    assert rows[0]["question"] in text
    assert "<details><summary>reasoning (" in text and "fallback:" in text
    # nothing to fetch: every URL attribute is a data URL, a strict CSP, no url() in styles
    assert p.urls and all(u.startswith("data:") for u in p.urls)
    assert p.meta_csp is not None and "default-src 'none'" in p.meta_csp and "connect-src" not in p.meta_csp
    assert not re.search(r"url\(\s*['\"]?(?!data:)", text)
    assert "@import" not in text
    # model output is escaped, never markup
    assert INJECTION not in text and "&lt;script&gt;window.__pwned" in text
    assert text.count("<script") == 2  # the image blob and the page script, nothing else


def test_score_writes_the_report_that_report_regenerates(tmp_path, runs) -> None:
    """`score` hands its merged run to the report (no second merge); the page is the same as `report`'s."""
    run = copy_run(runs["a"][0], tmp_path / "run")
    res = run_cli("score", "--run-root", str(run))
    assert res.returncode == 0, res.stderr
    from_score = (run / "scores" / "report.html").read_bytes()
    res = run_cli("report", "--run-root", str(run))
    assert res.returncode == 0, res.stderr
    # The page states when it was written (to the minute); two commands may straddle a minute.
    stamp = re.compile(rb"\d{4}-\d\d-\d\d \d\d:\d\d UTC")
    again = (run / "scores" / "report.html").read_bytes()
    assert len(stamp.findall(from_score)) == 2
    assert stamp.sub(b"T", again) == stamp.sub(b"T", from_score)


def test_no_images_option_and_output(tmp_path, runs) -> None:
    run, rows, _ = runs["a"]
    out = tmp_path / "elsewhere" / "r.html"
    data = str(run.parent / "data" / "*.parquet")
    res = run_cli("report", "--run-root", str(run), "--no-images", "--output", str(out), "--data-files", data)
    assert res.returncode == 0, res.stderr
    assert str(out) in res.stdout
    text, p = parse(out)
    assert len(p.rows) == len(rows) and p.thumbs == []
    assert images_blob(text) == {}
    assert "data:image/jpeg" not in text
    assert "written without images" in text
    assert rows[1]["question"] in text  # questions still come from the (local) data


def test_data_not_found_still_writes_the_report(tmp_path, runs) -> None:
    run, rows, _ = runs["a"]
    run = copy_run(run, tmp_path / "run")
    config = json.loads((run / "run_config.json").read_text())
    config["data"]["pattern"] = str(tmp_path / "gone" / "*.parquet")  # the recorded data is not there
    (run / "run_config.json").write_text(json.dumps(config))
    res = run_cli("report", "--run-root", str(run))
    assert res.returncode == 0, res.stderr
    assert "data was not found" in res.stderr and "--data-files" in res.stderr
    text, p = parse(run / "scores" / "report.html")
    assert len(p.rows) == len(rows) and p.thumbs == []
    assert "data was not found" in text
    # --data-files pointing at a copy of the data brings the thumbnails back (verified per image)
    copy = tmp_path / "copy" / "test-00000-of-00001.parquet"
    write_doccount(copy, doccount_rows(12))
    res = run_cli("report", "--run-root", str(run), "--data-files", str(copy.parent / "*.parquet"))
    assert res.returncode == 0, res.stderr
    text, p = parse(run / "scores" / "report.html")
    # row 6 was evaluated as a data error (its released hash was wrong), so its bytes do not match
    assert p.thumbs == [r["sample_id"] for i, r in enumerate(rows) if i != 6]


def test_hub_source_unavailable_offline(tmp_path, runs, monkeypatch, capsys) -> None:
    run, rows, _ = runs["a"]
    run = copy_run(run, tmp_path / "run")
    config_path = run / "run_config.json"
    config = json.loads(config_path.read_text())
    config["data"] = {
        **config["data"],
        "source": "hub",
        "dataset": "nobody/no-such-dataset",
        "revision": "0" * 40,
    }
    config["data"].pop("pattern", None)
    config_path.write_text(json.dumps(config))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    show_output()  # the library's notes reach stderr as on the command line (it is quiet otherwise)
    path = write_report(run)
    err = capsys.readouterr().err
    assert "nobody/no-such-dataset" in err
    text, p = parse(path)
    assert len(p.rows) == len(rows) and p.thumbs == []
    assert "Hugging Face <code>nobody/no-such-dataset</code>" in text
    path = write_report(run, images=False)  # without images the hub is never contacted
    assert "not in the local Hugging Face cache" in capsys.readouterr().err


def test_bad_run_folder_is_a_user_error(tmp_path) -> None:
    res = run_cli("report", "--run-root", str(tmp_path / "nope"))
    assert res.returncode == 2
    assert res.stderr.startswith("error: ") and "Traceback" not in res.stderr


def test_compare_page_puts_disagreements_first(tmp_path, runs) -> None:
    run_a, rows, _ = runs["a"]
    run_b, _, _ = runs["b"]
    data = str(run_a.parent / "data" / "*.parquet")
    out = write_compare_report(run_a, run_b, tmp_path / "cmp" / "compare.html", data_files=data)
    text, p = parse(out)
    ids = [r["sample_id"] for r in rows]
    got = [r["data-sid"] for r in p.rows]
    assert sorted(got) == sorted(ids)
    ranks = [int(r["data-s-rank"]) for r in p.rows]
    assert ranks == sorted(ranks)
    # row 0: A right, B wrong; row 1: A wrong, B right; row 2: both wrong with the same answer
    by = {r["data-sid"]: r for r in p.rows}
    assert by[ids[0]]["data-f-verdict"] == "|only_a|disagree|"
    assert by[ids[1]]["data-f-verdict"] == "|only_b|disagree|"
    assert got[:2] == ids[:2]
    assert by[ids[3]]["data-f-verdict"] == "|both_wrong_same|"
    assert "model-a" in text and "model-b" in text
    assert p.thumbs and all(u.startswith("data:") for u in p.urls)


def test_thumbnail_is_a_small_jpeg_copy() -> None:
    img = Image.new("RGBA", (1200, 1600), (10, 200, 30, 0))
    buf = io.BytesIO()
    img.save(buf, format="PNG")
    original = buf.getvalue()
    before = bytes(original)
    url = thumbnail_data_url(original, 320)
    assert original == before
    assert url.startswith("data:image/jpeg;base64,")
    thumb = Image.open(io.BytesIO(base64.b64decode(url.split(",", 1)[1])))
    assert thumb.format == "JPEG" and max(thumb.size) == 320 and thumb.size == (240, 320)
    assert thumb.getpixel((5, 5)) == pytest.approx((255, 255, 255), abs=3)  # transparency on white


def test_long_texts_keep_head_and_tail() -> None:
    text = "A" * 30_000 + "MIDDLE" + "Z" * 30_000
    clipped, omitted = clip_text(text, keep=1000)
    assert clipped.startswith("A" * 1000) and clipped.endswith("Z" * 1000)
    assert omitted == len(text) - 2000 and "MIDDLE" not in clipped
    assert clip_text("short") == ("short", 0)


def test_assets_are_declared_as_package_data() -> None:
    """The stylesheet, script and page templates are files; a non-editable install needs them listed as
    package data."""
    import tomllib

    data = tomllib.loads((REPO / "pyproject.toml").read_text())
    patterns = data["tool"]["setuptools"].get("package-data", {}).get("evaluator.report", [])
    assert any(p.startswith("assets/") for p in patterns), patterns
    assert any(p.startswith("templates/") for p in patterns), patterns
