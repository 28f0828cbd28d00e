"""Batch input files from the rows to send, and records from the lines that come back (for `--batch` and
`doccount batch prepare|collect`). Each line's body is the exact request the online path sends, and a
record built here is the online record plus `batch_id`, with the same request_sha256.

How a returned line settles its row (`settle_row`): an answer is recorded `ok` (a parse failure re-sampled
in a later batch, as online); a failed line spends one of the row's --max-retries and goes in a later
batch; a line that never ran (expired or cancelled batch) is sent again without spending one; a row given
up on is recorded `request_error` with every failed attempt in `retry_errors`.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec

from evaluator.core.atomic import no_follow
from evaluator.core.jsonl import JSONObject, decode_line, split_lines
from evaluator.core.records import Key, ResponseAttempt, ResponseRecord, RetryError, derive_seed
from evaluator.core.secrets import Redactor
from evaluator.core.text import examples, utc_now
from evaluator.core.usage import record_tokens
from evaluator.data.benchmarks.base import ManifestEntry, Sample
from evaluator.data.parquet import DataSource, iter_samples
from evaluator.request.batch_lines import (
    MB,
    FileBudget,
    LineResult,
    custom_id,
    input_line,
    read_output_line,
    too_large_message,
)
from evaluator.request.body import RequestBuildError, request_bytes
from evaluator.request.client import SendOutcome
from evaluator.runfolder.batches import (
    BatchEntry,
    Ledger,
    LedgerRow,
    RowRetry,
    input_path,
    lines_per_row,
    load_ledger,
    row_key,
    save_ledger,
)
from evaluator.runfolder.files import PARTIAL, RecordWriter, read_jsonl
from evaluator.runfolder.record_builder import (
    attempt_of,
    base_record,
    data_error_record,
    record_from_outcome,
    redact_outcome,
)

UNFINISHED_STATUSES = ("expired", "cancelled")


@dataclass
class BatchContext:
    """What building files and settling rows needs: the run's settings, folder, ledger and record writer."""

    settings: Any  # evaluation.runner.EvalSettings
    root: Path
    ledger: Ledger
    writer: RecordWriter
    questions: dict[str, ManifestEntry]  # the folder's questions by sample id (for records)
    redact: Redactor
    max_bytes: int
    recorded: dict[Key, set[str]] = field(default_factory=dict)  # batch ids already recorded per row
    finished: set[Key] = field(default_factory=set)  # rows given their final record by this invocation
    # rows answered before this invocation (an older version's online re-run, a hand-collected file): a
    # batch line for one of them is not recorded again, so a folder never holds two answers for a row
    answered: set[Key] = field(default_factory=set)
    counts: dict[str, int] = field(default_factory=dict)  # records written by status
    spent: int = 0  # tokens this invocation's records report (the --max-total-tokens guard)

    def save(self) -> None:
        save_ledger(self.root, self.ledger)

    async def write(self, records: Iterable[ResponseRecord]) -> None:
        """Write records (each fsynced before it counts) and count them."""
        for rec in records:
            await self.writer.write(rec)
            key = (rec.sample_id, rec.repeat or 0)
            self.finished.add(key)
            if rec.batch_id is not None:
                self.recorded.setdefault(key, set()).add(rec.batch_id)
            self.counts[rec.status] = self.counts.get(rec.status, 0) + 1
            self.spent += record_tokens(rec)


def recorded_batches(records: Iterable[JSONObject]) -> dict[Key, set[str]]:
    """The batch ids each row already has a record from (so a re-collect after a crash writes no twin)."""
    out: dict[Key, set[str]] = {}
    for rec in records:
        bid = rec.get("batch_id")
        if isinstance(bid, str) and isinstance(rec.get("sample_id"), str):
            r = rec.get("repeat")
            repeat = r if isinstance(r, int) else 0
            out.setdefault((rec["sample_id"], repeat), set()).add(bid)
    return out


