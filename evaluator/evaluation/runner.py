"""evaluate: data -> request -> record, concurrently, resumably.

The queue holds samples (encoded bytes as read from parquet), never pre-built requests: a request body
(base64 + JSON, ~1.3x the image) exists only while it is in flight.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import random
import signal
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec

from evaluator.core.boundary import clip
from evaluator.core.output import MESSAGES, say
from evaluator.core.records import Key, ResponseAttempt, ResponseRecord, Sampling, derive_seed, unit_keys
from evaluator.core.secrets import Redactor
from evaluator.core.text import one_line
from evaluator.data.benchmarks import get_benchmark
from evaluator.data.benchmarks.base import Benchmark, ManifestEntry, Sample
from evaluator.data.parquet import DataSource, iter_samples
from evaluator.data.reasoning import FORMAT_SMOKE_RESPONSES, FormatCheck, SmokeCheck
from evaluator.evaluation.loop import RowLoop, RunStopped, still_to_do  # noqa: F401 (cli imports RunStopped here)
from evaluator.request.body import RequestBuildError, request_bytes
from evaluator.request.breaker import Breaker, shape_hint
from evaluator.request.client import ChatSender, Endpoint, EndpointPool, RetryPolicy, make_client, utc_now
from evaluator.request.pace import UserLimits
from evaluator.request.pacing import Gate, PacingSummary, pacing_summary
from evaluator.runfolder.files import RecordWriter
from evaluator.runfolder.record_builder import (
    attempt_of,
    base_record,
    data_error_record,
    evaluator_error_record,
    record_from_outcome,
    redact_outcome,
)
from evaluator.runfolder.runconfig import RunConfig

log = logging.getLogger("doccount")


@dataclass
class EvalSettings:
    benchmark: Benchmark
    model: str
    backend: str
    base_urls: list[str]
    api_key: str | None
    sampling: Sampling
    concurrency: int = 16
    timeout_s: float = 600.0
    policy: RetryPolicy = field(default_factory=RetryPolicy)
    retry_parse_failures: int = 0
    max_total_tokens: int | None = None  # the spend guard (breaker.py); not part of the run identity
    seed: int | None = None  # --seed S: each request's seed is derive_seed(S, sample_id, repeat)
    repeats: int = 1  # --repeats K
    max_requests_per_minute: float | None = None  # pacing (pacing.py); not part of the run identity
    max_tokens_per_minute: float | None = None
    rate_limit_patience_s: float = 600.0  # --rate-limit-patience: an endpoint refused this long is given up
    reasoning: str | None = None  # --reasoning on|off: the declared mode (smoke-checked); None: not declared
    # False: the preset's provider cannot show reasoning (never stopped for it)
    reasoning_observable: bool = True
    strip_tokens: tuple[str, ...] = ()  # --strip-token: removed from the text before the strict parser
    smoke_check: bool = True  # --no-smoke-check: neither smoke check stops the run

    @property
    def base_url(self) -> str:
        return self.base_urls[0]


@dataclass
class RunStats:
    selected: int = 0
    recorded: Counter[str] = field(default_factory=Counter)
    interrupted: bool = False
    pacing: PacingSummary | None = None


class Progress:
    """A tqdm bar on a terminal; plain periodic lines otherwise (CI logs, containers)."""

    def __init__(self, total: int, enabled: bool = True, interval_s: float = 10.0) -> None:
        self.total = total
        self.done = 0
        self.counts: Counter[str] = Counter()
        self.t0 = time.monotonic()
        self.last = 0.0
        self.interval_s = interval_s
        self.bar = None
        self.enabled = enabled
        self.concurrency: Callable[[], tuple[int, int]] | None = None  # (requests allowed at once, ceiling)
        # The bar only where someone watches: a terminal, with the library's messages shown (the cli shows them).
        if enabled and sys.stderr.isatty() and MESSAGES.isEnabledFor(logging.INFO):
            from tqdm import tqdm

            self.bar = tqdm(total=total, unit="row", dynamic_ncols=True, file=sys.stderr)

    def update(self, status: str, parsed: bool) -> None:
        self.done += 1
        self.counts[status] += 1
        if status == "ok" and not parsed:
            self.counts["parse_failure"] += 1
        if self.bar is not None:
            self.bar.update(1)
            self.bar.set_postfix(
                ok=self.counts["ok"],
                err=self.counts["request_error"] + self.counts["data_error"],
                at_once="{} of {}".format(*self.concurrency()) if self.concurrency else None,
                refresh=False,
            )
        elif self.enabled:
            now = time.monotonic()
            if now - self.last >= self.interval_s or self.done == self.total:
                self.last = now
                say(self.line())

    def line(self) -> str:
        elapsed = time.monotonic() - self.t0
        rate = self.done / elapsed if elapsed > 0 else 0.0
        eta = (self.total - self.done) / rate if rate > 0 else float("nan")
        at_once = ""
        if self.concurrency:  # the rate-limit window now, and the --concurrency ceiling
            at_once = " | up to {} requests at once (--concurrency {})".format(*self.concurrency())
        return (
            f"[evaluate] {self.done}/{self.total} rows | ok {self.counts['ok']} "
            f"(parse failures {self.counts['parse_failure']}) | request errors {self.counts['request_error']} "
            f"| data errors {self.counts['data_error']} | {rate:.2f} req/s | ETA {eta:.0f}s{at_once}"
        )

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


class Evaluator:
    def __init__(self, settings: EvalSettings, writer: RecordWriter) -> None:
        self.s = settings
        self.writer = writer
        self.redact = Redactor(settings.api_key)
        self.stats = RunStats()

    async def evaluate_sample(self, sample: Sample, repeat: int, sender: ChatSender) -> ResponseRecord:
        s = self.s
        base = base_record(sample, s.benchmark.name, s.model, s.backend, s.sampling, utc_now())
        base.seed = None if s.seed is None else derive_seed(s.seed, sample.sample_id, repeat)
        base.repeat = repeat if s.repeats > 1 else None
        if sample.data_error:
            return data_error_record(base, sample.data_error, utc_now())
        try:
            body = request_bytes(s.benchmark, sample, s.model, s.sampling, base.seed)
        except (RequestBuildError, ValueError) as exc:  # e.g. bytes that are not an image we can label
            return data_error_record(base, str(exc), utc_now())
        base.request_sha256 = hashlib.sha256(body).hexdigest()
        del sample  # the image bytes are not needed any more; only the body is
        try:
            return await self._send_and_parse(base, body, sender)
        except Exception as exc:  # a bug must cost one row (recorded, retried on resume), not the run
            # one redacted line, never a traceback: an exception's text can quote what a server sent
            what = f"{type(exc).__name__}: {one_line(exc)}"
            message = clip(self.redact(f"evaluator error: {what}"), 2000)
            log.error("%s", clip(self.redact(f"error: evaluator error on {base.sample_id}: {what}"), 2000))
            return evaluator_error_record(base, message, utc_now())

    async def _send_and_parse(self, base: ResponseRecord, body: bytes, sender: ChatSender) -> ResponseRecord:
        """Send, and re-sample after a parse failure (--retry-parse-failures); the record is built from
        the last send alone, the parse-failed ones before it are kept whole in earlier_attempts."""
        earlier: list[ResponseAttempt] = []
        for parse_try in range(self.s.retry_parse_failures + 1):
            outcome = redact_outcome(await sender.send(body), self.redact)
            record = record_from_outcome(base, outcome, self.s.benchmark, earlier, self.s.strip_tokens)
            last = parse_try == self.s.retry_parse_failures
            if record.status != "ok" or record.parsed_answer is not None or last:
                return record
            earlier.append(attempt_of(outcome, record))
        raise AssertionError("unreachable: the last try returns")

    async def run(
        self, source: DataSource, selection: list[ManifestEntry], skip: set[Key], progress: Progress
    ) -> RunStats:
        units = unit_keys((e.sample_id for e in selection), self.s.repeats)
        stats = self.stats = RunStats(selected=len(units))
        wanted = still_to_do(units, skip)
        if not wanted:
            return stats
        pool = self._pool()
        sender = ChatSender(pool, self.s.policy, self.redact, random.Random())
        progress.concurrency = lambda: (min(self.s.concurrency, pool.window()), self.s.concurrency)

        async def sink(record: ResponseRecord) -> None:
            await self.writer.write(record)
            stats.recorded[record.status] += 1
            progress.update(record.status, record.parsed_answer is not None)

        # Stop early when the endpoint refuses the request shape or is plainly down, instead of spending
        # every row's retries on it; the rows that failed are recorded and a re-run retries them.
        breaker = Breaker(
            self.s.concurrency,
            lambda status, message: shape_hint(status, message, self.s.sampling, self.s.base_url),
            rows=len(wanted),
            max_total_tokens=self.s.max_total_tokens,
            **smoke_checks(self.s, sum(len(r) for r in wanted.values())),
        )
        loop = RowLoop(
            evaluate=lambda sample, repeat: self.evaluate_sample(sample, repeat, sender=sender),
            sink=sink,
            stop_reason=lambda: sender.stop_reason,
            workers=self.s.concurrency,
            breaker=breaker,
        )
        try:
            await loop.run(lambda: iter_samples(self.s.benchmark, source, with_images=True), wanted)
        finally:
            stats.pacing = pacing_summary(pool.gates, [e.url for e in pool.endpoints], self.s.concurrency)
            await pool.close()
        return stats

    def _pool(self) -> EndpointPool:
        s = self.s
        user = UserLimits.of(s.max_requests_per_minute, s.max_tokens_per_minute, time.monotonic())
        endpoints = [
            Endpoint(url, make_client(url, s.api_key, s.timeout_s, s.concurrency)) for url in s.base_urls
        ]
        return EndpointPool(
            endpoints,
            gate=lambda: Gate(ceiling=s.concurrency, user=user, patience_s=s.rate_limit_patience_s),
        )


def smoke_checks(s: EvalSettings, rows: int) -> dict[str, Any]:
    """The Breaker's smoke checks: the declared reasoning mode (where observable) and the format."""
    if not s.smoke_check:
        return {}
    reasoning = s.reasoning if s.reasoning and s.reasoning_observable else None
    return {
        "smoke": SmokeCheck(reasoning) if reasoning else None,
        "format_check": FormatCheck(min(FORMAT_SMOKE_RESPONSES, rows), s.strip_tokens),
    }


