"""`doccount sweep`: every run of a sweep file as a unit on an executor, then the leaderboard.

Each run becomes a `UnitTask` (evaluator.study.unit): `python -m evaluator.cli evaluate <its flags>
--run-root <run-root>/<sweep>/<run>` as a child process, so each has its own pacing, lock, records and
exit code; a served run (`serve = {...}`, no base_url) first gets its own server, started, checked and
stopped by the unit. The executor (`[serve] executor`: local here; see executors/base.py) decides when
each unit starts: at most `parallel` at once, and a served run only when its GPUs are free. The key goes
only into that run's evaluate child, as MODEL_API_KEY, read from the run's `api_key_env` (never in argv,
never written). A finished run is scored (`score` writes its summary and report.html). One run's
failure never stops the others.

Resume and amend: the sweep's state is in `<run-root>/<sweep>/sweep.json` (evaluator.runfolder.handoff). A run
that finished with the same arguments is not started again (nothing is sent); any other run is evaluated
again, and evaluate itself resumes the folder, adds only what is new and refuses a folder whose settings
changed: that refusal is the run's state and its message is shown.

Three entry points, none asking which executor it is (the executor carries what differs): `plan_sweep`
(`--plan`), `sweep_status` (`--status`, the executor's `status()`), `run_sweep` (the drive loop is
evaluator.study.sweep).

Stopping: Ctrl-C or SIGTERM cancels every unit (evaluate children save their rows and exit 130, servers
are stopped); a sweep killed by SIGKILL leaves nothing running either (evaluation.ending, study.guard).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, NamedTuple

import msgspec

from evaluator.core.atomic import no_follow, write_atomic
from evaluator.core.errors import ExitCode
from evaluator.core.output import answer, say
from evaluator.core.secrets import Redactor
from evaluator.core.text import utc_now
from evaluator.core.vocab import QUEUE_RUN_STATE, ExecutorName, run_state
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
from evaluator.study.launch import ServerSpec
from evaluator.study.plan_checks import check_runs
from evaluator.study.plan_text import plan_lines, request_lines, request_side
from evaluator.study.progress import SweepProgress, end_table, status_lines
from evaluator.study.rehearsal import rehearsal_row, smoke_run, table_lines, write_rehearsal
from evaluator.study.sweep_file import (
    OptionSpec,
    RunSpec,
    SweepSpec,
    check_key_variables,
    run_args,
    select_runs,
)
from evaluator.study.unit import CHILD_DROPS, UnitResult, UnitTask

LOGS = "logs"
POLL_S = 0.2  # the drive loop's pace: how often it polls the handles


class Task(NamedTuple):
    """A run's unit, the digest of its arguments, and whether it finished with them already."""

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
    fresh.runs = old.runs
    fresh.invocations = old.invocations
    return fresh