def batch_context(settings: Any, root: Path, questions: list[ManifestEntry], max_mb: float) -> BatchContext:
    """The context of a batch step on a run folder (the caller holds its lock)."""
    return BatchContext(
        settings=settings,
        root=root,
        ledger=load_ledger(root),
        writer=RecordWriter(root),
        questions={q.sample_id: q for q in questions},
        redact=Redactor(settings.api_key),
        max_bytes=int(max_mb * MB),
        recorded=recorded_batches(read_jsonl(root / PARTIAL).records),
    )


def _base(ctx: BatchContext, question: Sample | ManifestEntry, repeat: int, at: str) -> ResponseRecord:
    s = ctx.settings
    base = base_record(question, s.benchmark.name, s.model, s.backend, s.sampling, at)
    base.seed = None if s.seed is None else derive_seed(s.seed, question.sample_id, repeat)
    base.repeat = repeat if s.repeats > 1 else None
    return base


class InputWriter:
    """Rows as input lines in files under the limits; each file fsynced and in the ledger before the next."""

    def __init__(self, ctx: BatchContext, prefix: str, state: str) -> None:
        self.ctx, self.prefix, self.state = ctx, prefix, state
        self.lines = lines_per_row(ctx.ledger)
        self.made: list[BatchEntry] = []
        self.rejected: list[ResponseRecord] = []  # data errors and too-large requests, never sent
        self._file: Any = None
        self._path: Path | None = None
        self._rows: list[LedgerRow] = []
        self._budget = FileBudget(ctx.max_bytes)

    def add(self, sample: Sample, repeat: int) -> None:
        base = _base(self.ctx, sample, repeat, utc_now())
        if sample.data_error:
            self.rejected.append(data_error_record(base, sample.data_error, utc_now()))
            return
        try:
            body = request_bytes(self.ctx.settings.benchmark, sample, base.model, base.sampling, base.seed)
        except (RequestBuildError, ValueError) as exc:  # e.g. bytes that are not an image we can label
            self.rejected.append(data_error_record(base, str(exc), utc_now()))
            return
        cid = custom_id(sample.sample_id, repeat, self.lines[(sample.sample_id, repeat)])
        line = input_line(cid, body)
        if len(line) > self._budget.max_bytes:
            message = too_large_message(len(line), self._budget.max_bytes)
            self.rejected.append(msgspec.structs.replace(base, status="request_error", request_error=message))
            return
        if self._file is None or not self._budget.fits(len(line)):
            self._close()
            self._open()
        self.lines[(sample.sample_id, repeat)] += 1
        self._file.write(line)
        self._budget.add(len(line))
        self._rows.append(LedgerRow(cid, sample.sample_id, repeat, hashlib.sha256(body).hexdigest()))

    def _open(self) -> None:
        self._path = input_path(self.ctx.root, self.ctx.ledger, self.prefix)
        self._file = open(self._path, "wb", opener=no_follow)  # noqa: SIM115 - closed in _close
        self._budget = FileBudget(self.ctx.max_bytes)
        self._rows = []

    def _close(self) -> None:
        if self._file is None or self._path is None:
            return
        self._file.flush()
        os.fsync(self._file.fileno())
        self._file.close()
        rel = self._path.relative_to(self.ctx.root).as_posix()
        entry = BatchEntry(input=rel, rows=self._rows, state=self.state, input_bytes=self._budget.size)
        self.ctx.ledger.batches.append(entry)
        self.ctx.save()
        self.made.append(entry)
        self._file, self._path = None, None

    def finish(self) -> list[BatchEntry]:
        self._close()
        return self.made


