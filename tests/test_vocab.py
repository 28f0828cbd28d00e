"""The typed vocabularies (evaluator.core.vocab, evaluator.core.errors): the exit codes are the contract's
numbers and every documented one is an ExitCode; a sweep writes only declared run states to sweep.json,
whatever its units (a Slurm job's queue words included) report on the way."""

from __future__ import annotations

import io
import json
import re
import tempfile
from pathlib import Path
from typing import get_args

import click
import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from evaluator.core.errors import ExitCode
from evaluator.core.vocab import QueueWord, RunStateWord, UnitEnd, UnitPhase
from evaluator.runfolder.handoff import SWEEP_STATE
from evaluator.study import sweep as sweep_mod
from evaluator.study.executors.base import PlanRow, Poll
from evaluator.study.sweep import load_state
from evaluator.study.sweep_file import load_sweep, option_specs
from evaluator.study.unit import STATES, UnitResult, UnitStatus, UnitTask

ROOT = Path(__file__).resolve().parents[1]
RUN_STATES = get_args(RunStateWord)
EXIT_RE = re.compile(r"\bexits? (?:code )?(\d+)\b")


def test_exit_codes_are_the_contracts_numbers() -> None:
    assert {c.name: int(c) for c in ExitCode} == {
        "OK": 0,
        "NOT_VERIFIED": 1,
        "USAGE": 2,
        "INCOMPLETE": 3,
        "INTERRUPTED": 130,
    }
    # an ExitCode is written as its number: JSON, text, and a process's exit status
    assert msgspec.json.encode({"c": ExitCode.INCOMPLETE}) == b'{"c":3}'
    assert json.dumps(ExitCode.INTERRUPTED) == "130"
    assert f"exit {ExitCode.USAGE}" == "exit 2" and str(ExitCode.OK) == "0"


def _help_texts(command: click.Command) -> list[str]:
    texts = [command.help or "", *(getattr(p, "help", None) or "" for p in command.params)]
    for sub in getattr(command, "commands", {}).values():
        texts += _help_texts(sub)
    return texts


def test_every_documented_exit_code_is_an_exit_code() -> None:
    from evaluator.cli.main import main

    texts = [p.read_text("utf-8") for p in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]]
    documented = {int(n) for t in [*texts, *_help_texts(main)] for n in EXIT_RE.findall(t)}
    assert {2, 3} <= documented  # the pattern finds what the docs say
    assert documented <= {int(c) for c in ExitCode}


def test_the_unit_maps_every_exit_code_to_a_declared_run_state() -> None:
    assert set(STATES) == set(ExitCode)
    assert set(STATES.values()) <= set(RUN_STATES)


# ----------------------------------------------------------------------------- sweep.json's states
class ScriptedHandle:
    """A unit that reports the given statuses, one per poll (None: nothing new), then its end."""

    def __init__(self, statuses: list[Poll], job_id: str | None) -> None:
        self.statuses, self.job_id = list(statuses), job_id

    def poll(self) -> Poll | None:
        return self.statuses.pop(0) if len(self.statuses) > 1 else self.statuses[0]

    def cancel(self) -> None:
        pass


class ScriptedExecutor:
    """Submits nothing anywhere: each run's handle plays its script; every sweep.json seen is kept."""

    name = "local"
    parallel = 1
    can_detach = False

    def __init__(self, scripts: dict[str, list[Poll]], state_file: Path) -> None:
        self.scripts, self.state_file, self.seen_states = scripts, state_file, set()

    def check(self, tasks: object) -> None:
        pass

    def plan(self, tasks: object) -> list[PlanRow]:
        return []

    def plan_header(self) -> list[str]:
        return []

    def submit(self, task: UnitTask) -> ScriptedHandle:
        executor = self

        class Watching(ScriptedHandle):
            def poll(self) -> Poll | None:
                if executor.state_file.is_file():
                    runs = json.loads(executor.state_file.read_text("utf-8"))["runs"]
                    executor.seen_states |= {r.get("state", "pending") for r in runs.values()}
                return super().poll()

        return Watching(self.scripts[task.run], job_id="7" if task.run == "a" else None)

    def close(self) -> None:
        pass


