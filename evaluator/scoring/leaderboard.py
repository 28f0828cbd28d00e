"""The leaderboard of many runs (a sweep, or any run folders): pure numbers from merged runs.

Each run is scored over its own full question set (every question in the denominator, missing ones
wrong), with the per-group columns of the paper's Table 5, mean and spread over repeats, outcomes
with answers cut off at the output limit counted apart from format failures, every token the records
report (failed attempts included) and the cost those tokens come to under a pricing table. Runs are
ranked by the primary score. Every pair of runs over the same question set is compared with the
paired comparison of `compare` (paired bootstrap interval, exact McNemar p), the p-values Holm-adjusted
across the pairs; pairs over different question sets are marked not comparable.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypedDict
from urllib.parse import urlsplit

from evaluator.core.jsonl import is_price
from evaluator.core.records import Usage
from evaluator.runfolder.runconfig import RunConfig
from evaluator.scoring import (
    MergedRun,
    ScoreError,
    accuracy_block,
    extra_metrics_of,
    group_keys,
    outcome_counts,
)
from evaluator.scoring.board import (
    AccuracyBlock,
    Board,
    BoardEntry,
    BoardPair,
    Latency,
    Outcomes,
    Price,
    ReasoningSeen,
    RepeatSpread,
    Tokens,
)
from evaluator.scoring.compare import competition_ranks, group_columns, paired_comparison
from evaluator.scoring.metrics import reasoning_block, timeout_block
from evaluator.scoring.published import INTERVAL, MIN_DETECTABLE, PER_CLASS, TEST, published_block
from evaluator.scoring.repeats import compare_block
from evaluator.scoring.row import ScoredQuestion, ScoredRow, question_rows, responses_of
from evaluator.scoring.stats import (
    BOOTSTRAP_RESAMPLES,
    BOOTSTRAP_SEED,
    CONFIDENCE,
    describe,
    holm,
    sign_flip_p,
)
from evaluator.scoring.summary_shape import Summary

LEADERBOARD_SCHEMA_VERSION = 1


class PairP(TypedDict):
    p_value: float | None
    p_test: str


# The providers that offer an OpenAI-format Batch API (OpenAI, Azure OpenAI, Groq, Together, Mistral, ...)
# bill it at half their online price: the default of a pricing table's batch_input / batch_output.
BATCH_DISCOUNT = 0.5
PriceKey = Literal["input", "output", "cached_input", "batch_input", "batch_output"]
PRICE_FIELDS: tuple[PriceKey, ...] = ("input", "output", "cached_input", "batch_input", "batch_output")
ONLINE_PRICE_FIELDS = tuple(k for k in PRICE_FIELDS if not k.startswith("batch_"))
TOKEN_KINDS = ("prompt_tokens", "completion_tokens", "reasoning_tokens", "cached_tokens", "total_tokens")


@dataclass(frozen=True)
class BoardRun:
    """One run for the leaderboard: its name, the merged folder, a link to its report, its sweep state."""

    name: str
    merged: MergedRun
    report: str | None = None  # relative to the leaderboard's folder
    state: str | None = None  # the sweep's word for it (done, failed, ...) when a sweep ran it
    published: Mapping[str, Any] | None = None  # the result it reproduces (sweep file: `published`)


def build_leaderboard(
    runs: Sequence[BoardRun],
    pricing: Mapping[str, Mapping[str, float]] | None = None,
    resamples: int = BOOTSTRAP_RESAMPLES,
    seed: int = BOOTSTRAP_SEED,
) -> Board:
    """leaderboard.json's content: runs in rank order, then every pair of them."""
    if not runs:
        raise ScoreError("a leaderboard needs at least one run folder")
    benches = {r.merged.benchmark.name for r in runs}
    if len(benches) > 1:
        raise ScoreError(
            f"the runs are on different benchmarks ({', '.join(sorted(benches))}); one per board"
        )
    qrows = {r.name: question_rows(r.merged.rows, r.merged.run_config.repeat_count) for r in runs}
    columns = group_columns(runs[0].merged.benchmark, list(qrows.values()))
    entries = [
        run_entry(r, qrows[r.name], columns, (pricing or {}).get(str(r.merged.run_config.model)))
        for r in runs
    ]
    entries.sort(key=lambda e: (-(e["accuracy"] if e["accuracy"] is not None else -1.0), e["name"]))
    # identical results share a rank: 1, 1, 3
    for e, rank in zip(entries, competition_ranks([e["accuracy"] for e in entries]), strict=True):
        e["rank"] = rank
    return {
        "schema_version": LEADERBOARD_SCHEMA_VERSION,
        "benchmark": runs[0].merged.benchmark.name,
        "columns": [{"field": f, "value": v} for f, v in columns],
        "methods": methods(resamples, seed),
        "runs": entries,
        "pairwise": pairwise(entries, qrows, resamples, seed),
    }


