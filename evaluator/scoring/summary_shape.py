"""The shape of scores/summary.json (evaluator.scoring.metrics builds it; summary.md and the report read it).

TypedDicts, not Structs, as in evaluator.scoring.board: the summary is written by `utf8_json` as the dicts
it is made of, so its bytes stay what they were, and every reader is checked against these keys.
total=False where a key is there only sometimes (a run with repeats, batches, rate-limit refusals,
inline reasoning, reported reasoning or cached tokens). The schema is documented in docs/scoring.md.
"""

from __future__ import annotations

from typing import Any, TypedDict

from evaluator.core.usage import UsageExtras
from evaluator.data.parquet import DataOrigin
from evaluator.data.reasoning import ReasoningObserved
from evaluator.request.ratelimit import RateLimitStats
from evaluator.runfolder.batches import BatchSummary
from evaluator.scoring.board import AccuracyBlock, Timeouts

Described = dict[str, float | int | None]
"""stats.describe: n, (sum,) mean, min, p50/p90/p95/p99, max."""


class Primary(AccuracyBlock):
    metric: str


class GroupValue(AccuracyBlock, total=False):
    """One value of a subgroup field: its accuracy, outcomes and the benchmark's extra metrics."""

    outcomes: dict[str, int]
    extra_metrics: dict[str, float]


class GroupBreakdown(TypedDict):
    multi_valued: bool
    order: list[str]
    values: dict[str, GroupValue]


class BucketValue(AccuracyBlock, total=False):
    """One ground-truth count bucket: its accuracy, and the error over its parsed answers."""

    parsed: int
    mean_absolute_error: float | None


class BucketBreakdown(TypedDict):
    order: list[str]
    values: dict[str, BucketValue]


class ErrorAnatomy(TypedDict):
    """summary.json `error_anatomy`: over the answers parsed against a known ground truth."""

    parsed: int
    exact: int
    exact_rate: float | None
    mean_absolute_error: float | None
    median_absolute_error: float | int | None
    mean_signed_error: float | None
    over_count: int
    over_count_rate: float | None
    under_count: int
    under_count_rate: float | None
    off_by_one: int
    off_by_one_rate: float | None


class FallbackDiagnostic(AccuracyBlock):
    """summary.json `diagnostic.last_integer_fallback`."""

    label: str
    correct_only_with_fallback: int
    correct_only_with_primary_parser: int


class Diagnostic(TypedDict):
    last_integer_fallback: FallbackDiagnostic


class EarlierAttempts(TypedDict):
    responses: int
    total_tokens: int | float


class UsageSummary(UsageExtras, total=False):
    """summary.json `usage`: the three token counts described, the earlier attempts, and the extras."""

    prompt_tokens: Described
    completion_tokens: Described
    total_tokens: Described
    earlier_attempts: EarlierAttempts


class HttpAttempts(TypedDict):
    sum: int
    rows_retried: int


class SummaryData(TypedDict, total=False):
    """summary.json `data`: where the questions came from and whether the manifest was verified."""

    origin: DataOrigin
    dataset_questions: int | None
    full_manifest_sha256: str | None
    selection_manifest_sha256: str | None
    manifest_sha256: str
    manifest_verified: bool
    questions: int
    responses: int


class ManifestCheck(TypedDict):
    """load.check_manifest_digest: the manifest's digest and whether run_config.json vouches for it."""

    manifest_sha256: str
    manifest_verified: bool


class RecordCounts(TypedDict):
    """What selecting the records found (select.select_records)."""

    records_valid: int
    records_malformed: int
    sample_ids_outside: int


class Inputs(RecordCounts):
    """summary.json `inputs`: the bytes scored and what selecting the records found in them."""

    partial_sha256: str
    partial_bad_lines: int
    partial_torn_tail: bool


class Methods(TypedDict, total=False):
    primary_metric: str
    interval: str
    confidence: float
    percentiles: str
    percentile_points: list[int]
    count_buckets: list[str]
    bootstrap_resamples: int
    bootstrap_seed: int
    repeats: int
    counts_over: str


class PerRepeat(TypedDict):
    repeat: int
    correct: int
    accuracy: float | None


class Agreement(TypedDict):
    right_count_histogram: dict[str, int]
    always_right: int
    never_right: int
    sometimes_right: int


class MajorityVote(TypedDict):
    label: str
    correct: int
    accuracy: float | None


class RepeatMetrics(TypedDict):
    """summary.json `repeats` (repeats.repeat_metrics), for a run with K > 1."""

    k: int
    questions: int
    per_repeat: list[PerRepeat]
    mean_accuracy: float | None
    std_accuracy: float | None
    ci95: list[float] | None
    agreement: Agreement
    majority_vote: MajorityVote


class Outputs(TypedDict):
    responses_sha256: str


class Summary(TypedDict, total=False):
    """scores/summary.json (metrics.summarize; `plots` and `outputs` are filled in by score_run)."""

    schema_version: int
    benchmark: str
    run_name: str
    model: str
    backend: str
    sampling: dict[str, Any]  # run_config.json's, as sent (extra body included)
    retry_parse_failures: int
    data: SummaryData
    inputs: Inputs
    methods: Methods
    primary: Primary
    outcomes: dict[str, int]
    parse_status: dict[str, int]
    finish_reasons: dict[str, int]
    groups: dict[str, GroupBreakdown]
    extra_metrics: dict[str, float]
    error_anatomy: ErrorAnatomy
    count_buckets: BucketBreakdown
    usage: UsageSummary
    inline_think_responses: int
    reasoning: ReasoningObserved
    strip_tokens: list[str]  # --strip-token: removed before the strict parser (only when given)
    latency_s: Described
    http_attempts: HttpAttempts
    timeouts: Timeouts
    rate_limits: RateLimitStats
    batch: BatchSummary
    diagnostic: Diagnostic
    plots: dict[str, str]
    warnings: list[str]
    repeats: RepeatMetrics
    outputs: Outputs
