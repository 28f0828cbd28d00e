"""The project's closed vocabularies as `Literal` types: mypy refuses a word outside them, and they stay
plain strings on disk and in JSON (sweep.json, run_config.json, leaderboard.json keep their bytes).

Each tuple beside a type is that type's words in order, for checks and messages (`get_args` of it).
"""

from __future__ import annotations

from typing import Literal, get_args

ExecutorName = Literal["local", "slurm"]
"""Where a sweep's units run ([serve] executor)."""

Launcher = Literal["process", "container"]
"""How a served run's server is started ([serve] launcher)."""

RunStateWord = Literal["pending", "running", "done", "failed", "error", "refused", "stopped", "interrupted"]
"""A run's state in sweep.json. A Slurm job's queue word is mapped onto these (QUEUE_RUN_STATE)."""

UnitEnd = Literal["done", "failed", "error", "refused", "stopped", "interrupted", "not-started"]
"""How a unit ended (UnitResult.state): a run state, or not-started (cancelled before it started)."""


def run_state(end: UnitEnd) -> RunStateWord:
    """A finished unit's end as its run's state (a unit that never started has none: the caller keeps
    the state it had)."""
    if end == "not-started":
        raise ValueError("a unit that did not start has no run state to record")
    return end


UnitPhase = Literal["queued", "starting", "starting server", "evaluating", "stopping server", "finished"]
"""Where a unit is (UnitStatus.phase) while it runs."""

QueueWord = Literal["pending", "running", "submitted", "done", "failed"]
"""A Slurm job's state as the sweep shows it (executors.slurm_queue.describe), kept apart from the unit's
own phase (executors.base.Poll); `submitted` (not yet in squeue or sacct) is never a run state."""
QUEUE_RUN_STATE: dict[str, RunStateWord] = {
    "pending": "pending",
    "submitted": "pending",
    "running": "running",
}
"""A live job's queue word as the run's state in sweep.json."""

Outcome = Literal["ok", "parse_failure", "request_error", "data_error", "missing"]
"""What became of one question in scoring (scoring.base.outcome_of)."""
OUTCOMES: tuple[Outcome, ...] = get_args(Outcome)

Verdict = Literal["differs", "no detectable difference", "not comparable"]
"""A reproduction against a published result (scoring.published)."""
DIFFERS: Verdict = "differs"
NO_DIFFERENCE: Verdict = "no detectable difference"
NOT_COMPARABLE: Verdict = "not comparable"

ReasoningMode = Literal["on", "off"]
"""Whether a model reasons before it answers (a run's declared mode, a published result's mode)."""