async def run_with_signals(evaluator: Evaluator, *args: Any) -> RunStats:
    """SIGINT/SIGTERM cancel in-flight requests; finished rows are already on disk, in-flight ones are not."""
    loop = asyncio.get_running_loop()
    task = asyncio.current_task()
    interrupted = False

    def stop() -> None:
        nonlocal interrupted
        interrupted = True
        assert task is not None
        task.cancel()

    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop)
    evaluator.writer.start()
    try:
        stats = await evaluator.run(*args)
    except asyncio.CancelledError:
        if not interrupted:
            raise
        stats = evaluator.stats
        stats.interrupted = True
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)
        await evaluator.writer.close()
    return stats


def settings_from_config(config: RunConfig, api_key: str | None) -> EvalSettings:
    """The runner's settings from the run's configuration, the one value evaluate records and a batch
    collect reads back; the key comes from the environment (MODEL_API_KEY), never from a file."""
    p, retry = config.request_policy, RetryPolicy()
    return EvalSettings(
        benchmark=get_benchmark(config.benchmark),
        model=config.model,
        backend=config.backend,
        base_urls=list(config.endpoints) or [config.endpoint or ""],
        api_key=api_key,
        sampling=msgspec.convert(config.sampling, Sampling),
        concurrency=int(p.get("concurrency", 16)),
        timeout_s=float(p.get("timeout_s", 600.0)),
        policy=RetryPolicy(
            max_retries=int(p.get("max_retries", retry.max_retries)),
            backoff_base_s=float(p.get("backoff_base_s", retry.backoff_base_s)),
            backoff_max_s=float(p.get("backoff_max_s", retry.backoff_max_s)),
            retry_after_max_s=float(p.get("retry_after_max_s", retry.retry_after_max_s)),
        ),
        retry_parse_failures=config.retry_parse_failures,
        max_total_tokens=p.get("max_total_tokens"),
        seed=config.seed,
        repeats=config.repeat_count,
        max_requests_per_minute=p.get("max_requests_per_minute"),
        max_tokens_per_minute=p.get("max_tokens_per_minute"),
        rate_limit_patience_s=float(p.get("rate_limit_patience_s", 600.0)),
        reasoning=config.reasoning,
        reasoning_observable=config.preset.get("reasoning_observable", True) if config.preset else True,
        strip_tokens=tuple(config.strip_tokens or ()),
        smoke_check=p.get("smoke_check", True) is not False,
    )


# What `evaluate` has settled before anything is sent: one value the senders share (online rows, provider
# batches, offline batch files), instead of the same seven arguments three times.
@dataclass(frozen=True)
class RunPlan:
    settings: EvalSettings
    source: DataSource  # where the questions' rows and images are read
    root: Path  # the run folder, locked by the caller
    folder: list[ManifestEntry]  # the folder's whole question set (it only grows)
    selection: list[ManifestEntry]  # this invocation's questions (--limit)
    overwrite: bool = False  # re-send rows that are done
    quiet: bool = False  # no progress bar
