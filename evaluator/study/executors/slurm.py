"""The Slurm executor: one Slurm job per run, submitted with submitit, running the serve-and-evaluate unit.

A job asks its run's GPUs (with `cpus_per_gpu` and `mem_per_gpu` scaled to them) and the `[serve]`
Slurm settings; inside it `run_in_job` runs `serve_and_evaluate` on the GPUs Slurm gave. The run folder
must be on a file system the nodes share.

- Adopt: an earlier invocation's jobs (sweep.json) still pending or running are followed, not submitted
  again; a run whose job ended early (time limit, preemption, cancel) is submitted again and resumes.
- Keys: the pickled task never holds one. sbatch exports the submitting environment, so the job runs
  under `env -u NAME ...` without every credential-named variable and every other run's key variable.
- Time limit: submitit's USR2 before the limit would fail a non-checkpointable job and kill a server
  that does not handle it; the job ignores USR2, runs to its limit and ends TIMEOUT, its rows recorded.
- Logs: submitit's folder is `runs/<sweep>/logs/slurm/<job id>/`; `logs/<run>.job.out` and `.job.err`
  point at the latest job's.
"""

from __future__ import annotations

import os
import shutil
import signal
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, cast

from submitit.core.utils import FailedJobError, UncompletedJobError, pickle_load
from submitit.slurm.slurm import SlurmExecutor as SubmititSlurm
from submitit.slurm.slurm import SlurmJob

from evaluator.core.vocab import ExecutorName, UnitEnd
from evaluator.runfolder.handoff import RunState
from evaluator.study.executors.base import ExecutorError, PlanRow, Poll, StatusRow, recorded_status
from evaluator.study.executors.slurm_queue import (
    JobView,
    describe,
    last_error_line,
    read_queue,
    rows_text,
)
from evaluator.study.launch import plan_argv
from evaluator.study.secrets import credential_named
from evaluator.study.serve_file import SlurmSettings, job_parameters, mem_scaled, time_minutes
from evaluator.study.unit import CHILD_DROPS, UnitResult, UnitStatus, UnitTask, serve_and_evaluate

REFRESH_S = 2.0  # one squeue (and sacct) call for all jobs at most this often


def withheld_variables(env: Mapping[str, str], key_vars: Sequence[str], own_key: str | None) -> list[str]:
    """Names a job must not inherit: every credential-named variable and the sweep's key variables, except
    the run's own. Pure."""
    out = set(CHILD_DROPS) | set(key_vars)
    out |= {name for name in env if credential_named(name)}
    out.discard(own_key or "")
    return sorted(n for n in out if n)


class _KeylessSubmitit(SubmititSlurm):
    """submitit's executor whose sbatch runs without the withheld variables (their names only on argv).

    The one private method of submitit overridden (`_make_submission_command`): it has no public way to give
    sbatch another environment, and changing this process's would race the sweep's threads. pyproject pins
    submitit; tests/test_sweep_inprocess.py checks the method in the installed one."""

    withheld: Sequence[str] = ()

    def _make_submission_command(self, submission_file_path: Path) -> list[str]:
        unset = [a for name in self.withheld for a in ("-u", name)]
        return ["env", *unset, *super()._make_submission_command(submission_file_path)]


def run_in_job(task: UnitTask) -> UnitResult:
    """The job's function: the unit on the GPUs Slurm gave, USR2 ignored (see the module's docstring)."""
    signal.signal(signal.SIGUSR2, signal.SIG_IGN)  # inherited by the server and evaluate it starts
    return serve_and_evaluate(task, env=dict(os.environ))


def run_folder(task: UnitTask) -> Path:
    args = task.evaluate_args
    return Path(args[args.index("--run-root") + 1])


class SlurmHandle:
    """One run's job: polled through the executor's shared view of the queue."""

    def __init__(self, job: SlurmJob, task: UnitTask, executor: SlurmExecutor, adopted: bool = False) -> None:
        self.job, self.task, self.executor, self.adopted = job, task, executor, adopted
        self.job_id: str | None = job.job_id
        self.final: Poll | None = None

    def poll(self) -> Poll:
        """The job's queue word while it waits or runs; once it has ended, the unit's result."""
        if self.final is not None:
            return self.final
        view = self.executor.view(self.job.job_id)
        rows = rows_text(run_folder(self.task))
        word, detail = describe(view, rows)
        if view.live or (view.state == "UNKNOWN" and not self.job.paths.result_pickle.exists()):
            return Poll(queue=word, detail=f"job {self.job.job_id}: {detail}")
        unit = UnitStatus(phase="finished", result=self.result(view, rows))
        self.final = Poll(queue=word, detail=f"job {self.job.job_id}: {detail}", unit=unit)
        return self.final

    def result(self, view: JobView, rows: str) -> UnitResult:
        """The unit's own result when the job wrote one, else what Slurm says ended it."""
        if self.job.paths.result_pickle.exists():
            try:
                result = self.job.result()
                if isinstance(result, UnitResult):
                    return result
            except FailedJobError as exc:
                return UnitResult(state="error", message=_last_line(str(exc), self.job.job_id))
            except UncompletedJobError:
                pass
        why = last_error_line(self.job.paths.stderr) or ""
        state: UnitEnd = "interrupted" if view.state == "CANCELLED" and self.executor.cancelled else "failed"
        message = f"Slurm job {self.job.job_id} ended {view.state} after {view.elapsed or '?'} ({rows} rows recorded)"
        if view.state in ("TIMEOUT", "PREEMPTED", "NODE_FAIL", "CANCELLED", "BOOT_FAIL", "DEADLINE"):
            message += ": a re-run submits it again and the folder resumes"
        return UnitResult(state=state, message=f"{message}{'; ' + why if why else ''}")

    def cancel(self) -> None:
        self.job.cancel(check=False)


