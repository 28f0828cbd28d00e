"""`doccount sweep FILE --smoke N`: a dress rehearsal (the sweep itself, every run limited to its first N
questions by evaluate's `--limit`, so the full run resumes from them; no leaderboard) and its table, also
`<sweep folder>/rehearsal.json`: per run its state, its records' figures, the full run's projected time,
and the line that stopped a run that would not count.

Projection: the full run's rows x the mean latency of the warm answers / the run's concurrency. Warm:
sent after the first wave came back, since a fresh server's first requests pay one-time costs (measured
on the vLLM CPU server: first answer 38 s, next wave 7.5 s, warm ones 1.1 s); with none, every answer.
Server start-up is not counted.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping
from datetime import datetime
from pathlib import Path
from typing import Any

import msgspec

from evaluator.core.atomic import write_atomic
from evaluator.core.boundary import one_line
from evaluator.core.jsonl import is_int, is_num
from evaluator.data.reasoning import shows_reasoning
from evaluator.runfolder.files import CONFIG, PARTIAL, read_jsonl
from evaluator.runfolder.handoff import RunState
from evaluator.runfolder.runconfig import RunConfigError, load_run_config
from evaluator.runfolder.selection import is_done, latest_valid
from evaluator.study.sweep_file import RunSpec

REHEARSAL = "rehearsal.json"


class RehearsalRow(msgspec.Struct, kw_only=True):
    """One run of a rehearsal (rehearsal.json `runs`)."""

    run: str
    state: str
    """The run's state in sweep.json after the rehearsal (done: it would count)."""
    reasoning_declared: str | None = None
    with_reasoning: int = 0
    """Answered responses that showed reasoning (evaluator.data.reasoning)."""
    answered: int = 0
    """Responses that came back (status ok)."""
    parsed: int = 0
    """Of those, the ones the strict parser read an answer from."""
    median_latency_s: float | None = None
    output_tokens_per_s: float | None = None
    """Completion tokens over the seconds of the answered requests that report them (per request)."""
    concurrency: int | None = None
    rows_total: int | None = None
    """The full run's rows (questions, or its own limit, times its repeats)."""
    rows_remaining: int | None = None
    """Rows the full run still sends (not done)."""
    projected_s: float | None = None
    """The full run's projected time at its concurrency."""
    projected_remaining_s: float | None = None
    projected_from: int = 0
    """The answers the projection's mean latency is over (the warm ones, else all)."""
    stop_line: str | None = None
    """Why the run would not count: its outcome's line (a smoke stop, a server that failed, ...)."""


def smoke_run(run: RunSpec, n: int) -> RunSpec:
    """The run limited to its first `n` questions (fewer when its own limit is smaller)."""
    own = run.options.get("limit")
    limit = min(n, own) if is_int(own) and own > 0 else n
    return msgspec.structs.replace(run, options={**run.options, "limit": limit})


def figures(
    records: Iterable[Mapping[str, Any]], rows_total: int | None, concurrency: int | None
) -> dict[str, Any]:
    """The table's figures over a run's latest valid records (a mapping per record, as the file holds it)."""
    answered = [r for r in records if r.get("status") == "ok"]
    usage: list[Mapping[str, Any]] = [u if isinstance(u := r.get("usage"), dict) else {} for r in answered]
    latencies = [float(r["latency_s"]) for r in answered if is_num(r.get("latency_s"))]
    timed = [
        (u["completion_tokens"], float(r["latency_s"]))
        for r, u in zip(answered, usage, strict=True)
        if is_int(u.get("completion_tokens")) and is_num(r.get("latency_s")) and r["latency_s"] > 0
    ]
    seconds = sum(s for _, s in timed)
    out: dict[str, Any] = {
        "answered": len(answered),
        "parsed": sum(1 for r in answered if r.get("parse_status") == "ok"),
        "with_reasoning": sum(
            shows_reasoning(r.get("reasoning_text"), u.get("reasoning_tokens"), r.get("response_text"))
            for r, u in zip(answered, usage, strict=True)
        ),
        "median_latency_s": statistics.median(latencies) if latencies else None,
        "output_tokens_per_s": sum(t for t, _ in timed) / seconds if seconds else None,
    }
    if rows_total is not None and latencies and concurrency:
        used = warm_latencies(answered, concurrency) or latencies
        out["projected_s"] = rows_total * statistics.fmean(used) / min(concurrency, rows_total)
        out["projected_from"] = len(used)
    return out


def _seconds(stamp: Any) -> float | None:
    """A record's UTC ISO 8601 time as seconds, or None."""
    if not isinstance(stamp, str):
        return None
    try:
        return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def warm_latencies(answered: list[Mapping[str, Any]], concurrency: int) -> list[float]:
    """The latencies of the answers sent after the first `concurrency` answers came back (an answer's
    request was sent at its finished_at minus its latency)."""
    timed = []
    for r in answered:
        end, latency = _seconds(r.get("finished_at")), r.get("latency_s")
        if end is not None and is_num(latency):
            timed.append((end, float(latency)))
    ends = sorted(end for end, _ in timed)
    if len(ends) <= concurrency:
        return []
    first_wave = ends[concurrency - 1]
    return [latency for end, latency in timed if end - latency >= first_wave]


