"""`doccount sweep`: every run of a sweep file as a unit on an executor, then the leaderboard.

Each run is a `UnitTask` (study.unit): an evaluate child of its own (pacing, lock, records, exit code),
after its own server for a served run (`serve = {...}`). The executor (`[serve] executor`) decides when
each unit starts; a run's key goes only to its own child, as MODEL_API_KEY, never in argv or a file. A
finished run is scored; one run's failure never stops the others. The state is in
`<run-root>/<sweep>/sweep.json` (runfolder.handoff): a run that finished with the same arguments is not
started again; any other is evaluated again (evaluate resumes its folder, or refuses one whose settings
changed: that refusal is the run's state). Ctrl-C or SIGTERM stops every unit (rows saved, servers
stopped); a sweep killed by SIGKILL leaves nothing running either (evaluation.ending, study.guard).
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, NamedTuple

import msgspec

from evaluator.core.atomic import no_follow, write_atomic
from evaluator.core.errors import ExitCode
from evaluator.core.output import answer, say
from evaluator.core.secrets import Redactor
from evaluator.core.text import utc_now
from evaluator.core.vocab import QUEUE_RUN_STATE, run_state
from evaluator.runfolder.files import CONFIG, RunLock, refuse_links
from evaluator.runfolder.handoff import (
    SWEEP_COPY,
    SWEEP_STATE,
    RunState,
    SweepState,
    args_digest,
    read_sweep_state,
)
from evaluator.study.executors.base import Executor, ExecutorError, Handle, Poll
from evaluator.study.plan_checks import check_runs
from evaluator.study.plan_text import plan_lines, request_lines, request_side
from evaluator.study.progress import SweepProgress, end_table, status_lines
from evaluator.study.rehearsal import smoke_run, write_rehearsal
from evaluator.study.serve_file import server_spec
from evaluator.study.sweep_file import RunSpec, SweepSpec, check_key_variables, select_runs
from evaluator.study.sweep_options import OptionSpec, run_args
from evaluator.study.unit import UnitResult, UnitTask

LOGS = "logs"
POLL_S = 0.2  # the drive loop's pace: how often it polls the handles


class Task(NamedTuple):
    """A run, its unit, the digest of its arguments, and whether it finished with them already."""

    run: RunSpec
    unit: UnitTask
    digest: str
    done: bool


def load_state(path: Path, sweep: SweepSpec) -> SweepState:
    """The sweep's state: the sweep file's as read now, with the runs and invocations of sweep.json."""
    published = {r.name: r.published for r in sweep.runs if r.published}
    fresh = SweepState(sweep.name, sweep.path, sweep.sha256, msgspec.to_builtins(sweep.pricing), published)
    try:
        old = read_sweep_state(path)
    except (OSError, ValueError):
        return fresh  # first run (or an unreadable file: the run folders themselves are the truth)
    fresh.runs, fresh.invocations = old.runs, old.invocations
    return fresh


class Sweep:
    """One `doccount sweep` invocation: the runs to start, their states, the lock on the sweep folder."""

    def __init__(
        self,
        sweep: SweepSpec,
        specs: Mapping[str, OptionSpec],
        run_root: Path,
        only: list[str],
        env: Mapping[str, str] | None,
    ) -> None:
        self.runs = select_runs(sweep, only)
        self.sweep, self.specs, self.env = sweep, specs, dict(os.environ if env is None else env)
        self.folder = Path(run_root) / sweep.name
        self.state = load_state(self.folder / SWEEP_STATE, sweep)
        self.lock = threading.RLock()
        self.key_vars = sorted({sweep_run.api_key_env for sweep_run in sweep.runs if sweep_run.api_key_env})
        self.redactors = [Redactor(self.env.get(k)) for k in self.key_vars]
        self.stopping = False  # set by forward_signals, read by the drive loop
        self.scoring: list[threading.Thread] = []
        self.handles: dict[str, Handle] = {}  # the submitted runs not yet ended
        self.smoke: int | None = None  # --smoke N: every run limited to its first N questions (rehearsal)

    def save(self) -> None:
        with self.lock:
            self.state.updated_at = utc_now()
            data = msgspec.json.format(msgspec.json.encode(self.state), indent=2) + b"\n"
            write_atomic(self.folder / SWEEP_STATE, data)

    def redact(self, text: str) -> str:
        for r in self.redactors:
            text = r(text)
        return text

    def task(self, run: RunSpec) -> Task:
        folder = self.folder / run.name
        args = run_args(run, self.specs, folder)
        digests = {args_digest(args, run.api_key_env)}
        if self.smoke:  # a rehearsal: its own arguments (the full run is not "finished" by it)
            args = run_args(smoke_run(run, self.smoke), self.specs, folder)
            digests.add(args_digest(args, run.api_key_env))
        digest = args_digest(args, run.api_key_env)
        old = self.state.runs.get(run.name)
        finished = old is not None and old.state == "done" and old.args_sha256 in digests
        logs = self.folder / LOGS
        task = UnitTask(
            run=run.name,
            evaluate_args=args,
            evaluate_log=str(logs / f"{run.name}.log"),
            server=server_spec(self.sweep.serve, run.model, run.serve),
            server_log=str(logs / f"{run.name}.server.log") if run.serve else None,
            gpus=run.serve.gpus if run.serve else 0,
            api_key_env=run.api_key_env,
            drop_env=[k for k in self.key_vars if k != run.api_key_env],
        )
        return Task(run, task, digest, finished and (folder / CONFIG).is_file())

    def finish(self, run: RunSpec, result: UnitResult, progress: SweepProgress) -> None:
        """Record a run's end and score its folder (in a thread of its own: the drive loop goes on)."""
        st = self.state.runs[run.name]
        st.exit_code, st.state = result.exit_code, run_state(result.state)
        st.message = self.redact(result.message) if result.message and result.state != "done" else None
        if result.launch is not None:
            st.gpus = result.launch.gpus
        kept = (ExitCode.OK, ExitCode.INCOMPLETE, ExitCode.INTERRUPTED)
        rows_kept = result.exit_code in kept or result.state == "stopped"  # a smoke stop keeps its rows
        if (self.folder / run.name / CONFIG).is_file() and rows_kept and not self.smoke:
            progress.update(run.name, st.state, "scoring")
            self.score(run)
        st.finished_at = utc_now()
        self.save()
        code = f"exit {result.exit_code}" if result.exit_code is not None else ""
        progress.update(run.name, st.state, st.message or code)

    def score(self, run: RunSpec) -> None:
        """`score` of the run folder, for the leaderboard; what it says goes to the run's log. In this
        process: a child per run cost ~1.5 s of CPU to start and import matplotlib."""
        from evaluator.report.run_page import score_and_report  # here: numpy and matplotlib once a run ends

        log_file = self.folder / LOGS / f"{run.name}.log"  # a lone surrogate (a sample id) has no UTF-8 form
        with open(log_file, "a", encoding="utf-8", errors="backslashreplace", opener=no_follow) as log:
            try:
                score_and_report(self.folder / run.name, lambda line: log.write(self.redact(line) + "\n"))
            except Exception as exc:  # noqa: BLE001 - one run's scoring never stops the sweep
                log.write(self.redact(f"error: {exc}") + "\n")

    def exit_code(self, interrupted: bool) -> ExitCode:
        """130 when interrupted, 0 when every selected run is done, else 3 (a re-run continues)."""
        if interrupted:
            return ExitCode.INTERRUPTED
        done = all(self.state.runs.get(r.name, RunState()).state == "done" for r in self.runs)
        return ExitCode.OK if done else ExitCode.INCOMPLETE