async def write_inputs(
    ctx: BatchContext, source: DataSource, wanted: dict[str, list[int]], prefix: str, state: str
) -> list[BatchEntry]:
    """Input files for the wanted rows, in data order; rows that cannot be sent are recorded at once."""
    writer = InputWriter(ctx, prefix, state)
    left = set(wanted)
    for sample in iter_samples(ctx.settings.benchmark, source, with_images=True):
        if sample.sample_id in left:
            left.discard(sample.sample_id)
            for repeat in wanted[sample.sample_id]:
                writer.add(sample, repeat)
        if not left:
            break
    made = writer.finish()
    await ctx.write(writer.rejected)
    return made


def results_of(
    data: bytes | Iterable[bytes],
    redact: Redactor,
    at: str,
    into: dict[str, LineResult] | None = None,
    duplicates: list[str] | None = None,
) -> dict[str, LineResult]:
    """The lines of an output or error file (its bytes, or its lines) by custom_id, redacted first, added
    to `into`. A custom_id seen twice is listed in `duplicates` and keeps its better line (`keep_line`)."""
    out: dict[str, LineResult] = {} if into is None else into
    for view in split_lines(data) if isinstance(data, bytes) else data:
        raw = bytes(view)
        if not raw.strip():
            continue
        try:
            obj, _ = decode_line(raw)
            obj = redact.json(obj)  # the boundary: every string redacted before anything reads it
        except (ValueError, RecursionError):  # not JSON, or nested too deep to read
            continue
        result = read_output_line(obj, at, redact)
        if result is None:
            continue
        earlier = out.get(result.custom_id)
        if earlier is not None and duplicates is not None:
            duplicates.append(result.custom_id)
        out[result.custom_id] = keep_line(earlier, result)
    return out


def _line_rank(result: LineResult) -> int:
    """2: an answer; 1: a reply with empty content; 0: a failure."""
    if result.completion is not None:
        return 2 if result.failure is None else 1
    return 0


def keep_line(earlier: LineResult | None, later: LineResult) -> LineResult:
    """Of two lines for one custom_id, the better one (the earlier one when they are as good). Pure."""
    if earlier is None or _line_rank(later) > _line_rank(earlier):
        return later
    return earlier


def duplicates_line(batch: str, duplicates: list[str]) -> str:
    """One line naming the custom_ids a batch's files answered more than once."""
    ids = sorted(set(duplicates))
    return (
        f"[batch] {batch}: duplicate lines for {len(ids)} custom_id(s): {examples(ids)}; each keeps its first "
        "valid answer (an error line never replaces one)"
    )


def settle_entry(
    ctx: BatchContext, entry: BatchEntry, batch_id: str, results: dict[str, LineResult], status: str
) -> list[ResponseRecord]:
    """The records an entry's returned lines give (rows sent again get none); the ledger's retry state
    is updated in memory, to be saved once the records are on disk."""
    records = []
    for row in entry.rows:
        if batch_id in ctx.recorded.get((row.sample_id, row.repeat), set()):
            continue  # recorded before a crash, the ledger was not saved after it
        if (row.sample_id, row.repeat) in ctx.answered:
            ctx.ledger.retry.pop(row_key(row.sample_id, row.repeat), None)
            continue
        result = results.get(row.custom_id) or _missing(row, status)
        rec = settle_row(ctx, entry, row, batch_id, result)
        if rec is not None:
            records.append(rec)
    return records


def _missing(row: LedgerRow, status: str) -> LineResult:
    at = utc_now()
    if status in UNFINISHED_STATUSES:
        failure = RetryError(0, "batch_unfinished", f"the batch was {status} before this request ran", at=at)
        return LineResult(row.custom_id, failure=failure, retryable=True, unfinished=True)
    failure = RetryError(0, "batch_error", f"the {status} batch returned no line for this request", at=at)
    return LineResult(row.custom_id, failure=failure, retryable=True)


