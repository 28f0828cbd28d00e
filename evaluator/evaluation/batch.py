"""`doccount-evaluate --batch`: the rows go through the provider's OpenAI-format Batch API (files + batches).

One round: write input files, upload and create a batch for each while fewer than --concurrency are in
flight, poll every --batch-poll-s, collect each batch that ends; rows to send again go in a new round.
Every step is in the run folder's ledger before the next one, so a re-run after a crash collects the
batches already created and never sends again what a live batch holds.
"""

from __future__ import annotations

import asyncio
import signal
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from evaluator.core.errors import ExitCode, NotFinished
from evaluator.core.jsonl import file_lines
from evaluator.core.output import say
from evaluator.core.records import Key, unit_keys
from evaluator.core.text import utc_now
from evaluator.data.parquet import DataSource
from evaluator.evaluation.batch_files import (
    BatchContext,
    batch_context,
    duplicates_line,
    results_of,
    settle_entry,
    validation_records,
    write_inputs,
)
from evaluator.evaluation.loop import still_to_do
from evaluator.evaluation.runner import RunPlan
from evaluator.request.batch_api import BatchAPI, BatchAPIError, BatchInfo, BatchUnsupported, output_cap
from evaluator.request.batch_lines import LineResult
from evaluator.request.bounds import LINE_SLACK, MAX_RESPONSE_BYTES
from evaluator.request.client import make_client
from evaluator.request.endpoint import EndpointError
from evaluator.runfolder.batches import INPUT_DIR, BatchEntry, heal_unusable_ids, keys_in_flight, live_entries
from evaluator.runfolder.files import done_keys

PREFIX = "run"


HEARTBEAT_S = 60.0  # a batch that does not change is still shown this often (a pipe shows no spinner)


def counts_text(info: BatchInfo, rows: int) -> str:
    c = info.counts
    return f"{c.get('completed', 0)}/{c.get('total', rows)} done, {c.get('failed', 0)} failed"


@dataclass
class BatchProgress:
    """One stderr line per batch whenever its status or request counts change, and at least once every
    HEARTBEAT_S while it does not, with the time this invocation has waited."""

    enabled: bool = True
    clock: Callable[[], float] = time.monotonic
    seen: dict[str, tuple[str, dict[str, int]]] = field(default_factory=dict)
    shown_at: dict[str, float] = field(default_factory=dict)
    started: float | None = None

    def waited(self) -> float:
        if self.started is None:
            self.started = self.clock()
        return self.clock() - self.started

    def update(self, entry: BatchEntry, info: BatchInfo, in_flight: int) -> None:
        state = (info.status, dict(info.counts))
        waited, now = self.waited(), self.clock()
        quiet_for = now - self.shown_at.get(info.id, -HEARTBEAT_S)
        if not self.enabled or (self.seen.get(info.id) == state and quiet_for < HEARTBEAT_S):
            return
        self.seen[info.id], self.shown_at[info.id] = state, now
        say(
            f"[batch] {info.id} ({entry.input}, {len(entry.rows)} rows): {info.status} | "
            f"{counts_text(info, len(entry.rows))} | {in_flight} batch(es) in flight | waiting {waited:.0f} s",
        )


