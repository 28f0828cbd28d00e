"""Scoring's view of a run: the outcome names, the result types and the small helpers that the merge,
the metrics, the Markdown summary and the HTML report share (one definition each)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evaluator.core.errors import UserError
from evaluator.core.jsonl import JSONObject, is_num
from evaluator.core.vocab import OUTCOMES as OUTCOMES
from evaluator.core.vocab import Outcome
from evaluator.data.benchmarks.base import Benchmark, ManifestEntry
from evaluator.runfolder.runconfig import RunConfig
from evaluator.scoring.row import ScoredRow
from evaluator.scoring.stats import wilson_interval
from evaluator.scoring.summary_shape import Summary

SUMMARY_SCHEMA_VERSION = 3  # 3: responses.jsonl in the compact form of evaluator.core.jsonl
SCORES_DIR = "scores"
SUMMARY_JSON = "summary.json"
SUMMARY_MD = "summary.md"
# A leaderboard's folder (a sweep's `leaderboard/`) and its three files
BOARD_DIR = "leaderboard"
LEADERBOARD_JSON = "leaderboard.json"
LEADERBOARD_MD = "leaderboard.md"
BOARD_PAGE = "index.html"
BOARD_FILES = (BOARD_PAGE, LEADERBOARD_MD, LEADERBOARD_JSON)

OUTCOME_LABELS = {
    "ok": "ok (answer parsed)",
    "parse_failure": "parse failure",
    "request_error": "request error",
    "data_error": "data error",
    "missing": "missing (no record)",
}
# Ground-truth count buckets (inclusive bounds; None = open). "0" is added for benchmarks with zero counts.
BUCKETS: tuple[tuple[str, int, int | None], ...] = (
    ("1-5", 1, 5),
    ("6-10", 6, 10),
    ("11-20", 11, 20),
    ("21+", 21, None),
)
ZERO_BUCKET = ("0", 0, 0)


class ScoreError(UserError):
    """A run folder that cannot be scored (a user error: one clear message, no traceback)."""


@dataclass
class ScoreResult:
    summary: Summary
    markdown: str
    warnings: list[str]
    merged: MergedRun | None = None  # with score_run(..., keep_merged=True): for the report, not merged twice


@dataclass
class MergedRun:
    """One run folder merged: rows (one per question, manifest order) and the summary computed from them."""

    run_root: Path
    run_config: RunConfig  # run_config.json, typed: every reader (summary, compare, report) goes through it
    benchmark: Benchmark
    manifest: list[ManifestEntry]
    rows: list[ScoredRow]  # one per question (and repeat), manifest order
    summary: Summary  # what scores/summary.json holds (metrics.summarize)
    warnings: list[str] = field(default_factory=list)
    # Indices of rows built from a line json.loads had to read (NaN, lone surrogates...): see evaluator.core.jsonl.
    lenient_rows: set[int] = field(default_factory=set)


def group_value_key(value: Any) -> str:
    """A subgroup value as a JSON object key: true/false for booleans, (none) for null."""
    if value is None:
        return "(none)"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def group_keys(groups: JSONObject, name: str) -> list[str]:
    """The subgroup keys one question belongs to for one field (a list field: each of its values)."""
    value = groups.get(name)
    if isinstance(value, list):
        return [group_value_key(v) for v in dict.fromkeys(value)] or ["(none)"]
    return [group_value_key(value)]


def ordered_values(benchmark: Benchmark, name: str, seen: set[str]) -> list[str]:
    """Expected values first (in the benchmark's order), then any others sorted."""
    expected = [str(v) for v in getattr(benchmark, "expected_groups", {}).get(name, ())]
    return expected + sorted(seen - set(expected))


def bucket_of(truth: int | None, buckets: list[tuple[str, int, int | None]]) -> str:
    if truth is None:
        return "unknown"
    for name, lo, hi in buckets:
        if truth >= lo and (hi is None or truth <= hi):
            return name
    return "unknown"


def outcome_of(row: JSONObject) -> Outcome:
    status = row.get("status")
    if status == "ok":
        return "ok" if row.get("parsed_answer") is not None else "parse_failure"
    if status in ("request_error", "data_error", "missing"):
        return status
    return "missing"


def wilson_ci(successes: int, n: int) -> list[float] | None:
    ci = wilson_interval(successes, n)
    return [ci[0], ci[1]] if ci else None


def pct_text(x: Any, digits: int = 2) -> str:
    """A fraction as a percentage; n/a for anything that is not a number."""
    return "n/a" if not is_num(x) else f"{100 * x:.{digits}f}%"


def ci_text(ci: Any, dash: str = "-") -> str:
    """A [low, high] interval as percentages; n/a when there is none."""
    if not isinstance(ci, (list, tuple)) or len(ci) != 2 or not all(is_num(v) for v in ci):
        return "n/a"
    return f"{100 * ci[0]:.1f}{dash}{100 * ci[1]:.1f}%"


def num(x: Any, digits: int = 2) -> str:
    if x is None:
        return "n/a"
    if isinstance(x, int):
        return str(x)
    return f"{x:.{digits}f}"
