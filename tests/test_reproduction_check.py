"""The reproduction's paired block pairs (question, repeat) responses and says so."""

from __future__ import annotations

from evaluator.archive.reproduce import render_comparison, reproduction_check
from evaluator.scoring.row import ScoredRow, row_from_line


def rows(correct: list[bool], repeats: int | None) -> list[ScoredRow]:
    out = []
    for i, c in enumerate(correct):
        r = {
            "sample_id": f"q{i // (repeats or 1)}",
            "correct": c,
            "parsed_answer": int(c),
            "request_sha256": "h",
        }
        if repeats:
            r["repeat"] = i % repeats
        out.append(r)
    return [row for r in out if (row := row_from_line(r))]


def test_repeated_runs_pair_responses_not_questions() -> None:
    a, b = rows([True, False, True, True], 2), rows([True, True, True, False], 2)
    c = reproduction_check(a, b)
    assert c["questions"] == 4 and c["unit"] == "responses (question, repeat)"
    assert c["table"] == {"both_right": 2, "only_original": 1, "only_reproduction": 1, "both_wrong": 0}
    assert "(4 paired responses (question, repeat))" in render_comparison(c, "a", "b")


def test_single_runs_pair_questions() -> None:
    c = reproduction_check(rows([True, False], None), rows([True, True], None))
    assert c["unit"] == "questions" and "(2 paired questions)" in render_comparison(c, "a", "b")