@dataclass
class BatchRun:
    ctx: BatchContext
    api: BatchAPI
    source: DataSource
    units: list[Key]  # every (question, repeat) this invocation answers
    done: set[Key]  # finished before this invocation
    poll_s: float
    progress: BatchProgress
    max_wait_s: float | None = None  # --batch-max-wait
    waited_out: list[str] = field(default_factory=list)  # the batches still running when it was reached
    resumed: set[int] = field(default_factory=set)  # ids of entries an earlier invocation left uploaded

    def over_budget(self) -> bool:
        limit = self.ctx.settings.max_total_tokens
        return limit is not None and self.ctx.spent > limit

    def wanted(self) -> dict[str, list[int]]:
        """Rows to put in new files: not done, not in a live batch, not finished by this invocation."""
        return still_to_do(self.units, self.done | keys_in_flight(self.ctx.ledger) | self.ctx.finished)

    async def run(self) -> None:
        if heal_unusable_ids(self.ctx.ledger):
            self.ctx.save()
        self.resumed = {id(e) for e in live_entries(self.ctx.ledger) if e.state == "uploaded"}
        while True:
            wanted = self.wanted()
            if wanted and not self.over_budget():
                made = await write_inputs(self.ctx, self.source, wanted, PREFIX, "written")
                if made:
                    rows = sum(len(e.rows) for e in made)
                    say(f"[batch] {rows} row(s) in {len(made)} new input file(s)")
            await self.submit()
            running = [e for e in self.ctx.ledger.batches if e.state == "created"]
            waiting = [e for e in live_entries(self.ctx.ledger) if e.state != "created"]
            if not running and (not waiting or self.over_budget()):
                return
            last = await self.poll(running)
            if self.past_max_wait(last):
                return
            if any(e.state == "created" for e in self.ctx.ledger.batches) and (
                not self.wanted() or self.over_budget()
            ):
                left = (
                    self.max_wait_s - self.progress.waited() if self.max_wait_s is not None else self.poll_s
                )
                await asyncio.sleep(max(0.0, min(self.poll_s, left)))

    async def submit(self) -> None:
        """Upload and create batches for written entries while a slot is free and the budget allows."""
        slots = max(1, self.ctx.settings.concurrency)
        for entry in live_entries(self.ctx.ledger):
            created = sum(1 for e in self.ctx.ledger.batches if e.state == "created")
            if entry.state == "created" or created >= slots or self.over_budget():
                continue
            if entry.state == "written":
                entry.input_file_id = await self.api.upload(self.ctx.root / entry.input)
                entry.state = "uploaded"
                self.ctx.save()
            info = await self._adopted(entry) or await self.api.create(
                entry.input_file_id or "", {"doccount_input": entry.input}
            )
            entry.batch_id, entry.state, entry.status = info.id, "created", info.status
            entry.submitted_at = utc_now()
            self.ctx.save()
            self.progress.update(entry, info, created + 1)

    async def _adopted(self, entry: BatchEntry) -> BatchInfo | None:
        """A batch an earlier invocation created from this file before it could save the id."""
        if id(entry) not in self.resumed or entry.input_file_id is None:
            return None
        return await self.api.find(entry.input_file_id)

    async def poll(self, running: list[BatchEntry]) -> dict[str, str]:
        """Poll each running batch, collect those that ended; the state of those still running."""
        live = {}
        for entry in running:
            assert entry.batch_id is not None
            info = await self._retrieve(entry.batch_id)
            if info is None:  # no answer before --batch-max-wait: the batch is still running for all we know
                live[entry.batch_id] = f"{entry.batch_id}: not answering polls"
                continue
            entry.status, entry.request_counts = info.status, info.counts
            self.progress.update(entry, info, len(running))
            if info.terminal:
                await self.collect(entry, info)
            else:
                live[entry.batch_id] = (
                    f"{entry.batch_id}: {info.status}, {counts_text(info, len(entry.rows))}"
                )
        return live

    async def _retrieve(self, batch_id: str) -> BatchInfo | None:
        """The batch's state; None when its poll has not ended by --batch-max-wait."""
        left = None if self.max_wait_s is None else max(0.0, self.max_wait_s - self.progress.waited())
        try:
            async with asyncio.timeout(left):
                return await self.api.retrieve(batch_id)
        except TimeoutError:
            return None

    def past_max_wait(self, live: dict[str, str]) -> bool:
        """--batch-max-wait reached with batches still running: stop waiting (their ids stay saved)."""
        if self.max_wait_s is None or not live or self.progress.waited() < self.max_wait_s:
            return False
        self.waited_out = list(live.values())
        return True

    async def collect(self, entry: BatchEntry, info: BatchInfo) -> None:
        """Record what an ended batch returned; rows to send again stay in the ledger's retry list."""
        assert entry.batch_id is not None
        entry.ended_at = entry.ended_at or utc_now()
        if info.status == "failed":
            entry.errors = info.errors or ["the batch failed"]
            records = validation_records(self.ctx, entry, entry.batch_id, entry.errors)
        else:
            results: dict[str, LineResult] = {}
            duplicates: list[str] = []
            for file_id in (info.output_file_id, info.error_file_id):
                if file_id:
                    # streamed to a nameless file beside the inputs (gone when closed, whatever happens),
                    # then read a line at a time: an output file is never held whole
                    with tempfile.TemporaryFile(dir=self.ctx.root / INPUT_DIR) as f:
                        await self.api.download(file_id, f, output_cap(len(entry.rows)))
                        lines = file_lines(f, MAX_RESPONSE_BYTES + LINE_SLACK)
                        results_of(lines, self.ctx.redact, utc_now(), results, duplicates)
            if duplicates:
                say(duplicates_line(entry.batch_id, duplicates))
            records = settle_entry(self.ctx, entry, entry.batch_id, results, info.status)
        await self.ctx.write(records)
        entry.state = "collected"
        self.ctx.save()