class Sweep:
    """One `doccount sweep` invocation: the runs to start, their states, the lock on the sweep folder."""

    def __init__(
        self,
        sweep: SweepSpec,
        specs: Mapping[str, OptionSpec],
        run_root: Path,
        env: Mapping[str, str],
        python: str = sys.executable,
    ) -> None:
        self.sweep, self.specs, self.env, self.python = sweep, specs, dict(env), python
        self.folder = Path(run_root) / sweep.name
        self.state = load_state(self.folder / SWEEP_STATE, sweep)
        self.lock = threading.RLock()
        keys = {sweep_run.api_key_env for sweep_run in sweep.runs if sweep_run.api_key_env}
        self.key_vars = sorted(keys)
        self.redactors = [Redactor(self.env.get(k)) for k in self.key_vars]
        self.stopping = False
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

    # ----------------------------------------------------------------- one run
    def task(self, run: RunSpec) -> Task:
        """The run's unit, the digest of its arguments, and whether it finished with them already."""
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
            server=self.server_spec(run),
            server_log=str(logs / f"{run.name}.server.log") if run.serve else None,
            gpus=run.serve.gpus if run.serve else 0,
            api_key_env=run.api_key_env,
            drop_env=[k for k in self.key_vars if k != run.api_key_env],
            python=self.python,
        )
        return Task(task, digest, finished and (folder / CONFIG).is_file())

    def server_spec(self, run: RunSpec) -> ServerSpec | None:
        if run.serve is None:
            return None
        table = self.sweep.serve
        # a docker client without an engine is common (podman hosts): the file's `runtime` settles it
        runtime = table.runtime or (
            "docker" if shutil.which("docker") or not shutil.which("podman") else "podman"
        )
        return ServerSpec(
            model=run.model,
            served_name=run.serve.served_name,
            revision=run.serve.revision,
            args=run.serve.args,
            launcher=table.launcher,
            command=table.command,
            image=table.image,
            runtime=runtime,
        )

    def started(self, run: RunSpec, digest: str, handle: Handle, task: UnitTask) -> None:
        st = RunState("running", None, None, digest, run.api_key_env, utc_now())
        st.job_id, st.server_log = handle.job_id, task.server_log
        with self.lock:
            self.state.runs[run.name] = st
        self.save()

    def finished(self, run: RunSpec, result: UnitResult, progress: SweepProgress) -> None:
        """Record a run's end and score its folder (in a thread of its own: the drive loop goes on)."""
        thread = threading.Thread(target=self._finish, args=(run, result, progress), name=f"score-{run.name}")
        self.scoring.append(thread)
        thread.start()

    def _finish(self, run: RunSpec, result: UnitResult, progress: SweepProgress) -> None:
        st = self.state.runs[run.name]
        st.exit_code, st.state = result.exit_code, run_state(result.state)
        st.message = self.redact(result.message) if result.message and result.state != "done" else None
        if result.launch is not None:
            st.gpus = result.launch.gpus
        rows_kept = (
            result.exit_code in (ExitCode.OK, ExitCode.INCOMPLETE, ExitCode.INTERRUPTED)
            or result.state == "stopped"
        )  # a smoke stop keeps its rows
        if (self.folder / run.name / CONFIG).is_file() and rows_kept and not self.smoke:
            progress.update(run.name, st.state, "scoring")
            self.score(run)
        st.finished_at = utc_now()
        self.save()
        code = f"exit {result.exit_code}" if result.exit_code is not None else ""
        progress.update(run.name, st.state, st.message or code)

    def score(self, run: RunSpec) -> None:
        """`score` on the run folder: summary.json, summary.md and report.html, for the leaderboard."""
        cmd = [self.python, "-m", "evaluator.cli", "score", "--run-root", str(self.folder / run.name)]
        env = {k: v for k, v in self.env.items() if k not in CHILD_DROPS and k not in self.key_vars}
        with open(self.folder / LOGS / f"{run.name}.log", "ab", opener=no_follow) as log:
            subprocess.run(
                cmd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=log, check=False
            )

    def stop(self) -> None:
        """Ask the drive loop to stop every unit (called from a signal handler: it only sets a flag)."""
        self.stopping = True


