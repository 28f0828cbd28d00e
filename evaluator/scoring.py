"""score: merge the latest record per question over the full denominator and compute accuracy.

(Minimal form; the scoring issue extends it.)
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evaluator.benchmarks import get_benchmark
from evaluator.runfolder import (
    CONFIG,
    MERGED,
    PARTIAL,
    latest_by_sample,
    read_json,
    read_jsonl,
    read_manifest,
)

SUMMARY_SCHEMA_VERSION = 1


class ScoreError(Exception):
    pass


@dataclass
class ScoreResult:
    summary: dict[str, Any]
    markdown: str
    warnings: list[str]


def missing_row(entry: Any, benchmark: str, config: dict[str, Any]) -> dict[str, Any]:
    row = {
        "sample_id": entry.sample_id,
        "benchmark": benchmark,
        "groups": entry.groups,
        "ground_truth": entry.ground_truth,
        "model": config.get("model"),
        "backend": config.get("backend"),
        "status": "missing",
        "parsed_answer": None,
        "parse_status": "no_response",
        "correct": False,
        "image_sha256": entry.image_sha256,
    }
    row.update({k: v for k, v in entry.groups.items() if k not in row})
    return row


def score_run(run_root: Path) -> ScoreResult:
    if not run_root.is_dir():
        raise ScoreError(f"run folder {run_root} does not exist; pass the folder that evaluate wrote (runs/<name>)")
    if not (run_root / CONFIG).exists():
        raise ScoreError(f"{run_root} has no {CONFIG}; is it a run folder written by doccount-evaluate?")
    config = read_json(run_root / CONFIG)
    benchmark = get_benchmark(config["benchmark"])
    manifest = list(read_manifest(run_root))
    report = read_jsonl(run_root / PARTIAL)
    warnings: list[str] = []
    if report.torn_tail:
        warnings.append(f"the last line of {PARTIAL} was torn (a crash mid-write) and was ignored")
    if report.bad_lines:
        warnings.append(f"{len(report.bad_lines)} unparseable line(s) in {PARTIAL} ignored: {report.bad_lines[:10]}")
    latest = latest_by_sample(report.records)
    ids = {e.sample_id for e in manifest}
    unknown = sorted(set(latest) - ids)
    if unknown:
        warnings.append(f"{len(unknown)} record(s) for sample ids outside this run's question set ignored")
    rows = []
    for entry in manifest:
        rec = latest.get(entry.sample_id)
        rows.append(rec if rec is not None else missing_row(entry, benchmark.name, config))
    tmp = run_root / (MERGED + ".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, sort_keys=True, ensure_ascii=False) + "\n")
    tmp.replace(run_root / MERGED)
    n = len(rows)
    correct = sum(1 for r in rows if r.get("correct") is True)
    summary = {
        "schema_version": SUMMARY_SCHEMA_VERSION,
        "benchmark": benchmark.name,
        "model": config.get("model"),
        "questions": n,
        "correct": correct,
        "accuracy": correct / n if n else 0.0,
        "warnings": warnings,
    }
    scores = run_root / "scores"
    scores.mkdir(exist_ok=True)
    (scores / "summary.json").write_text(json.dumps(summary, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    md = f"# {benchmark.name}: {config.get('model')}\n\nExact accuracy: {correct} / {n} = {summary['accuracy']:.2%}\n"
    (scores / "summary.md").write_text(md, encoding="utf-8")
    return ScoreResult(summary, md, warnings)