def run_entry(
    run: BoardRun,
    qrows: list[ScoredQuestion],
    columns: list[tuple[str, str]],
    price: Mapping[str, float] | None,
) -> BoardEntry:
    """One run's row over its own question set."""
    m = run.merged
    k = m.run_config.repeat_count
    responses = responses_of(qrows)
    per_group: dict[str, dict[str, AccuracyBlock]] = {}
    for name, value in columns:
        sub = [q for q in qrows if value in group_keys(q.groups, name)]
        per_group.setdefault(name, {})[value] = compare_block(sub, k, accuracy_block)
    outcomes = outcomes_of(responses)
    tokens = tokens_of(responses)
    batch = is_batch_run(m.run_config.request_policy)
    run_price = price_for(price, batch)
    entry: BoardEntry = {
        "name": run.name,
        "model": m.run_config.model,
        "provider": provider_host(m.run_config.endpoints or [m.run_config.endpoint or ""]),
        **compare_block(qrows, k, accuracy_block),
        **({"repeats": repeats_of(m.summary)} if k > 1 else {}),
        "per_group": per_group,
        "extra_metrics": extra_metrics_of(m.benchmark, responses),
        "outcomes": outcomes,
        "tokens": tokens,
        "batch": batch,
        "cost_usd": cost_of(tokens, run_price),
        "price": run_price,
        "complete": outcomes["missing"] == 0
        and outcomes["request_error"] == 0
        and run.state in (None, "done"),
        "state": run.state,
        "report": run.report,
        "question_set_sha256": question_set_digest(qrows),
        "latency_s": latency_of(responses),
        "reasoning": reasoning_of(m.run_config, responses),
        "timeouts": timeout_block(responses),
    }
    if run.published:
        answered = entry.get("responses", entry["questions"])
        entry["published"] = published_block(
            run.published, entry["correct"], answered, per_group, m.run_config.reasoning
        )
    return entry


def reasoning_of(config: RunConfig, responses: list[ScoredRow]) -> ReasoningSeen:
    """summary.json's reasoning block without its counts."""
    b = reasoning_block(config, responses)
    return {"declared": b["declared"], "observed_share": b["observed_share"], "observable": b["observable"]}


def latency_of(responses: list[ScoredRow]) -> Latency:
    """Median and 95th percentile of the seconds per response, over every response with a latency."""
    d = describe([r.latency_s for r in responses if r.latency_s is not None])
    return {"median": d["p50"], "p95": d["p95"], "responses": int(d["n"] or 0)}


def provider_host(urls: Sequence[str]) -> str:
    """The hosts of the run's endpoints (host:port when a port is given), comma-separated."""
    hosts = []
    for url in urls:
        parts = urlsplit(url)
        host = parts.hostname or url
        host = f"{host}:{parts.port}" if parts.port else host
        if host not in hosts:
            hosts.append(host)
    return ", ".join(hosts)


def repeats_of(summary: Summary) -> RepeatSpread:
    """The spread over the K repeats (summary.json `repeats`: written for a run with K > 1)."""
    r = summary["repeats"]
    per_repeat = [p["accuracy"] for p in r["per_repeat"]]
    return {"k": r["k"], "mean": r["mean_accuracy"], "sd": r["std_accuracy"], "per_repeat": per_repeat}