@contextlib.contextmanager
def forward_signals(sw: Sweep) -> Iterator[None]:
    """SIGTERM and SIGINT (Ctrl-C) stop the sweep: every unit is told to stop (rows saved, servers stopped).
    Both only set a flag the loop reads: a KeyboardInterrupt raised wherever the main thread happens to be
    could be lost on the way (seen: the sweep went on to start the next run after its units had stopped)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = {sig: signal.signal(sig, lambda *_: sw.stop()) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)


def submit_all(
    sw: Sweep, executor: Executor, runs: list[RunSpec], tasks: dict[str, Task], progress: SweepProgress
) -> None:
    """Submit every unfinished run (a job id is in sweep.json as soon as it exists)."""
    sw.handles = {}
    for run in runs:
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


def follow_all(
    sw: Sweep, executor: Executor, runs: list[RunSpec], tasks: dict[str, Task], progress: SweepProgress
) -> bool:
    """Follow each submitted run to its end; True when the sweep was interrupted."""
    handles = sw.handles
    by_name = {r.name: r for r in runs}
    seen: dict[str, Poll | None] = dict.fromkeys(handles)
    closed = False
    try:
        while handles:
            if sw.stopping and not closed:
                closed = True
                executor.close()
            for name in list(handles):
                _follow(sw, by_name[name], tasks[name], handles, seen, progress)
            if handles:
                time.sleep(POLL_S)
    except KeyboardInterrupt:
        sw.stopping = True
        executor.close()
        for name in list(handles):
            _follow(sw, by_name[name], tasks[name], handles, seen, progress)
        return True
    executor.close()
    return sw.stopping


def _follow(
    sw: Sweep,
    run: RunSpec,
    task: Task,
    handles: dict[str, Handle],
    seen: dict[str, Poll | None],
    progress: SweepProgress,
) -> None:
    """One poll of one run: its start recorded, its progress shown, its end recorded and scored."""
    handle = handles[run.name]
    poll = handle.poll()
    if poll is None or poll == seen[run.name]:
        return
    first = seen[run.name] is None
    seen[run.name] = poll
    result = poll.result
    if result is not None and result.state == "not-started":
        del handles[run.name]  # cancelled before it started: its state stays what it was
        return
    if first:
        sw.started(run, task.digest, handle, task.unit)
    if poll.queue in QUEUE_RUN_STATE:  # a job's place in the queue, as a run state
        sw.state.runs[run.name].state = QUEUE_RUN_STATE[poll.queue]
    if result is not None:
        del handles[run.name]
        sw.finished(run, result, progress)
        return
    if poll.unit is None:
        progress.update(run.name, poll.queue or "queued", sw.redact(poll.detail))
        return
    phase = poll.unit.phase
    label = "running" if phase == "evaluating" and run.serve is None else phase
    progress.update(run.name, label, sw.redact(poll.unit.detail))


def _local(sw: Sweep, runs: list[RunSpec], parallel: int | None, env: Mapping[str, str]) -> Executor:
    """This host; its GPU pool is asked of nvidia-smi only when a run is served (and [serve] names none)."""
    from evaluator.study.executors.local import LocalExecutor, detect_gpus

    serve = sw.sweep.serve
    served = any(r.serve is not None and r.serve.gpus > 0 for r in runs)
    gpus = serve.gpus if serve.gpus is not None else (detect_gpus() if served else [])
    return LocalExecutor(gpus, parallel or 0, env)  # 0: it sizes --parallel to its pool


def _slurm(sw: Sweep, runs: list[RunSpec], parallel: int | None, env: Mapping[str, str]) -> Executor:
    """One job per run; the job ids sweep.json holds are adopted when still queued or running."""
    from evaluator.study.executors.slurm import SlurmExecutor  # submitit: only for a Slurm sweep

    jobs = {name: st.job_id for name, st in sw.state.runs.items()}
    serve = sw.sweep.serve
    return SlurmExecutor(serve.slurm, sw.sweep.name, env, sw.key_vars, jobs=jobs, logs=sw.folder / LOGS)


EXECUTOR_FACTORIES: dict[
    ExecutorName, Callable[[Sweep, list[RunSpec], int | None, Mapping[str, str]], Executor]
]
EXECUTOR_FACTORIES = {"local": _local, "slurm": _slurm}


def make_executor(sw: Sweep, runs: list[RunSpec], parallel: int | None, env: Mapping[str, str]) -> Executor:
    """The executor [serve] names, for these runs."""
    return EXECUTOR_FACTORIES[sw.sweep.serve.executor](sw, runs, parallel, env)


def _open(
    sweep: SweepSpec,
    specs: Mapping[str, OptionSpec],
    run_root: Path,
    only: list[str],
    env: Mapping[str, str] | None,
) -> tuple[Sweep, list[RunSpec]]:
    runs = select_runs(sweep, only)
    return Sweep(sweep, specs, run_root, os.environ if env is None else env), runs


def _checked_tasks(sw: Sweep, executor: Executor, runs: list[RunSpec]) -> dict[str, Task]:
    """Each run's unit, refused before anything starts when the executor or a server could not run it."""
    tasks = {r.name: sw.task(r) for r in runs}
    executor.check([t.unit for t in tasks.values()])
    # the settings a server would refuse or waste, found before any server starts or job is submitted
    for note in check_runs(sw.sweep, [r for r in runs if not tasks[r.name].done]):
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
    sw, runs = _open(sweep, specs, run_root, only, env)
    executor = executor or make_executor(sw, runs, parallel, sw.env)
    tasks = _checked_tasks(sw, executor, runs)
    rows = executor.plan([t.unit for t in tasks.values() if not t.done])
    finished = [r.name for r in runs if tasks[r.name].done]
    sides = request_lines([request_side(r.name, r.options) for r in runs if not tasks[r.name].done])
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
    sw, runs = _open(sweep, specs, run_root, only, env)
    executor = executor or make_executor(sw, [], None, sw.env)  # no run to size a GPU pool for
    _print_status(sw, executor, runs, out or sys.stderr)
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
    sw, runs = _open(sweep, specs, run_root, only, env)
    sw.smoke = smoke
    executor = executor or make_executor(sw, runs, parallel, sw.env)
    if detach and smoke:
        raise ExecutorError("--smoke follows each run to the end of its rehearsal: leave out --detach")
    if detach and not executor.can_detach:
        raise ExecutorError(
            f'--detach needs executor = "slurm" in [serve] of {sweep.path}: a local sweep runs its units itself'
        )
    tasks = _checked_tasks(sw, executor, runs)
    check_key_variables(sweep, runs, sw.env)
    (sw.folder / LOGS).mkdir(parents=True, exist_ok=True)
    # the logs it appends to by name, never through a link (their opens refuse one too); the links a
    # Slurm sweep makes itself (<run>.job.out) are only read
    refuse_links(sw.folder / LOGS, [f"{r.name}{end}" for r in runs for end in (".log", ".server.log")])
    with RunLock(sw.folder), forward_signals(sw):
        sw.state.invocations += 1
        write_atomic(sw.folder / SWEEP_COPY, sweep.raw)
        sw.save()
        progress = SweepProgress([r.name for r in runs], out)
        submit_all(sw, executor, runs, tasks, progress)
        if detach:
            progress.close()
            _print_status(sw, executor, runs, out)
            return ExitCode.OK
        interrupted = follow_all(sw, executor, runs, tasks, progress)
        for thread in sw.scoring:
            thread.join()
        progress.close()
        if smoke:
            return _rehearsed(sw, runs, smoke, interrupted)
        board = _write_board(sw)
    for line in end_table(sweep, sw.state, runs, board):
        say(line)
    return _exit_code(sw, runs, interrupted)