@contextlib.contextmanager
def forward_signals(sw: Sweep) -> Iterator[None]:
    """SIGTERM and SIGINT stop the sweep by setting a flag the loop reads: a KeyboardInterrupt raised
    wherever the main thread happens to be could be lost (seen: the sweep started the next run)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = {
        sig: signal.signal(sig, lambda *_: setattr(sw, "stopping", True))
        for sig in (signal.SIGTERM, signal.SIGINT)
    }
    try:
        yield
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)


def submit_all(sw: Sweep, executor: Executor, tasks: dict[str, Task], progress: SweepProgress) -> None:
    """Submit every unfinished run (a job id is in sweep.json as soon as it exists)."""
    sw.handles = {}
    for run in sw.runs:
        task = tasks[run.name]
        if task.done:
            progress.update(run.name, "done", "finished earlier with the same settings: nothing sent")
            continue
        handle = sw.handles[run.name] = executor.submit(task.unit)
        if handle.job_id:
            st = sw.state.runs.setdefault(run.name, RunState())
            st.job_id, st.args_sha256 = handle.job_id, task.digest
            sw.save()
    sw.save()


def follow_all(sw: Sweep, executor: Executor, tasks: dict[str, Task], progress: SweepProgress) -> bool:
    """Follow each submitted run to its end; True when the sweep was interrupted."""
    seen: dict[str, Poll | None] = dict.fromkeys(sw.handles)
    closed = False
    try:
        while sw.handles:
            if sw.stopping and not closed:
                closed = True
                executor.close()
            for name in list(sw.handles):
                _follow(sw, tasks[name], seen, progress)
            if sw.handles:
                time.sleep(POLL_S)
    except KeyboardInterrupt:
        sw.stopping = True
        executor.close()
        for name in list(sw.handles):
            _follow(sw, tasks[name], seen, progress)
        return True
    executor.close()
    return sw.stopping


def _follow(sw: Sweep, task: Task, seen: dict[str, Poll | None], progress: SweepProgress) -> None:
    """One poll of one run: its start recorded, its progress shown, its end recorded and scored."""
    run = task.run
    handle = sw.handles[run.name]
    poll = handle.poll()
    if poll is None or poll == seen[run.name]:
        return
    first = seen[run.name] is None
    seen[run.name] = poll
    result = poll.result
    if result is not None and result.state == "not-started":
        del sw.handles[run.name]  # cancelled before it started: its state stays what it was
        return
    if first:  # started
        st = RunState("running", None, None, task.digest, run.api_key_env, utc_now())
        st.job_id, st.server_log = handle.job_id, task.unit.server_log
        with sw.lock:
            sw.state.runs[run.name] = st
        sw.save()
    if poll.queue in QUEUE_RUN_STATE:  # a job's place in the queue, as a run state
        sw.state.runs[run.name].state = QUEUE_RUN_STATE[poll.queue]
    if result is not None:
        del sw.handles[run.name]
        thread = threading.Thread(target=sw.finish, args=(run, result, progress), name=f"score-{run.name}")
        sw.scoring.append(thread)
        thread.start()
        return
    if poll.unit is None:
        progress.update(run.name, poll.queue or "queued", sw.redact(poll.detail))
        return
    phase = poll.unit.phase
    label = "running" if phase == "evaluating" and run.serve is None else phase
    progress.update(run.name, label, sw.redact(poll.unit.detail))


def make_executor(sw: Sweep, runs: list[RunSpec], parallel: int | None) -> Executor:
    """The executor [serve] names: this host (its GPU pool asked of nvidia-smi only when a run is served and
    [serve] names none), or Slurm (adopting the jobs sweep.json holds still queued or running)."""
    serve = sw.sweep.serve
    if serve.executor == "slurm":
        from evaluator.study.executors.slurm import SlurmExecutor  # submitit: only for a Slurm sweep

        jobs = {name: st.job_id for name, st in sw.state.runs.items()}
        return SlurmExecutor(
            serve.slurm, sw.sweep.name, sw.env, sw.key_vars, jobs=jobs, logs=sw.folder / LOGS
        )
    from evaluator.study.executors.local import LocalExecutor, detect_gpus

    served = any(r.serve is not None and r.serve.gpus > 0 for r in runs)
    gpus = serve.gpus if serve.gpus is not None else (detect_gpus() if served else [])
    return LocalExecutor(gpus, parallel or 0, sw.env)  # 0: it sizes --parallel to its pool


def _checked_tasks(sw: Sweep, executor: Executor) -> dict[str, Task]:
    """Each run's unit, refused before anything starts when the executor or a server could not run it."""
    tasks = {r.name: sw.task(r) for r in sw.runs}
    executor.check([t.unit for t in tasks.values()])
    for note in check_runs(sw.sweep, [r for r in sw.runs if not tasks[r.name].done]):
        say(note)  # a size that could not be known: not a refusal
    return tasks


