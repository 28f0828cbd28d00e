"""The report's confusion matrix, per-class errors and absurd answers, and scores/per_question.csv, from a
real run (evaluate against the loopback server, then score, through the command line)."""

from __future__ import annotations

import csv
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest
from support.cli import eval_args, run_cli
from support.datagen import doccount_rows, write_doccount
from support.openai_test_server import TestServer

ABSURD = 10**29 + 7  # a 30-digit integer, as a broken or hostile model sends
# row i: offset from the truth (None: no answer tag; "absurd": the 30-digit answer)
OFFSETS: dict[int, int | str | None] = {0: 0, 1: 2, 2: -1, 3: None, 4: 0, 5: "absurd", 6: 0, 7: 1}


class Tables(HTMLParser):
    """Every table.confusion: its data-label, header cells and rows of cell texts."""

    def __init__(self) -> None:
        super().__init__()
        self.tables: dict[str, list[list[str]]] = {}
        self.groups: list[list[str]] = []
        self._table: list[list[str]] | None = None
        self._cell: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "table" and "confusion" in (a.get("class") or ""):
            self._table = self.tables.setdefault(str(a.get("data-label")), [])
        elif tag == "table" and "group-table" in (a.get("class") or ""):
            self._table = []
            self.groups.append(self._table)  # type: ignore[arg-type]
        elif tag == "tr" and self._table is not None:
            self._table.append([])
        elif tag in ("td", "th") and self._table is not None:
            self._cell = []

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "th") and self._cell is not None and self._table is not None:
            self._table[-1].append("".join(self._cell).strip())
            self._cell = None
        elif tag == "table":
            self._table = None

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell.append(data)


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> tuple[Path, list[dict]]:
    tmp = tmp_path_factory.mktemp("counts")
    rows = doccount_rows(8)
    write_doccount(tmp / "data" / "test-00000-of-00001.parquet", rows)
    answers = {}
    for i, r in enumerate(rows):
        off = OFFSETS[i]
        n = ABSURD if off == "absurd" else None if off is None else r["answer"] + off
        answers[r["image_sha256"]] = "I cannot tell." if n is None else f"<answer>{n}</answer>"
    with TestServer() as server:
        server.set_config({"answers": answers})
        res = run_cli(
            "evaluate", *eval_args(server.base_url, str(tmp / "data" / "*.parquet"), tmp / "run"), "--quiet"
        )
    assert res.returncode == 0, res.stderr
    res = run_cli("score", "--run-root", str(tmp / "run"))
    assert res.returncode == 0, res.stderr
    res = run_cli("report", "--run-root", str(tmp / "run"), "--data-files", str(tmp / "data" / "*.parquet"))
    assert res.returncode == 0, res.stderr
    return tmp / "run", rows


def test_the_confusion_matrix_counts_questions_per_true_and_answered_count(run) -> None:
    root, rows = run
    page = Tables()
    page.feed((root / "scores" / "report.html").read_text())
    table = page.tables["all questions"]
    head = table[0][1:]
    cells = {(line[0], head[j]): c for line in table[1:] for j, c in enumerate(line[1:])}
    expected: dict[tuple[str, str], int] = {}
    for i, r in enumerate(rows):
        off = OFFSETS[i]
        col = "absurd" if off == "absurd" else "no answer" if off is None else str(r["answer"] + off)
        expected[(str(r["answer"]), col)] = expected.get((str(r["answer"]), col), 0) + 1
    shown = {k: int(v) for k, v in cells.items() if v}
    assert shown == expected
    assert sum(shown.values()) == len(rows)
    # one matrix per class too, each with that class's questions only
    for cls in {r["target_class"] for r in rows}:
        per_class = page.tables[cls]
        assert sum(int(c) for line in per_class[1:] for c in line[1:] if c) == 2


def test_absurd_answers_are_counted_and_the_median_is_beside_the_mean(run) -> None:
    root, rows = run
    html = (root / "scores" / "report.html").read_text()
    largest = max(r["answer"] for r in rows)
    assert re.search(rf"absurd answers \(&gt; {10 * largest:,}\)</th>", html)
    page = Tables()
    page.feed(html)
    (classes,) = page.groups
    head = classes[0]
    assert head[5:7] == ["MAE", "median abs. error"]
    by_class = {line[0]: dict(zip(head, line, strict=True)) for line in classes[1:]}
    # row 5 (class CLASSES[1]) answered the absurd number, row 1 (same class) was 2 over: median of {2, huge}
    absurd_class = rows[5]["target_class"]
    errs = sorted([2, ABSURD - rows[5]["answer"]])
    assert float(by_class[absurd_class]["MAE"]) == pytest.approx(sum(errs) / 2, rel=1e-9)
    assert float(by_class[absurd_class]["median abs. error"]) == pytest.approx(sum(errs) / 2, rel=1e-9)
    other = rows[2]["target_class"]  # rows 2 (-1) and 6 (exact)
    assert (by_class[other]["MAE"], by_class[other]["median abs. error"]) == ("0.50", "0.50")
    assert "1 absurd" in html  # the summary line of the whole-run matrix


def test_per_question_csv_has_one_line_per_question_with_its_facts(run) -> None:
    root, rows = run
    with (root / "scores" / "per_question.csv").open(newline="", encoding="utf-8") as f:
        lines = list(csv.DictReader(f))
    assert list(lines[0]) == [
        "sample_id", "target_class", "question", "ground_truth", "parsed_answer", "parse_status", "outcome",
        "correct", "latency_s", "prompt_tokens", "completion_tokens", "reasoning_tokens", "total_tokens",
    ]  # fmt: skip
    assert [x["sample_id"] for x in lines] == [r["sample_id"] for r in rows]
    for i, (line, r) in enumerate(zip(lines, rows, strict=True)):
        off = OFFSETS[i]
        assert line["target_class"] == r["target_class"] and line["question"] == r["question"]
        assert int(line["ground_truth"]) == r["answer"]
        if off is None:
            assert (line["parsed_answer"], line["outcome"]) == ("", "parse_failure")
        else:
            assert int(line["parsed_answer"]) == (ABSURD if off == "absurd" else r["answer"] + off)
        assert line["correct"] == ("true" if off == 0 else "false")
        assert float(line["latency_s"]) > 0 and int(line["total_tokens"]) > 0


def test_score_without_the_report_still_writes_the_csv(run, tmp_path) -> None:
    import shutil

    root = shutil.copytree(run[0], tmp_path / "copy")
    (root / "scores" / "per_question.csv").unlink()
    res = run_cli("score", "--run-root", str(root), "--no-report")
    assert res.returncode == 0, res.stderr
    text = (root / "scores" / "per_question.csv").read_text()
    assert len(text.splitlines()) == 1 + len(run[1])
