"""Scored rows and merged runs built in memory, for the leaderboard's tests (no run folder, no CLI)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from evaluator.data.benchmarks import get_benchmark
from evaluator.runfolder.runconfig import RunConfig
from evaluator.scoring import MergedRun, outcome_of
from evaluator.scoring.leaderboard import BoardRun, build_leaderboard
from evaluator.scoring.row import ScoredRow, row_from_line

CLASSES = ("Brand Logo", "Photograph", "Table", "Chart / Graph")


def row(i: int, correct: bool, **kw: Any) -> dict[str, Any]:
    truth = i % 5 + 1
    r = {
        "sample_id": f"doc-{i:04d}",
        "image_sha256": f"{i:064x}",
        "groups": {"target_class": CLASSES[i % 4]},
        "target_class": CLASSES[i % 4],
        "ground_truth": truth,
        "status": "ok",
        "parsed_answer": truth if correct else truth + 1,
        "finish_reason": "stop",
        "usage": {"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120},
        **kw,
    }
    r["correct"] = r["status"] == "ok" and r["parsed_answer"] == truth
    r["outcome"] = outcome_of(r)
    return r


def merged(
    rows: list[dict[str, Any]], model: str = "m", repeats: int = 1, url: str = "http://h:1/v1"
) -> MergedRun:
    config = {"benchmark": "doccount", "model": model, "endpoint": url, "endpoints": [url]}
    if repeats > 1:
        config["repeats"] = repeats
    return MergedRun(Path("."), RunConfig.from_dict(config), get_benchmark("doccount"), [], typed(rows), {})


def typed(rows: list[dict[str, Any]]) -> list[ScoredRow]:
    """The rows as the merge makes them (each line read as responses.jsonl is)."""
    return [r for line in rows if (r := row_from_line(line)) is not None]


def board(*runs: tuple[str, list[dict[str, Any]]], **kw: Any) -> dict[str, Any]:
    return build_leaderboard([BoardRun(n, merged(r)) for n, r in runs], resamples=2000, **kw)
