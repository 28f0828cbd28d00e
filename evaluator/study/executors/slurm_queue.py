"""What Slurm says about a sweep's jobs, and what their run folders hold: the queue display.

A job still known to slurmctld is read with `squeue` (live: a pending job's reason, a running job's
node and elapsed time; an ended job stays there for the cluster's MinJobAge); one it has forgotten is
read from the accounting database with `sacct`, through submitit's watcher (the same call and parsing
submitit itself uses for `job.state`, with more fields). Rows recorded so far are the run folder's
responses.partial.jsonl lines.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import msgspec
from submitit.core.utils import pickle_load
from submitit.slurm.slurm import SlurmInfoWatcher, SlurmJob

from evaluator.core.vocab import QueueWord
from evaluator.runfolder.files import MANIFEST, PARTIAL

# States in which a job may still run (Slurm's job state codes, squeue's and sacct's long names).
LIVE = {
    "PENDING",
    "CONFIGURING",
    "RUNNING",
    "COMPLETING",
    "REQUEUED",
    "REQUEUE_FED",
    "REQUEUE_HOLD",
    "RESIZING",
    "SUSPENDED",
    "STOPPED",
    "SIGNALING",
    "STAGE_OUT",
}
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


class _Watcher(SlurmInfoWatcher):
    """submitit's sacct watcher asking for the fields the queue display shows."""

    def _make_command(self) -> list[str] | None:
        command = super()._make_command()
        if command is None:
            return None
        return ["sacct", "-o", ",".join(SACCT_FIELDS), *command[3:]]


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


def from_sacct(job_id: str, info: dict[str, str]) -> JobView:
    """A view from one row of submitit's sacct parsing. Pure."""
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
    done = subprocess.run(
        ["squeue", "-h", "-t", "all", "-j", ",".join(ids), "-o", SQUEUE_FORMAT],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    # squeue exits 1 ("Invalid job id") when it knows none of them: then every one goes to sacct.
    views = parse_squeue(done.stdout) if done.returncode == 0 else {}
    missing = [j for j in ids if j not in views]
    if missing:
        watcher = _Watcher(delay_s=0)
        for j in missing:
            watcher.register_job(j)
        watcher.update()
        for j in missing:
            views[j] = from_sacct(j, watcher.get_info(j, mode="cache"))
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


def job_result(folder: Path, job_id: str) -> Any:
    """What the job's function returned (submitit's result pickle under `folder`/<job id>/), or None."""
    job: SlurmJob = SlurmJob(folder=folder / "%j", job_id=job_id)
    if not job.paths.result_pickle.exists():
        return None
    try:
        outcome, value = pickle_load(job.paths.result_pickle)
    except (OSError, EOFError, ValueError, ImportError, AttributeError):
        return None
    return value if outcome == "success" else None


def status_lines(sweep: Any, state: Any, runs: list[Any], folder: Path) -> list[str]:
    """`doccount sweep FILE --status`: every selected run's state from sweep.json, Slurm's queue and the
    run folder (rows recorded so far); submits nothing."""
    jobs = {r.name: state.runs[r.name].job_id for r in runs if r.name in state.runs}
    views = read_queue(j for j in jobs.values() if j) if any(jobs.values()) else {}
    pad = max([len(r.name) for r in runs] + [3])
    out = [f"sweep {sweep.name}: {len(runs)} run(s), {sweep.serve.executor}", ""]
    out.append(f"{'run':<{pad}}  {'state':<10} {'job':>7}  detail")
    for r in runs:
        st = state.runs.get(r.name)
        job = jobs.get(r.name) or ""
        rows = rows_text(folder / r.name)
        if job:
            view = views.get(job, JobView(job_id=job))
            word, detail = describe(view, rows)
            result = None if view.live else job_result(folder / "logs" / "slurm", job)
            if result is not None and getattr(
                result, "state", None
            ):  # what the unit itself said (its server failed, ...)
                word = result.state
                detail += f"; {result.message}" if getattr(result, "message", None) else ""
        else:
            word, detail = (st.state, st.message or "") if st else ("pending", "not started")
        out.append(f"{r.name:<{pad}}  {word:<10} {job:>7}  {detail}")
    return out
