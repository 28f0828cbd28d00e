"""What Slurm says about a sweep's jobs, and what their run folders hold: the queue display.

A job slurmctld still knows is read with `squeue`, one it has forgotten with `sacct` (as submitit does);
rows recorded are the run folder's lines. No submitit here: only executors.slurm imports it.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterable
from pathlib import Path

import msgspec

from evaluator.core.output import say
from evaluator.core.vocab import QueueWord
from evaluator.runfolder.files import MANIFEST, PARTIAL

# States in which a job may still run (Slurm's job state codes, squeue's and sacct's long names).
LIVE = {
    "PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "REQUEUED", "REQUEUE_FED", "REQUEUE_HOLD", "RESIZING",
    "SUSPENDED", "STOPPED", "SIGNALING", "STAGE_OUT",
}  # fmt: skip
SQUEUE_FIELDS = ("JobID", "State", "Reason", "NodeList", "Elapsed", "Partition")
SQUEUE_FORMAT = "%i|%T|%r|%N|%M|%P"
SACCT_FIELDS = ("JobID", "State", "Reason", "NodeList", "Elapsed", "Partition", "ExitCode")


class JobView(msgspec.Struct, frozen=True, kw_only=True):
    """One job as Slurm reports it; `state` is UNKNOWN when neither squeue nor sacct knows it (yet)."""

    job_id: str
    state: str = "UNKNOWN"
    reason: str = ""
    node: str = ""
    elapsed: str = ""
    partition: str = ""
    exit_code: str = ""

    @property
    def live(self) -> bool:
        return self.state in LIVE


def _state_word(state: str) -> str:
    """`CANCELLED by 0` -> CANCELLED (sacct appends who cancelled)."""
    return state.split()[0].upper() if state.strip() else "UNKNOWN"


def parse_squeue(text: str) -> dict[str, JobView]:
    """`squeue -h -o SQUEUE_FORMAT` lines as views by job id. Pure."""
    out = {}
    for line in text.splitlines():
        parts = line.split("|")
        if len(parts) != len(SQUEUE_FIELDS):
            continue
        job_id, state, reason, node, elapsed, partition = (p.strip() for p in parts)
        reason = "" if reason in ("None", "(null)") else reason
        out[job_id] = JobView(
            job_id=job_id,
            state=_state_word(state),
            reason=reason,
            node=node,
            elapsed=elapsed,
            partition=partition,
        )
    return out


def parse_sacct(text: str) -> dict[str, dict[str, str]]:
    """`sacct -o FIELDS --parsable2` output (a header line, then `|`-separated rows) as each job's fields
    by job id; a job's steps (`12.batch`, `12.0`) are left out, as submitit does. Pure."""
    lines = text.splitlines()
    if len(lines) < 2:
        return {}  # no job known (yet)
    names = lines[0].split("|")
    out: dict[str, dict[str, str]] = {}
    for line in lines[1:]:
        row = {name: value.strip() for name, value in zip(names, line.split("|"), strict=False)}
        job_id = row.get("JobID", "")
        if job_id and "." not in job_id:
            out[job_id] = row
    return out


def _sacct(job_ids: list[str]) -> dict[str, dict[str, str]]:
    """The jobs' rows from the accounting database; none when sacct fails (its error is not the sweep's)."""
    command = ["sacct", "-o", ",".join(SACCT_FIELDS), "--parsable2"]
    for j in job_ids:
        command += ["-j", j]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=60, check=True)
    except (OSError, subprocess.SubprocessError) as exc:
        # said, not raised: the jobs stay UNKNOWN and the next poll asks again
        detail = (getattr(exc, "stderr", None) or str(exc)).strip().splitlines()
        say(
            f"warning: sacct failed ({detail[-1] if detail else type(exc).__name__}); job states unknown for now"
        )
        return {}
    return parse_sacct(done.stdout)


def from_sacct(job_id: str, info: dict[str, str]) -> JobView:
    """A view from one job's sacct fields (parse_sacct). Pure."""
    reason = info.get("Reason", "")
    return JobView(
        job_id=job_id,
        state=_state_word(info.get("State", "")),
        reason="" if reason in ("None", "(null)") else reason,
        node="" if info.get("NodeList", "") in ("None assigned", "(null)") else info.get("NodeList", ""),
        elapsed=info.get("Elapsed", ""),
        partition=info.get("Partition", ""),
        exit_code=info.get("ExitCode", ""),
    )


def read_queue(job_ids: Iterable[str]) -> dict[str, JobView]:
    """Every given job's view: squeue first (live), sacct for the jobs squeue no longer lists."""
    ids = sorted({str(j) for j in job_ids if j})
    if not ids:
        return {}
    squeue = ["squeue", "-h", "-t", "all", "-j", ",".join(ids), "-o", SQUEUE_FORMAT]
    done = subprocess.run(squeue, capture_output=True, text=True, timeout=60)
    # squeue exits 1 ("Invalid job id") when it knows none of them: then every one goes to sacct.
    views = parse_squeue(done.stdout) if done.returncode == 0 else {}
    missing = [j for j in ids if j not in views]
    if missing:
        rows = _sacct(missing)
        for j in missing:
            views[j] = from_sacct(j, rows.get(j, {}))
    return views


def _lines(path: Path) -> int:
    """Newlines in a file (0 when there is none yet)."""
    try:
        with open(path, "rb") as f:
            return sum(chunk.count(b"\n") for chunk in iter(lambda: f.read(1 << 20), b""))
    except OSError:
        return 0


def last_error_line(path: Path, limit: int = 1 << 16) -> str | None:
    """The last line of a log that reads like an error (`error`, `Error`, `Traceback` ...), or None."""
    try:
        with open(path, "rb") as f:
            f.seek(0, 2)
            f.seek(max(0, f.tell() - limit))
            lines = f.read().decode("utf-8", "replace").splitlines()
    except OSError:
        return None
    for line in reversed(lines):
        text = line.strip()
        if any(w in text for w in ("error", "Error", "ERROR", "CANCELLED", "Killed", "Exception")):
            return text[:300]
    return None


def describe(view: JobView, rows: str) -> tuple[QueueWord, str]:
    """A job's state word and detail for the sweep's display (`rows`: "12/40"). Pure."""
    if view.state == "PENDING":
        return "pending", f"pending ({view.reason or 'queued'})"
    if view.live:
        where = f"on {view.node}, " if view.node else ""
        return "running", f"{where}{view.elapsed or '0:00'} elapsed, {rows} rows recorded"
    if view.state == "UNKNOWN":
        return "submitted", "not in squeue or sacct yet"
    word: QueueWord = "done" if view.state == "COMPLETED" else "failed"
    return word, f"{view.state} after {view.elapsed or '?'}, {rows} rows recorded"


def rows_text(run_folder: Path) -> str:
    """Rows recorded so far against the questions of the run (manifest.jsonl), e.g. "12/40"."""
    questions = _lines(run_folder / MANIFEST)
    return f"{_lines(run_folder / PARTIAL)}/{questions}" if questions else str(_lines(run_folder / PARTIAL))
