"""The executor interface: the one seam between a sweep (evaluator.study.sweep) and where its units run.

A sweep turns each run into a `UnitTask` (picklable, no secret); the executor `check`s them (refusing
what can never run before anything starts: ExecutorError, exit 2), `plan`s them for `--plan`, `submit`s
each (it decides when it starts: GPUs, --parallel) as a `Handle` whose `poll` is None while queued here,
whose `cancel` stops it (rows kept, server stopped) and whose `job_id` is the scheduler's (sweep.json);
`close` cancels what is left and waits; `status` answers `--status`. What differs between executors is
carried by the executor, never asked of its name: `parallel` (None when a scheduler decides),
`can_detach` (`--detach`). Each gives a unit `task.gpus` GPUs as CUDA_VISIBLE_DEVICES.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Protocol

import msgspec

from evaluator.core.errors import UserError
from evaluator.core.vocab import ExecutorName, QueueWord, RunStateWord, UnitEnd
from evaluator.runfolder.handoff import RunState
from evaluator.study.unit import UnitResult, UnitStatus, UnitTask


class ExecutorError(UserError):
    """A request no executor run could meet (a run asking more GPUs than the pool has): exit 2, naming it."""


class PlanRow(msgspec.Struct, frozen=True, kw_only=True):
    """One line of `--plan`."""

    run: str
    where: str
    """The endpoint URL, or the server command (COMMAND... MODEL ... with PORT for the port)."""
    gpus: list[str] = msgspec.field(default_factory=list)
    """The GPU ids it would get when started now, in the planned order (local), or `N` per job."""
    order: int | None = None
    """1-based start order of its server (None for an endpoint run)."""
    after: list[str] = msgspec.field(default_factory=list)
    """The runs whose GPUs it waits for (local): those whose end frees the GPUs it starts on."""
    slot: bool = False
    """It waits for a run to end only because of --parallel (no GPU of its own to wait for)."""
    command: list[str] = msgspec.field(default_factory=list)
    """The argv that starts its server, `$PORT` where the port goes (empty for an endpoint run)."""
    note: str = ""


class Poll(msgspec.Struct, frozen=True, kw_only=True):
    """One look at a submitted unit: its job's place in a scheduler's queue kept apart from what the
    unit itself reports."""

    queue: QueueWord | None = None
    """The scheduler's word for the unit's job (Slurm); None where there is no queue (local)."""
    detail: str = ""
    """What the queue says of the job (its node, elapsed time, rows recorded)."""
    unit: UnitStatus | None = None
    """The unit's own status: local, each phase it reports; Slurm, only its end (the job's result)."""

    @property
    def result(self) -> UnitResult | None:
        return self.unit.result if self.unit is not None else None


class StatusRow(msgspec.Struct, frozen=True, kw_only=True):
    """One run's line of `--status`."""

    run: str
    state: RunStateWord | QueueWord | UnitEnd
    job: str = ""
    detail: str = ""


def recorded_status(run: str, st: RunState | None) -> StatusRow:
    """A run's status as sweep.json recorded it (a run with no job to ask a scheduler about)."""
    if st is None:
        return StatusRow(run=run, state="pending", detail="not started")
    return StatusRow(run=run, state=st.state, detail=st.message or "")


class Handle(Protocol):
    job_id: str | None

    def poll(self) -> Poll | None: ...

    def cancel(self) -> None: ...


class Executor(Protocol):
    name: ExecutorName
    can_detach: bool

    @property
    def parallel(self) -> int | None:
        """Runs at once (`--parallel`); None when a scheduler decides."""
        ...

    def check(self, tasks: Sequence[UnitTask]) -> None: ...

    def plan(self, tasks: Sequence[UnitTask]) -> list[PlanRow]: ...

    def plan_header(self) -> list[str]:
        """`--plan`'s first lines: where the runs go, how many at once, what the order assumes."""
        ...

    def submit(self, task: UnitTask) -> Handle: ...

    def close(self) -> None: ...

    def status(self, runs: Sequence[str], states: Mapping[str, RunState], folder: Path) -> list[StatusRow]:
        """Each run's state now (`folder`: the sweep's); submits and starts nothing."""
        ...