def settle_row(
    ctx: BatchContext, entry: BatchEntry, row: LedgerRow, batch_id: str, result: LineResult
) -> ResponseRecord | None:
    """One row's record, or None when it is to be sent again (its retry state kept in the ledger)."""
    s, key = ctx.settings, row_key(row.sample_id, row.repeat)
    retry = ctx.ledger.retry.pop(key, None) or RowRetry(row.sample_id, row.repeat)
    line_no = _line_number(row.custom_id)
    base = _base(ctx, ctx.questions[row.sample_id], row.repeat, entry.submitted_at or utc_now())
    base = msgspec.structs.replace(base, request_sha256=row.request_sha256, batch_id=batch_id)
    if result.failure is None:
        return _answered(ctx, retry, key, base, result, line_no)
    failure = msgspec.structs.replace(result.failure, attempt=line_no)
    retry.retry_errors.append(failure)
    if result.unfinished:
        retry.resends += 1
        give_up = retry.resends > s.policy.max_retries
    else:
        retry.attempts += 1
        give_up = not result.retryable or retry.attempts > s.policy.max_retries
    if not give_up:
        ctx.ledger.retry[key] = retry
        return None
    outcome = _outcome(ctx, retry, None, line_no, base.started_at)
    outcome.last_empty, outcome.error = result.completion, f"{failure.message} after {line_no} line(s)"
    return record_from_outcome(base, outcome, s.benchmark, _earlier(retry))


def _answered(
    ctx: BatchContext, retry: RowRetry, key: str, base: ResponseRecord, result: LineResult, line_no: int
) -> ResponseRecord | None:
    outcome = _outcome(ctx, retry, result, line_no, base.started_at)
    record = record_from_outcome(
        base, outcome, ctx.settings.benchmark, _earlier(retry), ctx.settings.strip_tokens
    )
    if record.parsed_answer is None and len(retry.earlier_attempts) < ctx.settings.retry_parse_failures:
        retry.earlier_attempts.append(attempt_of(outcome, record))
        ctx.ledger.retry[key] = retry  # re-sampled in a later batch, as online re-samples it
        return None
    return record


def _outcome(
    ctx: BatchContext, retry: RowRetry, result: LineResult | None, line_no: int, started_at: str
) -> SendOutcome:
    outcome = SendOutcome(
        completion=result.completion if result is not None else None,
        attempts=line_no,
        retry_errors=list(retry.retry_errors),
        endpoint=ctx.settings.base_url,
        started_at=started_at,
        finished_at=utc_now(),
    )
    return redact_outcome(outcome, ctx.redact)


def _line_number(cid: str) -> int:
    """1 for a row's first line, 2 for its second, ... (the attempt part of its custom_id, plus one)."""
    tail = cid.rsplit("#", 1)[-1]
    return int(tail) + 1 if tail.isdigit() else 1


def _earlier(retry: RowRetry) -> list[ResponseAttempt]:
    return list(retry.earlier_attempts)


def validation_records(
    ctx: BatchContext, entry: BatchEntry, batch_id: str, errors: list[str]
) -> list[ResponseRecord]:
    """A batch refused as a whole: each row a request_error with its message, not sent again."""
    message = f"batch {batch_id} failed validation: " + ("; ".join(errors) or "no reason given")
    records = []
    for row in entry.rows:
        if batch_id in ctx.recorded.get((row.sample_id, row.repeat), set()):
            continue
        retry = ctx.ledger.retry.pop(row_key(row.sample_id, row.repeat), None) or RowRetry(
            row.sample_id, row.repeat
        )
        base = _base(ctx, ctx.questions[row.sample_id], row.repeat, entry.submitted_at or utc_now())
        failure = RetryError(_line_number(row.custom_id), "batch_failed", message[:2000], at=utc_now())
        retry.retry_errors.append(failure)
        outcome = _outcome(ctx, retry, None, _line_number(row.custom_id), base.started_at)
        outcome.error = message[:2000]
        base = msgspec.structs.replace(base, request_sha256=row.request_sha256, batch_id=batch_id)
        records.append(record_from_outcome(base, outcome, ctx.settings.benchmark, _earlier(retry)))
    return records
