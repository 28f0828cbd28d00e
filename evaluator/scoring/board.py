"""The shapes of leaderboard.json (evaluator.scoring.leaderboard builds it; evaluator.report renders it).

TypedDicts, not Structs: the board is written by `utf8_json` as the dicts it is made of, so its bytes stay
what they were, and every page and table that reads it is checked against these keys. total=False where a
key is there only sometimes (a run with repeats, a run that reproduces a published result, a pair that
cannot be compared).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypedDict, TypeGuard

import msgspec


class BoardColumn(TypedDict):
    """A group value with its own accuracy column."""

    field: str
    value: str


class AccuracyBlock(TypedDict, total=False):
    """metrics.accuracy_block, or with repeats repeats.repeat_accuracy_block (then `responses` too)."""

    questions: int
    responses: int
    correct: int
    accuracy: float | None
    ci95: Sequence[float] | None


class RepeatSpread(TypedDict):
    k: int | None
    mean: float | None
    sd: float | None
    per_repeat: list[float | None]


Outcomes = dict[str, int]
"""Responses per outcome (leaderboard.outcomes_of: ok, parse_failure, cut_off, request_error, data_error,
missing), read by name."""


class Tokens(TypedDict):
    prompt: int
    completion: int
    reasoning: int
    cached: int
    total: int
    failed_attempts: int


class Price(TypedDict, total=False):
    """USD per 1M tokens (leaderboard.price_for)."""

    input: float
    output: float
    cached_input: float
    batch_input: float
    batch_output: float
    batch_default: bool


class Latency(TypedDict):
    median: float | None
    p95: float | None
    responses: int


class Timeouts(TypedDict):
    """summary.json `timeouts` (metrics.timeout_block), also a leaderboard.json run entry's."""

    last_attempt_timed_out: int
    """Rows given up on (request errors) whose last attempt timed out."""
    answered_after_timeout: int
    """Rows answered (ok or a parse failure) only after a timed-out attempt: a new sample, possibly shorter."""


class ReasoningSeen(TypedDict):
    declared: str | None
    observed_share: float | None
    observable: bool  # False: the provider cannot show reasoning (the run's preset says so)


class PublishedBlock(TypedDict, total=False):
    """A reproduced result against a published one (published.compare_counts), overall or per class."""

    source: str | None
    accuracy: float | None
    correct: int
    questions: int
    reproduced_correct: int
    reproduced_questions: int
    reproduced_accuracy: float | None
    difference: float | None
    difference_ci95: Sequence[float] | None
    p_value: float | None
    p_holm: float | None
    verdict: str
    min_detectable: float | None
    not_comparable: str
    size_matches: bool
    reasoning: str | None
    reproduced_reasoning: str | None
    reasoning_note: str
    note: str
    per_class: dict[str, PublishedBlock]
    class_sizes_match: bool
    class_size_mismatches: list[str]
    classes_differ: list[str]


class BoardEntry(AccuracyBlock, total=False):
    """One run's row (leaderboard.run_entry), with its rank once ranked."""

    name: str
    model: str
    provider: str
    rank: int
    repeats: RepeatSpread
    per_group: dict[str, dict[str, AccuracyBlock]]
    extra_metrics: dict[str, float]
    outcomes: Outcomes
    tokens: Tokens
    batch: bool
    cost_usd: float | None
    price: Price | None
    complete: bool
    state: str | None
    report: str | None
    question_set_sha256: str
    timeouts: Timeouts
    latency_s: Latency
    reasoning: ReasoningSeen
    published: PublishedBlock


PairTable = dict[str, int]
"""McNemar's table by cell name: both_correct, only_a, only_b, neither (with repeats also tied_partly_right)."""


class BoardPair(TypedDict, total=False):
    """Two runs compared (leaderboard.pair_of); A is the better-ranked one."""

    a: str
    b: str
    comparable: bool
    reason: str
    questions: int
    table: PairTable
    difference: float
    difference_ci95: list[float] | None
    p_value: float | None
    p_test: str
    p_holm: float | None


class PairedComparison(TypedDict):
    """Two runs on the same questions (compare.paired_comparison)."""

    a: str
    b: str
    questions: int
    table: PairTable
    accuracy_a: float
    accuracy_b: float
    difference: float
    difference_ci95: list[float] | None
    mcnemar_exact_p: float | None


class CompareEntry(AccuracyBlock, total=False):
    """One run's row of compare.json's leaderboard (over the compared questions)."""

    run: str
    model: str
    rank: int
    repeats: int
    outcomes: Outcomes
    groups: dict[str, dict[str, AccuracyBlock]]
    extra_metrics: dict[str, float]
    partial_sha256: str | None


class CompareData(TypedDict):
    """compare.json."""

    schema_version: int
    benchmark: str
    questions: int
    intersect: bool
    methods: dict[str, str | int | float]
    leaderboard: list[CompareEntry]
    pairs: list[PairedComparison]
    warnings: list[str]


class SweepRef(TypedDict):
    name: str | None
    file: str | None
    sha256: str


class Board(TypedDict, total=False):
    """leaderboard.json: the runs in rank order, then every pair of them; title and sweep are added by the
    report when it writes the files."""

    schema_version: int
    benchmark: str
    columns: list[BoardColumn]
    methods: dict[str, str | int | float]
    runs: list[BoardEntry]
    pairwise: list[BoardPair]
    title: str
    sweep: SweepRef


def is_board(obj: object) -> TypeGuard[Board]:
    """Whether a leaderboard.json read back has the shape this version writes (every key of a known type),
    so that the renderers can take it as it is (its bytes unchanged)."""
    try:
        msgspec.convert(obj, Board)
    except msgspec.ValidationError:
        return False
    return True