def plan_sweep(
    sweep: SweepSpec,
    specs: Mapping[str, OptionSpec],
    run_root: Path,
    only: list[str],
    parallel: int | None,
    env: Mapping[str, str] | None = None,
    executor: Executor | None = None,
) -> int:
    """`--plan`: what would start where, printed as the command's answer; starts nothing. 0."""
    sw = Sweep(sweep, specs, run_root, only, env)
    executor = executor or make_executor(sw, sw.runs, parallel)
    tasks = _checked_tasks(sw, executor)
    todo = [r for r in sw.runs if not tasks[r.name].done]
    rows = executor.plan([tasks[r.name].unit for r in todo])
    finished = [r.name for r in sw.runs if tasks[r.name].done]
    sides = request_lines([request_side(r.name, r.options) for r in todo])
    for line in plan_lines(sweep, rows, finished, executor.plan_header(), executor.parallel, sides):
        answer(line)  # the plan is the command's answer
    return ExitCode.OK


def sweep_status(
    sweep: SweepSpec,
    specs: Mapping[str, OptionSpec],
    run_root: Path,
    only: list[str],
    env: Mapping[str, str] | None = None,
    out: Any = None,
    executor: Executor | None = None,
) -> int:
    """`--status`: each selected run's state as its executor sees it now, on `out`; submits nothing. 0."""
    sw = Sweep(sweep, specs, run_root, only, env)
    _print_status(sw, executor or make_executor(sw, [], None), out or sys.stderr)  # no GPU pool to size
    return ExitCode.OK