def _exit_code(sw: Sweep, runs: list[RunSpec], interrupted: bool) -> ExitCode:
    """130 when interrupted, 0 when every selected run is done, else 3 (a re-run continues)."""
    if interrupted:
        return ExitCode.INTERRUPTED
    done = all(sw.state.runs.get(r.name, RunState()).state == "done" for r in runs)
    return ExitCode.OK if done else ExitCode.INCOMPLETE


def _rehearsed(sw: Sweep, runs: list[RunSpec], n: int, interrupted: bool) -> ExitCode:
    """The rehearsal's table (the command's answer) and rehearsal.json; the sweep's exit code."""
    rows = [rehearsal_row(r, sw.folder / r.name, sw.state.runs.get(r.name)) for r in runs]
    write_rehearsal(sw.folder, n, rows)
    for line in table_lines(sw.sweep.name, n, rows):
        answer(line)
    return _exit_code(sw, runs, interrupted)


def _print_status(sw: Sweep, executor: Executor, runs: list[RunSpec], out: Any) -> None:
    """Each selected run's state, one line each, on the progress stream."""
    rows = executor.status([r.name for r in runs], sw.state.runs, sw.folder)
    for line in status_lines(sw.sweep.name, executor.name, rows):
        print(line, file=out)


def _write_board(sw: Sweep) -> Path | None:
    """The leaderboard over every run folder the sweep has (a failure here never fails the sweep)."""
    from evaluator.report.leaderboard import write_leaderboard
    from evaluator.scoring import ScoreError

    names = [r.name for r in sw.sweep.runs if (sw.folder / r.name / CONFIG).is_file()]
    if not names:
        return None
    try:
        return write_leaderboard([sw.folder])
    except (ScoreError, OSError) as exc:
        say(f"warning: the leaderboard was not written ({sw.redact(str(exc))})")
        return None
