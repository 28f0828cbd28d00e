"""The sweep's drive loop: submit each unfinished run to the executor, then poll every handle until each
has ended, recording starts, queue places and ends in sweep.json (evaluator.study.sweep's `Sweep`).

It asks nothing of the executor's name: a `Poll` (executors.base) carries a scheduler's word for the job
(`queue`, mapped to a run state) apart from what the unit itself reports (`unit`).
"""

from __future__ import annotations

import contextlib
import signal
import threading
import time
from collections.abc import Iterator
from typing import Protocol

from evaluator.core.vocab import QUEUE_RUN_STATE
from evaluator.runfolder.sweep_state import RunState, SweepState
from evaluator.study.executors.base import Executor, Handle, Poll
from evaluator.study.progress import SweepProgress
from evaluator.study.sweep_file import RunSpec
from evaluator.study.unit import UnitResult, UnitTask

POLL_S = 0.2
Task = tuple[UnitTask, str, bool]
"""A run's unit, the digest of its arguments, and whether it finished with them already."""


class Sweep(Protocol):
    """What the loop needs of a sweep (evaluator.study.sweep.Sweep, which imports this module)."""

    state: SweepState
    handles: dict[str, Handle]
    stopping: bool

    def save(self) -> None: ...

    def stop(self) -> None: ...

    def redact(self, text: str) -> str: ...

    def started(self, run: RunSpec, digest: str, handle: Handle, task: UnitTask) -> None: ...

    def finished(self, run: RunSpec, result: UnitResult, progress: SweepProgress) -> None: ...


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
        task, digest, done = tasks[run.name]
        if done:
            progress.update(run.name, "done", "finished earlier with the same settings: nothing sent")
            continue
        handle = sw.handles[run.name] = executor.submit(task)
        if handle.job_id:
            st = sw.state.runs.setdefault(run.name, RunState())
            st.job_id, st.args_sha256 = handle.job_id, digest
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
        sw.started(run, task[1], handle, task[0])
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