def run_sweep(
    sweep: SweepSpec,
    specs: Mapping[str, OptionSpec],
    run_root: Path,
    only: list[str],
    parallel: int | None,
    env: Mapping[str, str] | None = None,
    out: Any = None,
    executor: Executor | None = None,
    detach: bool = False,
    smoke: int | None = None,
) -> int:
    """Run the selected runs on the executor, write the leaderboard; 0 if every run finished, 3 if some
    did not, 130 when interrupted. `detach`: submit, print the status and return 0 (the units go on).
    `smoke`: a rehearsal (evaluator.study.rehearsal), its table instead of the leaderboard."""
    out = out or sys.stderr  # the progress display's stream (a terminal is redrawn in place)
    sw = Sweep(sweep, specs, run_root, only, env)
    runs, sw.smoke = sw.runs, smoke
    executor = executor or make_executor(sw, runs, parallel)
    if detach and smoke:
        raise ExecutorError("--smoke follows each run to the end of its rehearsal: leave out --detach")
    if detach and not executor.can_detach:
        raise ExecutorError(
            f'--detach needs executor = "slurm" in [serve] of {sweep.path}: a local sweep runs its units itself'
        )
    tasks = _checked_tasks(sw, executor)
    check_key_variables(sweep, runs, sw.env)
    (sw.folder / LOGS).mkdir(parents=True, exist_ok=True)
    # logs are appended to by name, never through a link (a Slurm sweep's own <run>.job.out links are read)
    refuse_links(sw.folder / LOGS, [f"{r.name}{end}" for r in runs for end in (".log", ".server.log")])
    with RunLock(sw.folder), forward_signals(sw):
        sw.state.invocations += 1
        write_atomic(sw.folder / SWEEP_COPY, sweep.raw)
        sw.save()
        progress = SweepProgress([r.name for r in runs], out)
        submit_all(sw, executor, tasks, progress)
        if detach:
            progress.close()
            _print_status(sw, executor, out)
            return ExitCode.OK
        interrupted = follow_all(sw, executor, tasks, progress)
        for thread in sw.scoring:
            thread.join()
        progress.close()
        if smoke:  # the rehearsal's table (the command's answer) and rehearsal.json
            for line in write_rehearsal(sw.folder, sweep.name, smoke, runs, sw.state.runs):
                answer(line)
            return sw.exit_code(interrupted)
        board = _write_board(sw)
    for line in end_table(sweep, sw.state, runs, board):
        say(line)
    return sw.exit_code(interrupted)


def _print_status(sw: Sweep, executor: Executor, out: Any) -> None:
    """Each selected run's state, one line each, on the progress stream."""
    rows = executor.status([r.name for r in sw.runs], sw.state.runs, sw.folder)
    for line in status_lines(sw.sweep.name, executor.name, rows):
        print(line, file=out)


def _write_board(sw: Sweep) -> Path | None:
    """The leaderboard over every run folder the sweep has (a failure here never fails the sweep)."""
    from evaluator.report.leaderboard import write_leaderboard
    from evaluator.scoring import ScoreError

    if not any((sw.folder / r.name / CONFIG).is_file() for r in sw.sweep.runs):
        return None
    try:
        return write_leaderboard([sw.folder])
    except (ScoreError, OSError) as exc:
        say(f"warning: the leaderboard was not written ({sw.redact(str(exc))})")
        return None