def _last_line(trace: str, job_id: str) -> str:
    lines = [ln.strip() for ln in trace.splitlines() if ln.strip() and not ln.startswith("-" * 5)]
    errors = [ln for ln in lines if "Error" in ln or "error" in ln]
    return f"Slurm job {job_id}: {(errors or lines or ['failed'])[-1][:300]}"


class SlurmExecutor:
    """Units as Slurm jobs (see the module docstring). `key_vars`: the sweep's key variables; `jobs`:
    each run's job id from sweep.json; `clock`: seconds, for how often the queue is read."""

    name: ExecutorName = "slurm"
    parallel = None  # Slurm decides when each job starts
    can_detach = True  # jobs go on after the sweep exits; --status reads them later

    def __init__(
        self,
        settings: SlurmSettings,
        sweep_name: str,
        env: Mapping[str, str],
        key_vars: Sequence[str] = (),
        jobs: Mapping[str, str | None] | None = None,
        logs: Path | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.settings, self.sweep_name, self.env = settings, sweep_name, dict(env)
        self.key_vars = sorted(key_vars)
        self.jobs = {k: v for k, v in (jobs or {}).items() if v}
        self.logs, self.clock = logs, clock
        self.handles: list[SlurmHandle] = []
        self.views: dict[str, JobView] = {}
        self.refreshed = float("-inf")
        self.cancelled = False

    # ----------------------------------------------------------------- plan time
    def check(self, tasks: Sequence[UnitTask]) -> None:
        s = self.settings
        per_node = s.gpus_per_node
        try:
            time_minutes(s.time)
        except ValueError:
            raise ExecutorError(
                f'[serve] time = "{s.time}" is not a Slurm time limit: '
                'use "HH:MM:SS", "D-HH:MM:SS" or minutes, e.g. "04:00:00"'
            ) from None
        if s.mem_per_gpu is not None:
            try:
                mem_scaled(s.mem_per_gpu, 1)
            except ValueError:
                raise ExecutorError(
                    f'[serve] mem_per_gpu = "{s.mem_per_gpu}" is not a Slurm size: use e.g. "64G"'
                ) from None
        for t in tasks:
            if per_node is not None and t.gpus > per_node:
                raise ExecutorError(
                    f"run {t.run} asks for {t.gpus} GPU(s); a node has {per_node} ([serve] gpus_per_node): "
                    "lower its serve.gpus, raise gpus_per_node if your nodes have more, or leave the run out "
                    "with --only"
                )

    def plan_header(self) -> list[str]:
        s = self.settings
        node = f", {s.gpus_per_node} GPUs per node" if s.gpus_per_node is not None else ""
        return [
            f"executor slurm; partition {s.partition or '(default)'}, time {s.time}"
            f"{node}; one job per run, all submitted at once (--parallel does not apply: Slurm decides when "
            "each starts)"
        ]

    def plan(self, tasks: Sequence[UnitTask]) -> list[PlanRow]:
        s = self.settings
        where = f"Slurm job on partition {s.partition or '(default)'}, time {s.time}"
        rows = []
        for t in tasks:
            note = f"adopts job {self.jobs[t.run]} if still queued or running" if t.run in self.jobs else ""
            command = plan_argv(t.server, t.run, []) if t.server else []
            rows.append(PlanRow(run=t.run, where=where if t.server else f"{where}: endpoint run", gpus=[f"{t.gpus} per job"],
                                note=note, command=command))  # fmt: skip
        return rows

    def status(self, runs: Sequence[str], states: Mapping[str, RunState], folder: Path) -> list[StatusRow]:
        """Each run's job as squeue or sacct reports it, with the unit's own result once the job wrote
        one, and the rows its folder holds; a run without a job as sweep.json recorded it."""
        jobs = {r: states[r].job_id or "" for r in runs if r in states}
        views = read_queue(j for j in jobs.values() if j) if any(jobs.values()) else {}
        out = []
        for run in runs:
            job = jobs.get(run, "")
            if not job:
                out.append(recorded_status(run, states.get(run)))
                continue
            view = views.get(job, JobView(job_id=job))
            word, detail = describe(view, rows_text(folder / run))
            result = None if view.live else job_result(folder / "logs" / "slurm", job)
            if result is None:
                out.append(StatusRow(run=run, state=word, job=job, detail=detail))
            else:  # what the unit itself said (its server failed, ...)
                detail += f"; {result.message}" if result.message else ""
                out.append(StatusRow(run=run, state=result.state, job=job, detail=detail))
        return out

    # ----------------------------------------------------------------- jobs
    def submit(self, task: UnitTask) -> SlurmHandle:
        folder = self.job_folder(task)
        old = self.jobs.get(task.run)
        if old:
            adopted = self._adopt(old, task, folder)
            if adopted is not None:
                return adopted
        if shutil.which("sbatch") is None:
            raise ExecutorError('executor = "slurm" but sbatch is not on PATH: run the sweep on a login node')
        ex = _KeylessSubmitit(folder=folder / "%j")
        ex.withheld = withheld_variables({**os.environ, **self.env}, self.key_vars, task.api_key_env)
        ex.update_parameters(**job_parameters(self.settings, task, self.sweep_name))
        job = cast(SlurmJob[Any], ex.submit(run_in_job, task))  # submitit types it as its base Job
        self._link_logs(job, task)
        handle = SlurmHandle(job, task, self)
        self.handles.append(handle)
        self.refreshed = float("-inf")
        return handle

    def _adopt(self, job_id: str, task: UnitTask, folder: Path) -> SlurmHandle | None:
        """The earlier invocation's job of this run when it is still queued or running, or finished the
        run (a detached sweep nobody watched); None when it must be submitted again."""
        view = self.view(job_id, force=True)
        done = job_result(folder, job_id)
        if not view.live and not (isinstance(done, UnitResult) and done.state == "done"):
            return None
        job: SlurmJob = SlurmJob(folder=folder / "%j", job_id=job_id)
        if not _same_task(job, task):
            if view.live:  # an older setting of this run: end it before a new job opens the same folder
                job.cancel(check=False)
                _wait_ended([job_id])
            return None
        handle = SlurmHandle(job, task, self, adopted=True)
        self.handles.append(handle)
        return handle

    def job_folder(self, task: UnitTask) -> Path:
        return (self.logs or Path(task.evaluate_log).parent) / "slurm"

    def _link_logs(self, job: SlurmJob, task: UnitTask) -> None:
        logs = Path(task.evaluate_log).parent
        for suffix, target in (("out", job.paths.stdout), ("err", job.paths.stderr)):
            link = logs / f"{task.run}.job.{suffix}"
            link.unlink(missing_ok=True)
            link.symlink_to(os.path.relpath(target, logs))

    def view(self, job_id: str, force: bool = False) -> JobView:
        """A job's view from the shared snapshot of the queue, refreshed at most every REFRESH_S."""
        now = self.clock()
        if force or now - self.refreshed >= REFRESH_S or job_id not in self.views:
            ids = {h.job.job_id for h in self.handles if h.final is None} | {job_id}
            self.views.update(read_queue(ids))
            self.refreshed = now
        return self.views.get(job_id, JobView(job_id=job_id))

    def close(self) -> None:
        """Cancel every job still queued or running (scancel) and wait until Slurm has ended them."""
        live = [h for h in self.handles if h.final is None]
        if not live:
            return
        self.cancelled = True
        for h in live:
            h.cancel()
        _wait_ended([h.job.job_id for h in live])
        self.refreshed = float("-inf")


def job_result(folder: Path, job_id: str) -> UnitResult | None:
    """What the job's function returned (submitit's result pickle under `folder`/<job id>/), or None."""
    job: SlurmJob = SlurmJob(folder=folder / "%j", job_id=job_id)
    if not job.paths.result_pickle.exists():
        return None
    try:
        outcome, value = pickle_load(job.paths.result_pickle)
    except (OSError, EOFError, ValueError, ImportError, AttributeError):
        return None
    return value if outcome == "success" and isinstance(value, UnitResult) else None


def _wait_ended(job_ids: list[str], timeout_s: float = 120) -> None:
    """Until Slurm lists none of these jobs as queued or running (then their processes are gone)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and any(v.live for v in read_queue(job_ids).values()):
        time.sleep(1)


def _same_task(job: SlurmJob, task: UnitTask) -> bool:
    try:
        return bool(job.submission().args[0] == task)
    except (OSError, AssertionError, IndexError, EOFError, AttributeError, ImportError):
        return False
