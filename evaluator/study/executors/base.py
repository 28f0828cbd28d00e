"""The executor interface: the one seam between a sweep (evaluator.study.sweep) and where its units run.

A sweep turns each run into a `UnitTask` (evaluator.study.unit: picklable, no secret), then:

    executor.check(tasks)           # refuse what can never run, before anything starts (ExecutorError: exit 2)
    executor.plan(tasks)            # -> list[PlanRow], for `doccount sweep FILE --plan`; starts nothing
    executor.plan_header()          # -> list[str]: the pool or partition, --parallel, the order's assumption
    handle = executor.submit(task)  # -> Handle; the executor decides when it starts (GPUs, --parallel)
    handle.poll()                   # -> UnitStatus | None: None while queued; .result once finished
    handle.cancel()                 # stop it (queued: never starts; running: rows kept, server stopped)
    handle.job_id                   # str | None: the scheduler's id (Slurm), recorded in sweep.json
    executor.close()                # cancel what is left and wait for it (Ctrl-C, SIGTERM, the end)

`task.gpus` is the number of GPUs the run's server needs (0 for an endpoint run); each executor gives
the unit that many as CUDA_VISIBLE_DEVICES. Local: `executors.local.LocalExecutor` (threads of the sweep
process, a GPU pool of this host). Slurm: one job per unit running `serve_and_evaluate` (see [cluster]).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import msgspec

from evaluator.core.vocab import ExecutorName
from evaluator.study.unit import UnitStatus, UnitTask


class ExecutorError(ValueError):
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


class Handle(Protocol):
    job_id: str | None

    def poll(self) -> UnitStatus | None: ...

    def cancel(self) -> None: ...


class Executor(Protocol):
    name: ExecutorName

    def check(self, tasks: Sequence[UnitTask]) -> None: ...

    def plan(self, tasks: Sequence[UnitTask]) -> list[PlanRow]: ...

    def plan_header(self) -> list[str]:
        """`--plan`'s first lines: where the runs go, how many at once, what the order assumes."""
        ...

    def submit(self, task: UnitTask) -> Handle: ...

    def close(self) -> None: ...