def rehearsal_row(run: RunSpec, folder: Path, st: RunState | None) -> RehearsalRow:
    """A run's row: its state and stop line from sweep.json, its figures from its folder."""
    state = st.state if st is not None else "pending"
    declared = run.options.get("reasoning")  # the file's, for a run that never wrote run_config.json
    row = RehearsalRow(
        run=run.name, state=state, reasoning_declared=declared if isinstance(declared, str) else None
    )
    if state != "done":
        row.stop_line = one_line(st.message) if st is not None and st.message else f"the run ended {state}"
    try:
        config = load_run_config(folder / CONFIG)
    except RunConfigError:
        return row  # no folder: the run never reached its first request (its server failed, say)
    latest, _, _ = latest_valid(r for r in read_jsonl(folder / PARTIAL).records if isinstance(r, dict))
    questions = config.data.get("questions")
    own = run.options.get("limit")
    if is_int(questions):
        questions = min(questions, own) if is_int(own) and own > 0 else questions
        row.rows_total = questions * config.repeat_count
        row.rows_remaining = max(0, row.rows_total - sum(1 for r in latest.values() if is_done(r)))
    concurrency = config.request_policy.get("concurrency")
    row.concurrency = concurrency if is_int(concurrency) else None
    row.reasoning_declared = config.reasoning
    for key, value in figures(latest.values(), row.rows_total, row.concurrency).items():
        setattr(row, key, value)
    if row.projected_s is not None and row.rows_total and row.rows_remaining is not None:
        row.projected_remaining_s = row.projected_s * row.rows_remaining / row.rows_total
    return row


def duration(seconds: float | None) -> str:
    """A projected time for people: 42 s, 12 min, 3 h 05 min, 2 d 04 h."""
    if seconds is None:
        return "-"
    s = round(seconds)
    if s < 60:
        return f"{seconds:.1f} s" if seconds < 10 else f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60:02d} s"
    if s < 86400:
        return f"{s // 3600} h {s % 3600 // 60:02d} min"
    return f"{s // 86400} d {s % 86400 // 3600:02d} h"


HEADERS = (
    "run", "state", "reasoning declared / seen", "parsed / answered", "median latency", "output tok/s",
    "full run (projected)", "stop line",
)  # fmt: skip


def _cells(r: RehearsalRow) -> list[str]:
    seen = f"{r.with_reasoning} of {r.answered}" if r.answered else "-"
    full = (
        f"{r.rows_total} rows at {r.concurrency}: {duration(r.projected_s)}"
        f" ({r.rows_remaining} left: {duration(r.projected_remaining_s)}; over {r.projected_from} answers)"
        if r.projected_s is not None
        else "-"
    )
    return [
        one_line(r.run),
        r.state,
        f"{r.reasoning_declared or 'not declared'} / {seen}",
        f"{r.parsed} / {r.answered}",
        "-" if r.median_latency_s is None else f"{r.median_latency_s:.2f} s",
        "-" if r.output_tokens_per_s is None else f"{r.output_tokens_per_s:.1f}",
        full,
        r.stop_line or "",
    ]


def table_lines(sweep_name: str, n: int, rows: list[RehearsalRow]) -> list[str]:
    """The rehearsal's table, aligned, and what to do next."""
    cells = [list(HEADERS), *(_cells(r) for r in rows)]
    widths = [max(len(c[i]) for c in cells) for i in range(len(HEADERS) - 1)]
    out = [f"rehearsal of sweep {one_line(sweep_name)}: the first {n} question(s) of each run", ""]
    for c in cells:
        out.append("  ".join([*(x.ljust(w) for x, w in zip(c, widths, strict=False)), c[-1]]).rstrip())
    bad = [r.run for r in rows if r.state != "done"]
    out.append("")
    if bad:
        out.append(
            f"{len(bad)} run(s) would not count ({one_line(', '.join(bad))}): fix what their stop line "
            "says and rehearse again"
        )
    else:
        out.append(
            "every run would count: run the same command without --smoke (each run resumes from these answers)"
        )
    return out


def write_rehearsal(
    folder: Path, sweep_name: str, n: int, runs: Iterable[RunSpec], states: Mapping[str, RunState]
) -> list[str]:
    """Write the sweep folder's rehearsal.json; the table's lines."""
    rows = [rehearsal_row(r, folder / r.name, states.get(r.name)) for r in runs]
    data = {"smoke": n, "runs": [msgspec.to_builtins(r) for r in rows]}
    write_atomic(folder / REHEARSAL, msgspec.json.format(msgspec.json.encode(data), indent=2) + b"\n")
    return table_lines(sweep_name, n, rows)
