"""The metrics of a merged run (pure functions of its rows) and the summary dict they make up."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any, Literal

from evaluator.core.jsonl import is_int, is_num
from evaluator.core.usage import extra_usage_stats
from evaluator.data.benchmarks.base import Benchmark
from evaluator.data.parquet import DataOrigin
from evaluator.data.reasoning import (
    ReasoningObserved,
    inline_think_count,
    inline_think_warnings,
    observed,
    shows_reasoning,
)
from evaluator.request.ratelimit import rate_limit_stats
from evaluator.runfolder.batches import run_batch_summary
from evaluator.runfolder.runconfig import RunConfig
from evaluator.scoring.base import (
    BUCKETS,
    OUTCOMES,
    SUMMARY_SCHEMA_VERSION,
    ZERO_BUCKET,
    bucket_of,
    group_keys,
    group_value_key,
    ordered_values,
    wilson_ci,
)
from evaluator.scoring.board import AccuracyBlock, Timeouts
from evaluator.scoring.repeats import apply_repeats
from evaluator.scoring.row import ScoredRow
from evaluator.scoring.stats import CONFIDENCE, PERCENTILES, describe
from evaluator.scoring.summary_shape import (
    BucketBreakdown,
    BucketValue,
    ErrorAnatomy,
    FallbackDiagnostic,
    GroupBreakdown,
    GroupValue,
    Inputs,
    ManifestCheck,
    Methods,
    Summary,
    SummaryData,
    UsageSummary,
)


def accuracy_block(rows: list[ScoredRow]) -> AccuracyBlock:
    n = len(rows)
    correct = sum(1 for r in rows if r.correct)
    return {
        "questions": n,
        "correct": correct,
        "accuracy": correct / n if n else None,
        "ci95": wilson_ci(correct, n),
    }


def outcome_counts(rows: list[ScoredRow]) -> dict[str, int]:
    c = Counter(r.outcome for r in rows)
    return {k: c.get(k, 0) for k in OUTCOMES}


def extra_metrics_of(benchmark: Benchmark, rows: list[ScoredRow]) -> dict[str, float]:
    answers = [r.parsed_answer if r.outcome == "ok" else None for r in rows]
    return dict(sorted(benchmark.extra_metrics(answers, [r.ground_truth for r in rows]).items()))


def group_breakdown(benchmark: Benchmark, rows: list[ScoredRow]) -> dict[str, GroupBreakdown]:
    out: dict[str, GroupBreakdown] = {}
    for name in benchmark.group_fields:
        members: dict[str, list[ScoredRow]] = {}
        multi = False
        for row in rows:
            value = row.groups.get(name)
            if isinstance(value, list):
                multi = True
                for key in group_keys(row.groups, name):
                    members.setdefault(key, []).append(row)
            else:
                members.setdefault(group_value_key(value), []).append(row)
        order = ordered_values(benchmark, name, set(members))
        values: dict[str, GroupValue] = {}
        for key in order:
            sub = members.get(key, [])
            values[key] = {
                **accuracy_block(sub),
                "outcomes": outcome_counts(sub),
                "extra_metrics": extra_metrics_of(benchmark, sub) if sub else {},
            }
        out[name] = {"multi_valued": multi, "order": order, "values": values}
    return out


def error_anatomy(rows: list[ScoredRow]) -> ErrorAnatomy:
    """Over questions with a parsed answer and a known ground truth."""
    errs = [
        r.parsed_answer - r.ground_truth
        for r in rows
        if r.outcome == "ok" and r.parsed_answer is not None and r.ground_truth is not None
    ]
    n = len(errs)

    def rate(k: int) -> float | None:
        return k / n if n else None

    over = sum(1 for e in errs if e > 0)
    under = sum(1 for e in errs if e < 0)
    off1 = sum(1 for e in errs if abs(e) == 1)
    exact = sum(1 for e in errs if e == 0)
    abs_errs = [abs(e) for e in errs]
    return {
        "parsed": n,
        "exact": exact,
        "exact_rate": rate(exact),
        "mean_absolute_error": sum(abs_errs) / n if n else None,
        "median_absolute_error": describe(abs_errs)["p50"],
        "mean_signed_error": sum(errs) / n if n else None,
        "over_count": over,
        "over_count_rate": rate(over),
        "under_count": under,
        "under_count_rate": rate(under),
        "off_by_one": off1,
        "off_by_one_rate": rate(off1),
    }


def bucket_breakdown(benchmark: Benchmark, rows: list[ScoredRow]) -> BucketBreakdown:
    buckets = list(BUCKETS)
    truths = [r.ground_truth for r in rows]
    if benchmark.zero_counts or 0 in truths:
        buckets.insert(0, ZERO_BUCKET)
    members: dict[str, list[ScoredRow]] = {name: [] for name, _, _ in buckets}
    bucket_by_truth: dict[int, str] = {}  # ints only (bools are not ground truths here)
    for row in rows:
        truth = row.ground_truth
        if is_int(truth):
            name = bucket_by_truth.get(truth)
            if name is None:
                name = bucket_by_truth[truth] = bucket_of(truth, buckets)
        else:
            name = bucket_of(None, buckets)
        members.setdefault(name, []).append(row)
    order = [name for name, _, _ in buckets] + (["unknown"] if members.get("unknown") else [])
    values: dict[str, BucketValue] = {}
    for name in order:
        sub = members[name]
        anatomy = error_anatomy(sub)
        values[name] = {
            **accuracy_block(sub),
            "parsed": anatomy["parsed"],
            "mean_absolute_error": anatomy["mean_absolute_error"],
        }
    return {"order": order, "values": values}


def usage_stats(rows: list[ScoredRow]) -> UsageSummary:
    prompt: list[Any] = []
    completion: list[Any] = []
    total: list[Any] = []
    for r in rows:  # one pass for the three keys (each list keeps row order)
        u = r.usage
        if u is not None:
            for v, into in (
                (u.prompt_tokens, prompt),
                (u.completion_tokens, completion),
                (u.total_tokens, total),
            ):
                if is_num(v):
                    into.append(v)
    earlier = [a for r in rows for a in r.earlier_attempts]
    earlier_tokens = [t for a in earlier if is_num(t := a.usage.total_tokens)]
    out: UsageSummary = {
        "prompt_tokens": describe(prompt, with_sum=True),
        "completion_tokens": describe(completion, with_sum=True),
        "total_tokens": describe(total, with_sum=True),
        "earlier_attempts": {"responses": len(earlier), "total_tokens": sum(earlier_tokens)},
    }
    failed = [e.usage for r in rows for e in r.failed_attempts if e.usage is not None]
    out.update(extra_usage_stats([r.usage for r in rows], failed))
    return out


def reasoning_block(config: RunConfig, rows: list[ScoredRow]) -> ReasoningObserved:
    """summary.json `reasoning`: the declared mode and how many answered responses showed reasoning
    (evaluator.data.reasoning: a reasoning text, reported reasoning tokens or a think block); where the
    provider cannot show reasoning, observable false and no share."""
    answered = [r for r in rows if r.outcome in ("ok", "parse_failure")]
    return observed(
        config.reasoning,
        (
            shows_reasoning(
                r.reasoning_text, r.usage.reasoning_tokens if r.usage is not None else None, r.response_text
            )
            for r in answered
        ),
        # False when the run's preset says its provider cannot show reasoning
        not (config.preset and config.preset.get("reasoning_observable") is False),
    )


def timeout_block(rows: list[ScoredRow]) -> Timeouts:
    """summary.json `timeouts`: the rows given up on whose last attempt timed out, and the rows answered
    only after a timed-out attempt (of their last send or of an earlier, parse-retried one). A timed-out
    attempt that is retried is a new sample (at temperature > 0, maybe a shorter answer): how many rows a
    slow server touched so."""
    last = after = 0
    for r in rows:
        if r.outcome == "request_error":
            last += bool(r.retry_errors) and r.retry_errors[-1].kind == "timeout"
        elif r.outcome in ("ok", "parse_failure"):
            after += any(e.kind == "timeout" for e in r.failed_attempts)
    return {"last_attempt_timed_out": last, "answered_after_timeout": after}


def fallback_diagnostic(benchmark: Benchmark, rows: list[ScoredRow]) -> FallbackDiagnostic:
    """Last-integer fallback over the visible text of every response: a diagnostic, never the score."""
    correct = rescued = lost = 0
    for r in rows:
        answer = benchmark.fallback(r.response_text) if r.outcome in ("ok", "parse_failure") else None
        hit = bool(benchmark.is_correct(answer, r.ground_truth))
        correct += hit
        if hit and not r.correct:
            rescued += 1
        if r.correct and not hit:
            lost += 1
    n = len(rows)
    return {
        "label": "DIAGNOSTIC ONLY: last integer in the visible response text; not the primary protocol",
        "questions": n,
        "correct": correct,
        "accuracy": correct / n if n else None,
        "ci95": wilson_ci(correct, n),
        "correct_only_with_fallback": rescued,
        "correct_only_with_primary_parser": lost,
    }


OriginKey = Literal["source", "dataset", "requested_revision", "revision", "pattern"]


def _config_digest(config: RunConfig) -> SummaryData:
    data = config.data
    keep: tuple[OriginKey, ...] = ("source", "dataset", "requested_revision", "revision", "pattern")
    origin: DataOrigin = {}
    for k in keep:  # as run_config.json holds them
        if k in data:
            origin[k] = data[k]
    return {
        "origin": origin,
        "dataset_questions": data.get("questions"),
        "full_manifest_sha256": data.get("manifest_sha256"),
        "selection_manifest_sha256": (data.get("selection") or {}).get("manifest_sha256"),
    }


def summarize(
    run_root: Path,
    config: RunConfig,
    benchmark: Benchmark,
    rows: list[ScoredRow],
    data_check: ManifestCheck,
    inputs: Inputs,
    warnings: list[str],
) -> Summary:
    overall = accuracy_block(rows)
    lines = [r.line for r in rows]  # what the record-level summaries (request, runfolder, data) read
    parse_status, finish = _status_counts(rows)
    latencies = [r.latency_s for r in rows if r.latency_s is not None]
    attempts = [r.attempts for r in rows if r.attempts is not None]
    summary: Summary = {
        "schema_version": SUMMARY_SCHEMA_VERSION,
        "benchmark": benchmark.name,
        "run_name": run_root.resolve().name,
        "model": config.model,
        "backend": config.backend,
        "sampling": config.sampling,
        "retry_parse_failures": config.retry_parse_failures,
        "data": {**_config_digest(config), **data_check, "questions": len(rows)},
        "inputs": inputs,
        "methods": _methods(),
        "primary": {"metric": "exact_count_accuracy", **overall},
        "outcomes": outcome_counts(rows),
        "parse_status": dict(sorted(parse_status.items())),
        "finish_reasons": dict(sorted(finish.items())),
        "groups": group_breakdown(benchmark, rows),
        "extra_metrics": extra_metrics_of(benchmark, rows),
        "error_anatomy": error_anatomy(rows),
        "count_buckets": bucket_breakdown(benchmark, rows),
        "usage": usage_stats(rows),
    }
    if think := inline_think_count(lines).get("inline_think_responses"):
        summary["inline_think_responses"] = think
    summary["reasoning"] = reasoning_block(config, rows)
    if strip := config.strip_tokens:
        summary["strip_tokens"] = strip
    summary["latency_s"] = describe(latencies)
    summary["http_attempts"] = {"sum": sum(attempts), "rows_retried": sum(1 for a in attempts if a > 1)}
    summary["timeouts"] = timeout_block(rows)
    if limits := rate_limit_stats(lines):
        summary["rate_limits"] = limits
    if batch := run_batch_summary(run_root, lines):
        summary["batch"] = batch
    summary["diagnostic"] = {"last_integer_fallback": fallback_diagnostic(benchmark, rows)}
    summary["plots"] = {}
    summary["warnings"] = list(warnings) + inline_think_warnings(lines)
    k = config.repeat_count
    if k > 1:
        _apply_repeats_view(summary, benchmark, rows, k)
    return summary


def _status_counts(rows: list[ScoredRow]) -> tuple[Counter, Counter]:
    """Parse statuses of the answered rows, and finish reasons of the rows that got a reply."""
    parse_status = Counter(str(r.parse_status) for r in rows if r.outcome in ("ok", "parse_failure"))
    finish = Counter(
        group_value_key(r.finish_reason) for r in rows if r.outcome != "missing" and r.outcome != "data_error"
    )
    return parse_status, finish


def _methods() -> Methods:
    return {
        "primary_metric": "exact-count accuracy = correct / all questions of the run's manifest",
        "interval": "wilson",
        "confidence": CONFIDENCE,
        "percentiles": "linear interpolation between order statistics",
        "percentile_points": list(PERCENTILES),
        "count_buckets": [name for name, _, _ in BUCKETS],
    }


def _apply_repeats_view(summary: Summary, benchmark: Benchmark, rows: list[ScoredRow], k: int) -> None:
    """Accuracies per question over the K repeats (evaluator.scoring.repeats), in place."""
    summary["data"]["questions"] = len(rows) // k
    summary["data"]["responses"] = len(rows)
    buckets = [ZERO_BUCKET, *BUCKETS] if "0" in summary["count_buckets"]["order"] else list(BUCKETS)
    apply_repeats(summary, benchmark, rows, k, lambda row: bucket_of(row.ground_truth, buckets))