def _sweep(folder: Path):
    from evaluator.cli.main import main

    specs = option_specs(main.commands["evaluate"].params)
    path = folder / "s.toml"
    path.write_text(
        'name = "s"\ndata_files = "d/*.parquet"\n'
        '[[runs]]\nname = "a"\nmodel = "m"\nbase_url = "http://127.0.0.1:9/v1"\n'
        '[[runs]]\nname = "b"\nmodel = "m"\nbase_url = "http://127.0.0.1:9/v1"\n'
    )
    return load_sweep(path, specs), specs


def _run(scripts: dict[str, list[Poll]], folder: Path) -> tuple[int, set[str], dict]:
    sweep, specs = _sweep(folder)
    executor = ScriptedExecutor(scripts, folder / "runs" / "s" / SWEEP_STATE)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(sweep_mod, "POLL_S", 0.001)  # the loop's pace, not its logic
        code = sweep_mod.run_sweep(
            sweep, specs, folder / "runs", [], 1, env={}, out=io.StringIO(), executor=executor
        )
    final = json.loads(executor.state_file.read_text("utf-8"))
    return code, executor.seen_states, final


def _end(state: UnitEnd, code: int | None) -> Poll:
    return Poll(unit=UnitStatus(phase="finished", result=UnitResult(state=state, exit_code=code)))


def _p(word: str) -> Poll:
    """A queue word as the scheduler's, a unit phase as the unit's own."""
    if word in get_args(QueueWord):
        return Poll(queue=word)  # type: ignore[arg-type]
    return Poll(unit=UnitStatus(phase=word))  # type: ignore[arg-type]


def test_a_slurm_jobs_queue_words_are_never_a_run_state(tmp_path: Path) -> None:
    """`submitted` (a job not yet in squeue or sacct) was written to sweep.json as it was."""
    scripts = {
        "a": [_p("submitted"), _p("submitted"), _p("pending"), _p("running"), _end("done", 0)],
        "b": [_p("running"), _p("evaluating"), _end("failed", 3)],
    }  # fmt: skip
    code, seen, final = _run(scripts, tmp_path)
    assert seen <= set(RUN_STATES), seen
    assert {n: r["state"] for n, r in final["runs"].items()} == {"a": "done", "b": "failed"}
    assert final["runs"]["a"]["job_id"] == "7" and final["runs"]["b"]["exit_code"] == 3
    assert code == ExitCode.INCOMPLETE


LIVE: list[str] = [*get_args(UnitPhase), *get_args(QueueWord)[:3]]
ENDS = [(s, c) for c, s in STATES.items()] + [("failed", None), ("stopped", 2), ("error", None)]


@settings(max_examples=15, deadline=None)
@given(
    st.lists(st.sampled_from([p for p in LIVE if p != "finished"]), max_size=4),
    st.lists(st.sampled_from([p for p in LIVE if p != "finished"]), max_size=4),
    st.sampled_from(ENDS),
    st.sampled_from(ENDS),
)
def test_sweep_json_holds_only_declared_states(
    a: list[str], b: list[str], end_a: tuple[UnitEnd, int | None], end_b: tuple[UnitEnd, int | None]
) -> None:
    scripts = {
        "a": [_p(p) for p in a] + [_end(*end_a)],
        "b": [_p(p) for p in b] + [_end(*end_b)],
    }
    with tempfile.TemporaryDirectory() as tmp:
        code, seen, final = _run(scripts, Path(tmp))
    states = {r["state"] for r in final["runs"].values()}
    assert seen <= set(RUN_STATES) and states <= set(RUN_STATES)
    assert code == (ExitCode.OK if states == {"done"} else ExitCode.INCOMPLETE)


def test_an_older_sweep_json_with_a_queue_word_keeps_its_job_ids(tmp_path: Path) -> None:
    sweep, _ = _sweep(tmp_path)
    path = tmp_path / SWEEP_STATE
    path.write_text(
        json.dumps(
            {"sweep": "s", "file": "f", "sha256": "x", "runs": {"a": {"state": "submitted", "job_id": "41"}}}
        )
    )
    state = load_state(path, sweep)
    assert state.runs["a"].state == "pending" and state.runs["a"].job_id == "41"
