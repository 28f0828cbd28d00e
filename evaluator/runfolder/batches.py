"""The batch ledger of a run folder: `batches.json`, which batch holds which rows, written whole (atomically)
at every step, so that a crash at any point leaves a ledger a re-run can continue from.

Each step saved before the next: the input file under `batch/` (``written``), its uploaded file id
(``uploaded``), the batch id (``created``: from here a re-run polls and collects, never sends the rows
again; a crash before it is healed by looking the batch up by its input file id), its results recorded
(``collected``, failed rows kept in `retry`). `prepare` writes ``prepared`` entries; `collect` marks them.
"""

from __future__ import annotations

import os
from collections import Counter
from datetime import datetime
from pathlib import Path
from typing import TypedDict

import msgspec

from evaluator.core.atomic import write_atomic
from evaluator.core.errors import UserError
from evaluator.core.jsonl import JSONObject
from evaluator.core.records import ResponseAttempt, RetryError
from evaluator.core.text import usable_batch_id

LEDGER = "batches.json"
INPUT_DIR = "batch"
FORMAT = 1

# written -> uploaded -> created -> collected (API); prepared -> collected (offline files)
STATES = ("written", "uploaded", "created", "collected", "prepared")


class LedgerRow(msgspec.Struct, array_like=True):
    """One line of an input file: its custom_id, the question and repeat, and the SHA-256 of its body."""

    custom_id: str
    sample_id: str
    repeat: int
    request_sha256: str


class BatchEntry(msgspec.Struct, omit_defaults=True):
    input: str  # the input file, relative to the run folder (batch/NAME.jsonl)
    rows: list[LedgerRow]
    state: str = "written"
    input_bytes: int = 0
    input_file_id: str | None = None
    batch_id: str | None = None
    status: str | None = None  # the provider's last status
    request_counts: dict[str, int] | None = None
    submitted_at: str | None = None  # when the batch was created
    ended_at: str | None = None  # when it reached a terminal status (seen by a poll)
    errors: list[str] | None = None  # a failed validation's messages
    resend: int = 0  # how many times an expired or cancelled batch's rows were sent again before this one


class RowRetry(msgspec.Struct, omit_defaults=True):
    """A row whose batch line failed and that waits to be sent again."""

    sample_id: str
    repeat: int
    attempts: int = 0  # failed lines so far (each spends one of --max-retries)
    resends: int = 0  # sent again after an expired or cancelled batch (at most --max-retries)
    retry_errors: list[RetryError] = msgspec.field(default_factory=list)
    earlier_attempts: list[ResponseAttempt] = msgspec.field(default_factory=list)


class Ledger(msgspec.Struct):
    format: int = FORMAT
    batches: list[BatchEntry] = msgspec.field(default_factory=list)
    retry: dict[str, RowRetry] = msgspec.field(default_factory=dict)  # row_key -> pending retry


class LedgerError(UserError):
    pass


def row_key(sample_id: str, repeat: int) -> str:
    return f"{repeat}:{sample_id}"


def load_ledger(root: Path) -> Ledger:
    """The run folder's ledger (an empty one when there is none). Every input file it names must be a file
    of the folder's batch/ (checked here, before any caller reads, uploads or deletes it)."""
    path = root / LEDGER
    if not path.exists():
        return Ledger()
    try:
        ledger = msgspec.json.decode(path.read_bytes(), type=Ledger)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise LedgerError(
            f"{path} cannot be read ({exc}); it lists the batches of this run. Restore it, or remove it and "
            "the batch/ folder to start the batch part afresh (batches already created are then not collected)"
        ) from None
    for e in ledger.batches:
        check_input_name(root, e.input)
    return ledger


def check_input_name(root: Path, name: str) -> None:
    """A ledger's input file must be `batch/NAME.jsonl` of the run folder through no link, else a resume
    could delete or upload a file that is not the run's. Raises LedgerError naming the entry."""
    parts = name.split("/")
    plain = (
        len(parts) == 2
        and parts[0] == INPUT_DIR
        and parts[1] not in ("", ".", "..")
        and "\\" not in name
        and "\0" not in name
        and not parts[1].startswith(".")
    )
    folder = root / INPUT_DIR
    if plain and not folder.is_symlink() and not (folder / parts[1]).is_symlink():
        return
    raise LedgerError(
        f"{root / LEDGER} names the batch input {name!r}, which is not a file of this run folder's {INPUT_DIR}/ "
        "(a ledger only ever names batch/NAME.jsonl): the folder is refused. Restore the ledger, or remove it "
        "and the batch/ folder to start the batch part afresh"
    )


def save_ledger(root: Path, ledger: Ledger) -> None:
    write_atomic(root / LEDGER, msgspec.json.format(msgspec.json.encode(ledger), indent=1) + b"\n")


def input_path(root: Path, ledger: Ledger, prefix: str) -> Path:
    """The next free input file name under batch/ (prefix-0001.jsonl, ...); the `.jsonl` suffix is required
    by OpenAI's Files API for purpose=batch."""
    (root / INPUT_DIR).mkdir(exist_ok=True)
    n = len(ledger.batches) + 1
    while True:
        path = root / INPUT_DIR / f"{prefix}-{n:04d}.jsonl"
        if not os.path.lexists(path):  # a link there (even a dangling one) is never written through
            return path
        n += 1


