"""scores/per_question.csv: one line per question (per response with --repeats), for a spreadsheet or pandas.

Columns: sample_id, repeat (with --repeats), the benchmark's subgroup fields (DocCount: target_class;
a list field's values joined with "; "), question (from the data; blank when the data was not found),
ground_truth, parsed_answer, parse_status, outcome, correct, latency_s, and the token counts. Every
question of the run is a line, missing ones included (outcome `missing`), as in the report. A text cell
that starts like a spreadsheet formula (`=`, `+`, `-`, `@`, tab, CR: a sample id or question from the data)
gets a leading `'` (core.text.csv_cell); numbers are written as they are.
"""

from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import Any

from evaluator.core.atomic import write_atomic
from evaluator.core.records import Usage
from evaluator.core.text import csv_cell
from evaluator.data.benchmarks.base import Benchmark
from evaluator.report.pieces import repeats_of
from evaluator.scoring import MergedRun
from evaluator.scoring.base import SCORES_DIR
from evaluator.scoring.row import ScoredRow

PER_QUESTION_FILE = "per_question.csv"
TOKEN_KEYS = ("prompt_tokens", "completion_tokens", "reasoning_tokens", "total_tokens")


def _cell(value: Any) -> Any:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return "; ".join(str(_cell(v)) for v in value)
    return value


def per_question_header(benchmark: Benchmark, repeats: bool) -> list[str]:
    head = ["sample_id", *(["repeat"] if repeats else []), *benchmark.group_fields, "question"]
    head += ["ground_truth", "parsed_answer", "parse_status", "outcome", "correct", "latency_s"]
    return head + list(TOKEN_KEYS)


def per_question_line(row: ScoredRow, benchmark: Benchmark, question: str | None, repeats: bool) -> list[Any]:
    usage = row.usage or Usage()
    state = row.outcome
    line: list[Any] = [row.sample_id, *([row.repeat] if repeats else [])]
    line += [row.groups.get(name) for name in benchmark.group_fields]
    line += [question, row.ground_truth, row.parsed_answer if state == "ok" else None]
    line += [row.parse_status if state in ("ok", "parse_failure") else None, state]
    line += [row.correct, row.latency_s]
    return [_cell(v) for v in line + [getattr(usage, k) for k in TOKEN_KEYS]]


def per_question_csv(merged: MergedRun, questions: dict[str, str]) -> str:
    repeats = repeats_of(merged.summary) > 1
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow([csv_cell(c) for c in per_question_header(merged.benchmark, repeats)])
    for row in merged.rows:
        question = questions.get(row.sample_id)
        writer.writerow([csv_cell(c) for c in per_question_line(row, merged.benchmark, question, repeats)])
    return out.getvalue()


def write_per_question(merged: MergedRun, questions: dict[str, str]) -> Path:
    target = merged.run_root / SCORES_DIR / PER_QUESTION_FILE
    target.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(target, per_question_csv(merged, questions).encode("utf-8"))
    return target