def outcomes_of(responses: list[ScoredRow]) -> Outcomes:
    """Outcome counts with parse failures split: cut off at the output limit, or a format failure."""
    counts = outcome_counts(responses)
    cut = sum(1 for r in responses if r.outcome == "parse_failure" and r.finish_reason == "length")
    return {
        "ok": counts["ok"],
        "parse_failure": counts["parse_failure"] - cut,
        "cut_off": cut,
        "request_error": counts["request_error"],
        "data_error": counts["data_error"],
        "missing": counts["missing"],
    }


def spent_usages(row: ScoredRow) -> list[Usage]:
    """Every usage a record reports spending: its answer, each failed attempt, each earlier (parse-retried)
    attempt with its own failed attempts. A request_error row's own usage is its last failed attempt's,
    which its retry_errors already hold."""
    out = [e.usage for e in row.failed_attempts if e.usage is not None]
    if row.status == "ok" and row.usage is not None:
        out.append(row.usage)
    return out + [a.usage for a in row.earlier_attempts]


def tokens_of(responses: list[ScoredRow]) -> Tokens:
    """Token totals over every attempt the records report (failed ones included)."""
    totals = dict.fromkeys(TOKEN_KINDS, 0)
    failed = 0
    for row in responses:
        for usage in spent_usages(row):
            for kind in TOKEN_KINDS:
                totals[kind] += _int(getattr(usage, kind))
        failed += sum(_int(e.usage.total_tokens) for e in row.failed_attempts if e.usage is not None)
    return {
        "prompt": totals["prompt_tokens"],
        "completion": totals["completion_tokens"],
        "reasoning": totals["reasoning_tokens"],
        "cached": totals["cached_tokens"],
        "total": totals["total_tokens"],
        "failed_attempts": failed,
    }


def _int(v: Any) -> int:
    return v if isinstance(v, int) and not isinstance(v, bool) else 0


def is_batch_run(request_policy: Mapping[str, Any]) -> bool:
    """Whether a run was sent through a provider's Batch API (`--batch`; not offline files for vLLM)."""
    batch = request_policy.get("batch")
    return isinstance(batch, Mapping) and batch.get("mode") == "batch_api"


def price_for(price: Any, batch: bool) -> Price | None:
    """The prices a run is costed at: the table's entry if every number in it is a price (a hand-edited
    sweep.json can hold anything: infinities, strings; then None, no cost), and for a batch run its batch
    prices, each defaulting to BATCH_DISCOUNT of the online one (`batch_default` says whether it did)."""
    if not isinstance(price, Mapping) or not all(is_price(price.get(k)) for k in ("input", "output")):
        return None
    if any(price.get(k) is not None and not is_price(price.get(k)) for k in PRICE_FIELDS):
        return None
    # an online run is costed at the online prices only
    fields = PRICE_FIELDS if batch else ONLINE_PRICE_FIELDS
    out: Price = {}
    for k in fields:
        if price.get(k) is not None:
            out[k] = float(price[k])
    if batch:
        out["batch_default"] = "batch_input" not in out or "batch_output" not in out
        out.setdefault("batch_input", out["input"] * BATCH_DISCOUNT)
        out.setdefault("batch_output", out["output"] * BATCH_DISCOUNT)
    return out


def cost_of(tokens: Tokens, price: Price | None) -> float | None:
    """USD: uncached prompt tokens at `input`, cached ones at `cached_input` (else `input`), completion
    tokens (reasoning included, as providers bill it) at `output`; prices per 1M tokens. None: no price."""
    if not price:
        return None
    cached = min(tokens["cached"], tokens["prompt"])
    cached_price = price.get("cached_input")
    inp, outp = price["input"], price["output"]
    if "batch_input" in price:  # a batch run (price_for): cached tokens get the batch discount too
        scale = price["batch_input"] / inp if inp else BATCH_DISCOUNT
        inp, outp = price["batch_input"], price["batch_output"]
        cached_price = None if cached_price is None else cached_price * scale
    usd = (tokens["prompt"] - cached) * inp + tokens["completion"] * outp
    usd += cached * (inp if cached_price is None else cached_price)
    return usd / 1_000_000