def heal_unusable_ids(ledger: Ledger) -> int:
    """Entries saved as created with a batch id that cannot be polled (an earlier version's) go back to
    uploaded, so a folder never needs hand editing to go on. How many were healed."""
    healed = 0
    for e in ledger.batches:
        if e.state == "created" and not usable_batch_id(e.batch_id):
            e.state, e.batch_id, e.status = "uploaded", None, None
            healed += 1
    return healed


def live_entries(ledger: Ledger) -> list[BatchEntry]:
    """Entries sent or being sent to the provider whose results are not recorded yet."""
    return [e for e in ledger.batches if e.state in ("written", "uploaded", "created")]


def keys_in_flight(ledger: Ledger) -> set[tuple[str, int]]:
    """The rows of live entries and of prepared files not collected yet: never written into another file
    while their batch (or an offline run of their file) may still answer them."""
    waiting = [*live_entries(ledger), *(e for e in ledger.batches if e.state == "prepared")]
    return {(r.sample_id, r.repeat) for e in waiting for r in e.rows}


def held_by_batches(root: Path) -> tuple[set[tuple[str, int]], list[str]]:
    """For an online run of a folder with a ledger (its lock held): the rows a batch not yet collected may
    still answer, never sent online meanwhile, and the batch ids (or input files) holding them. Input files
    never uploaded are dropped first: no provider has seen them."""
    if not (root / LEDGER).exists():
        return set(), []
    ledger = load_ledger(root)
    unsent = [e for e in ledger.batches if e.state == "written"]
    if unsent:
        ledger.batches = [e for e in ledger.batches if e.state != "written"]
        save_ledger(root, ledger)
        for e in unsent:
            (root / e.input).unlink(missing_ok=True)
    holding = [*(e for e in ledger.batches if e.state in ("uploaded", "created", "prepared"))]
    return keys_in_flight(ledger), [e.batch_id or e.input for e in holding]


def lines_per_row(ledger: Ledger) -> Counter[tuple[str, int]]:
    """How many lines the ledger holds for each row: the attempt number of its next line."""
    return Counter((r.sample_id, r.repeat) for e in ledger.batches for r in e.rows)


class BatchTiming(TypedDict, total=False):
    """Submission to completion over the batches sent (left out when a time is missing)."""

    submitted_at: str
    completed_at: str
    seconds: float


class BatchInfo(TypedDict):
    """One batch of the summary's `batch` section."""

    batch_id: str
    input: str
    rows: int
    status: str
    submitted_at: str | None
    ended_at: str | None
    responses: int


class BatchSummary(BatchTiming, total=False):
    """summary.json `batch` (batch_summary): how the run used batches."""

    mode: str
    batch_ids: list[str]
    batches: list[BatchInfo]
    responses_from_batches: int


def batch_timing(entries: list[BatchEntry]) -> BatchTiming:
    """Submission to completion over the batches (first submission, last end seen, seconds between)."""
    starts = [e.submitted_at for e in entries if e.submitted_at]
    ends = [e.ended_at for e in entries if e.ended_at]
    if not starts or not ends:
        return {}

    def stamp(s: str) -> float:
        return datetime.fromisoformat(s.replace("Z", "+00:00")).timestamp()

    seconds = round(stamp(max(ends)) - stamp(min(starts)), 3)
    return {"submitted_at": min(starts), "completed_at": max(ends), "seconds": seconds}


def offline_batch_id(input_name: str) -> str:
    """The batch_id of records from a prepared file's output (there is no provider batch id)."""
    return f"file:{input_name}"


def batch_summary(ledger: Ledger, rows: list[JSONObject]) -> BatchSummary | None:
    """The summary's `batch` section: how the run used batches (None for a run without any)."""
    if not ledger.batches:
        return None
    answered = Counter(r.get("batch_id") for r in rows if isinstance(r.get("batch_id"), str))
    sent = [e for e in ledger.batches if e.batch_id]
    batches: list[BatchInfo] = [
        {
            "batch_id": e.batch_id or offline_batch_id(e.input),
            "input": e.input,
            "rows": len(e.rows),
            "status": e.status or e.state,
            "submitted_at": e.submitted_at,
            "ended_at": e.ended_at,
            "responses": answered.get(e.batch_id or offline_batch_id(e.input), 0),
        }
        for e in ledger.batches
    ]
    return {
        "mode": "batch_api" if sent else "offline_files",
        "batch_ids": [b["batch_id"] for b in batches],
        "batches": batches,
        "responses_from_batches": sum(answered.values()),
        **batch_timing(sent),
    }


def batch_line(batch: BatchSummary) -> str:
    """One line for summary.md and the report."""
    ids = batch["batch_ids"]
    shown = ", ".join(ids[:4]) + (f" and {len(ids) - 4} more" if len(ids) > 4 else "")
    how = "a batch API" if batch["mode"] == "batch_api" else "offline batch files (vllm run-batch)"
    line = f"Sent through {how}: {len(ids)} batch(es) ({shown}), {batch['responses_from_batches']} responses"
    if "seconds" in batch:
        line += f"; submission to completion {batch['seconds']:.1f} s"
    return line + "."


def run_batch_summary(root: Path, rows: list[JSONObject]) -> BatchSummary | None:
    """batch_summary of a run folder's ledger; None without one or when unreadable (a score never fails)."""
    try:
        return batch_summary(load_ledger(root), rows)
    except (LedgerError, OSError):
        return None
