"""The batch commands around a run folder: `doccount batch prepare` (input files for `vllm run-batch`),
`collect` (its output files, or OpenAI's, into records) and `cancel` (the batches a run left running).

`collect` and `cancel` take the run's settings from its run_config.json, so they need no evaluate options.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import msgspec

from evaluator.core.errors import ExitCode
from evaluator.core.jsonl import file_lines
from evaluator.core.output import answer, say
from evaluator.core.records import unit_keys
from evaluator.core.secrets import Redactor, api_key_from_env
from evaluator.core.text import utc_now
from evaluator.data.benchmarks.base import ManifestEntry
from evaluator.evaluation.batch_files import (
    batch_context,
    duplicates_line,
    results_of,
    settle_entry,
    write_inputs,
)
from evaluator.evaluation.loop import still_to_do
from evaluator.evaluation.runner import EvalSettings, RunPlan, settings_from_config
from evaluator.request.batch_api import BatchAPI
from evaluator.request.batch_lines import LineResult
from evaluator.request.bounds import LINE_SLACK, MAX_RESPONSE_BYTES
from evaluator.request.client import make_client
from evaluator.request.ratelimit import RetryPolicy
from evaluator.runfolder.batches import keys_in_flight, load_ledger, offline_batch_id
from evaluator.runfolder.files import CONFIG, RunFolderError, RunLock, done_keys
from evaluator.runfolder.manifest import load_manifest
from evaluator.runfolder.runconfig import load_run_config

OFFLINE_PREFIX = "prepared"


def prepare_files(plan: RunPlan, max_mb: float) -> int:
    """Write input files for the selected rows not done and not in a file still to collect; print each."""
    settings, source, root = plan.settings, plan.source, plan.root
    ctx = batch_context(settings, root, plan.folder, max_mb)
    done, _ = done_keys(root)
    units = unit_keys((e.sample_id for e in plan.selection), settings.repeats)
    wanted = still_to_do(units, done | keys_in_flight(ctx.ledger))

    async def main() -> list:
        ctx.writer.start()
        try:
            return await write_inputs(ctx, source, wanted, OFFLINE_PREFIX, "prepared")
        finally:
            await ctx.writer.close()

    made = asyncio.run(main())
    earlier = [e for e in ctx.ledger.batches if e.state == "prepared" and e not in made]
    if earlier:
        say(f"[batch] {len(earlier)} file(s) prepared earlier are not collected yet:")
        for e in earlier:
            say(f"  {root / e.input}")
    for e in made:
        answer(str(root / e.input))
    rows = sum(len(e.rows) for e in made)
    say(
        f"[batch] {rows} row(s) in {len(made)} new input file(s); run them with `vllm run-batch -i FILE -o OUT`"
        f", then `doccount batch collect --run-root {root} OUT...`"
    )
    return (
        ExitCode.INCOMPLETE
        if ctx.counts.get("request_error") or ctx.counts.get("data_error")
        else ExitCode.OK
    )


def _folder(root: Path) -> tuple[EvalSettings, list[ManifestEntry]]:
    if not (root / CONFIG).exists():
        raise RunFolderError(f"{root} is not a run folder (no {CONFIG}); pass the --run-root of a batch run")
    return settings_from_config(load_run_config(root / CONFIG), api_key_from_env()), load_manifest(root)


def collect_outputs(root: Path, outputs: list[Path]) -> int:
    """Record the lines of output files (`vllm run-batch`'s for prepared files, or a provider's output file
    downloaded by hand for a batch a --batch run created) that answer rows of the ledger."""
    with RunLock(root):
        settings, questions = _folder(root)
        ctx = batch_context(settings, root, questions, 190)
        results: dict[str, LineResult] = {}
        duplicates: list[str] = []
        for path in outputs:
            try:
                with path.open("rb") as f:  # read a line at a time, never whole
                    lines = file_lines(f, MAX_RESPONSE_BYTES + LINE_SLACK)
                    results_of(lines, ctx.redact, utc_now(), results, duplicates)
            except OSError as exc:
                raise RunFolderError(f"cannot read {path} ({exc.strerror})") from None
        if duplicates:
            say(duplicates_line(", ".join(str(p) for p in outputs), duplicates))
        known = {r.custom_id for e in ctx.ledger.batches for r in e.rows}
        touched = [
            e
            for e in ctx.ledger.batches
            if e.state in ("prepared", "created") and any(r.custom_id in results for r in e.rows)
        ]

        async def main() -> None:
            ctx.writer.start()
            try:
                for entry in touched:
                    present = [r for r in entry.rows if r.custom_id in results]
                    batch_id = entry.batch_id or offline_batch_id(entry.input)
                    rows = msgspec.structs.replace(entry, rows=present)
                    await ctx.write(settle_entry(ctx, rows, batch_id, results, "completed"))
                    entry.state, entry.ended_at = "collected", utc_now()
                    ctx.save()
            finally:
                await ctx.writer.close()

        asyncio.run(main())
    unknown = len(set(results) - known)
    again = len(ctx.ledger.retry)
    say(
        f"[batch] collected {len(touched)} file(s): ok {ctx.counts.get('ok', 0)}, request errors "
        f"{ctx.counts.get('request_error', 0)}, to send again {again}"
        + (f"; {unknown} line(s) matched no prepared row" if unknown else "")
    )
    if again:
        say("[batch] run `doccount batch prepare` with the same options to write the rows to send again")
    return ExitCode.INCOMPLETE if ctx.counts.get("request_error") or again else ExitCode.OK


def cancel_batches(root: Path) -> int:
    """Cancel the batches of a run folder that are still running; a re-run collects what they finished."""
    with RunLock(root):
        settings, _ = _folder(root)
        live = [e.batch_id for e in load_ledger(root).batches if e.state == "created" and e.batch_id]
        if not live:
            say(f"[batch] no batch of {root} is running")
            return ExitCode.OK
        redact = Redactor(settings.api_key)
        client = make_client(settings.base_url, settings.api_key, 60.0, 4)
        api = BatchAPI(client, settings.base_url, redact, RetryPolicy(max_retries=2))

        async def main() -> list[str]:
            try:
                return [f"{b}: {(await api.cancel(b)).status}" for b in live]
            finally:
                await api.close()

        for line in asyncio.run(main()):
            say(f"[batch] {line}")
    say("[batch] re-run the same evaluate command to collect what they finished and send the rest")
    return ExitCode.OK