def question_set_digest(qrows: list[ScoredQuestion]) -> str:
    keys = sorted(f"{q.sample_id}\t{q.image_sha256 or ''}" for q in qrows)
    return hashlib.sha256("\n".join(keys).encode("utf-8")).hexdigest()


# ----------------------------------------------------------------------------- pairs


def pairwise(
    entries: list[BoardEntry], qrows: dict[str, list[ScoredQuestion]], resamples: int, seed: int
) -> list[BoardPair]:
    """Every pair in rank order (the better-ranked run is A); Holm-adjusted p-values across the pairs."""
    pairs = []
    for i, a in enumerate(entries):
        for b in entries[i + 1 :]:
            pairs.append(pair_of(a, b, qrows[a["name"]], qrows[b["name"]], resamples, seed))
    adjusted = holm([p["p_value"] for p in pairs])
    for p, adj in zip(pairs, adjusted, strict=True):
        p["p_holm"] = adj
    return pairs


def pair_of(
    a: BoardEntry,
    b: BoardEntry,
    rows_a: list[ScoredQuestion],
    rows_b: list[ScoredQuestion],
    resamples: int,
    seed: int,
) -> BoardPair:
    if a["question_set_sha256"] != b["question_set_sha256"]:
        shared = {q.sample_id for q in rows_a} & {q.sample_id for q in rows_b}
        return {
            "a": a["name"],
            "b": b["name"],
            "comparable": False,
            "reason": f"different question sets ({len(rows_a)} and {len(rows_b)} questions, {len(shared)} shared)",
            "p_value": None,
        }
    index = {(q.sample_id, q.image_sha256): q for q in rows_b}
    aligned_b = [index[(q.sample_id, q.image_sha256)] for q in rows_a]
    ca = [q.correct for q in rows_a]
    cb = [q.correct for q in aligned_b]
    cmp = paired_comparison(a["name"], ca, b["name"], cb, resamples, seed)
    return {
        "a": a["name"],
        "b": b["name"],
        "comparable": True,
        "questions": cmp["questions"],
        "table": cmp["table"],
        "difference": cmp["difference"],
        "difference_ci95": cmp["difference_ci95"],
        **pair_p(ca, cb, cmp["mcnemar_exact_p"], resamples, seed),
    }


def pair_p(ca: list, cb: list, mcnemar_p: float | None, resamples: int, seed: int) -> PairP:
    """McNemar's exact p on right/wrong outcomes; with repeats (per-question means) the sign-flip test."""
    if mcnemar_p is not None:
        return {"p_value": mcnemar_p, "p_test": "mcnemar_exact"}
    p = sign_flip_p([float(x) - float(y) for x, y in zip(ca, cb, strict=True)], resamples, seed)
    return {"p_value": p, "p_test": "sign_flip"}


def methods(resamples: int, seed: int) -> dict[str, str | int | float]:
    return {
        "rank_by": "primary score: exact-count accuracy over every question of the run (missing = wrong)",
        "accuracy_interval": "wilson (with repeats: question-cluster bootstrap)",
        "confidence": CONFIDENCE,
        "difference_interval": "paired bootstrap over questions, percentile method",
        "bootstrap_resamples": resamples,
        "bootstrap_seed": seed,
        "p_value": "exact two-sided McNemar; with repeats, a paired sign-flip test on per-question mean "
        "correctness (exact up to 16 differing questions, else seeded Monte Carlo)",
        "multiple_comparisons": "Holm step-down over the pairs that have a p-value",
        "comparable": "same question set (sample id and image hash)",
        "cost": "USD per 1M tokens from the pricing table; uncached prompt at input, cached prompt at "
        "cached_input, completion (reasoning included) at output; every recorded attempt counted. A run sent "
        "through a Batch API (batch: true) at batch_input / batch_output (default: half the online prices, "
        "the providers' batch discount; cached prompt discounted alike); a price that is not a finite number "
        "from 0 to 10000 gives no cost",
        "cut_off": "a parse failure whose finish_reason is length (the output limit), not a format failure",
        "latency": "median and 95th percentile of latency_s over every response with a latency",
        "published_test": TEST,
        "published_interval": INTERVAL,
        "published_power": MIN_DETECTABLE,
        "published_per_class": PER_CLASS,
    }