def run_batches(run: BatchRun) -> bool:
    """Run to the end; True when interrupted (SIGINT/SIGTERM), with the live batches left running."""

    async def main() -> bool:
        loop = asyncio.get_running_loop()
        task = asyncio.current_task()
        assert task is not None
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, task.cancel)
        run.ctx.writer.start()
        try:
            await run.run()
            return False
        except asyncio.CancelledError:
            return True
        finally:
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.remove_signal_handler(sig)
            await run.ctx.writer.close()
            await run.api.close()

    return asyncio.run(main())


def still_running(ctx: BatchContext) -> list[str]:
    """The ids of batches created and not collected (they keep running at the provider)."""
    return [e.batch_id for e in ctx.ledger.batches if e.state == "created" and e.batch_id]


def send_batches(plan: RunPlan, max_mb: float, poll_s: float, max_wait_s: float | None = None) -> int:
    """`doccount-evaluate --batch` once the run folder is prepared: send, poll, collect; the exit code."""
    settings, root, selection = plan.settings, plan.root, plan.selection
    ctx = batch_context(settings, root, plan.folder, max_mb)
    done, _ = done_keys(root)
    ctx.answered = set() if plan.overwrite else set(done)
    units = unit_keys((e.sample_id for e in selection), settings.repeats)
    client = make_client(settings.base_url, settings.api_key, settings.timeout_s, 4)
    api = BatchAPI(client, settings.base_url, ctx.redact, settings.policy)
    live = still_running(ctx)
    say(
        f"[evaluate] {settings.benchmark.name} | model {settings.model} | {settings.base_url} | batch mode | "
        f"{len(units)} row(s), {len(units) - sum(1 for k in units if k not in done)} already done"
        + (f", {len(live)} batch(es) from an earlier run in flight" if live else "")
        + f" | run folder {root}"
    )
    run = BatchRun(
        ctx,
        api,
        plan.source,
        units,
        set() if plan.overwrite else done,
        poll_s,
        BatchProgress(not plan.quiet),
        max_wait_s,
    )
    try:
        interrupted = run_batches(run)
    except BatchUnsupported as exc:
        forget_unsent(ctx)
        raise EndpointError(str(exc)) from None
    except BatchAPIError as exc:
        _stopped(ctx, root, 3)
        raise NotFinished(str(exc)) from None
    if run.waited_out and not interrupted:
        say(
            f"[evaluate] stopped waiting after {run.progress.waited():.1f} s, past --batch-max-wait "
            f"{max_wait_s:g}: {len(run.waited_out)} batch(es) not ended ({'; '.join(run.waited_out)})"
        )
        _finished(ctx, root, False, False)
        return _stopped(ctx, root, 3)
    return _finished(ctx, root, interrupted, run.over_budget())


def forget_unsent(ctx: BatchContext) -> None:
    """Drop the input files no provider has seen: their rows are free for online or `batch prepare`."""
    unsent = [e for e in ctx.ledger.batches if e.state == "written"]
    if unsent:
        ctx.ledger.batches = [e for e in ctx.ledger.batches if e.state != "written"]
        ctx.save()
        for e in unsent:
            (ctx.root / e.input).unlink(missing_ok=True)


def _stopped(ctx: BatchContext, root: Path, code: int) -> int:
    live = still_running(ctx)
    if live:
        say(
            f"[evaluate] {len(live)} batch(es) keep running at the provider: {', '.join(live)}. Re-run the same "
            f"command to collect them, or cancel them with `doccount batch cancel --run-root {root}`"
        )
    return code


def _finished(ctx: BatchContext, root: Path, interrupted: bool, over_budget: bool) -> int:
    c = ctx.counts
    sent = [e.batch_id for e in ctx.ledger.batches if e.batch_id]
    say(
        f"[evaluate] recorded {sum(c.values())} row(s): ok {c.get('ok', 0)}, request errors "
        f"{c.get('request_error', 0)}, data errors {c.get('data_error', 0)} | {len(sent)} batch(es) in this "
        f"run folder | run folder {root}"
    )
    if interrupted:
        say("[evaluate] interrupted: the batches already created are not cancelled")
        return _stopped(ctx, root, 130)
    if over_budget:
        limit = ctx.settings.max_total_tokens
        say(
            f"[evaluate] stopped: this invocation's records report {ctx.spent} tokens, past --max-total-tokens "
            f"{limit}; no new batch was created. Re-run the same command to continue"
        )
        return _stopped(ctx, root, 3)
    if c.get("request_error") or ctx.ledger.retry:
        say(
            f"[evaluate] {c.get('request_error', 0)} request(s) failed after retries (see request_error in the "
            "records); re-run the same command to retry them"
        )
        return ExitCode.INCOMPLETE
    return ExitCode.OK
