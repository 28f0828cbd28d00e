"""sweep.json as one type (evaluator.runfolder.handoff.SweepState), written by the sweep and read through
the same type by the leaderboard and the sweep archive: an older file's queue words read as run states, and a
damaged file is refused in one line naming it, never a traceback nor a board built from half of it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import msgspec
import pytest
from support.cli import eval_args, run_cli
from support.datagen import doccount_reply, doccount_rows, write_doccount
from support.openai_test_server import TestServer

from evaluator.runfolder.handoff import SWEEP_STATE, RunState, SweepState, read_sweep_state

STATE = {"sweep": "t", "file": "sweeps/t.toml", "sha256": "ab" * 32, "invocations": 1}


@pytest.fixture(scope="module")
def run_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One real run folder: 6 questions evaluated against the loopback server (one answered wrong)."""
    base = tmp_path_factory.mktemp("sweep-state")
    rows = doccount_rows(6)
    write_doccount(base / "data" / "test-00000-of-00001.parquet", rows)
    with TestServer() as server:
        server.set_config({"answers": doccount_reply(rows, wrong={rows[0]["sample_id"]})})
        res = run_cli("evaluate", *eval_args(server.base_url, str(base / "data" / "*.parquet"), base / "run"))
    assert res.returncode == 0, res.stderr
    return base / "run"


def sweep_folder(run: Path, tmp: Path, state: object) -> Path:
    folder = tmp / "runs" / "t"
    for name in ("a", "b"):
        shutil.copytree(run, folder / name)
    (folder / SWEEP_STATE).write_text(json.dumps(state), encoding="utf-8")
    return folder


def test_the_state_a_sweep_writes_reads_back_the_same(tmp_path: Path) -> None:
    state = SweepState(
        **STATE, runs={"a": RunState("done", exit_code=0, api_key_env="A_KEY"), "b": RunState()}
    )
    (tmp_path / SWEEP_STATE).write_bytes(msgspec.json.encode(state))
    assert read_sweep_state(tmp_path / SWEEP_STATE) == state
    assert (state.run_state("a"), state.run_state("b"), state.run_state("c")) == ("done", None, None)


def test_the_leaderboard_reads_states_and_the_sweep_through_the_type(
    run_folder: Path, tmp_path: Path
) -> None:
    """A sweep.json written before queue words were mapped: `submitted` is the run state it means (pending,
    the unwritten default: no state on the board), `running` stays."""
    runs = {"a": {"state": "submitted", "job_id": "7"}, "b": {"state": "running"}}
    folder = sweep_folder(run_folder, tmp_path, {**STATE, "runs": runs})
    res = run_cli("leaderboard", str(folder))
    assert res.returncode == 0, res.stderr
    board = json.loads((folder / "leaderboard" / "leaderboard.json").read_text())
    assert {e["name"]: e["state"] for e in board["runs"]} == {"a": None, "b": "running"}
    assert board["sweep"] == {"name": "t", "file": "sweeps/t.toml", "sha256": "ab" * 32}
    assert board["title"] == "t"


@pytest.mark.parametrize(
    "damaged",
    [
        {**STATE, "runs": {"a": 3}},  # a run's state is not an object
        {**STATE, "runs": {"a": {"state": "exploded"}}},  # not a run state
        {**STATE, "pricing": [1]},
        [],
    ],
    ids=["run-not-object", "unknown-state", "pricing-list", "array"],
)
def test_a_damaged_sweep_json_is_refused_in_one_line(
    run_folder: Path, tmp_path: Path, damaged: object
) -> None:
    folder = sweep_folder(run_folder, tmp_path, damaged)
    res = run_cli("leaderboard", str(folder))
    assert res.returncode == 2, res.stdout + res.stderr
    assert "Traceback" not in res.stderr
    errors = [x for x in res.stderr.splitlines() if x.startswith("error:")]
    assert len(errors) == 1 and SWEEP_STATE in errors[0], res.stderr
    assert not (folder / "leaderboard" / "leaderboard.json").exists()


@pytest.mark.parametrize("damaged", [{**STATE, "runs": {"a": 3}}, []], ids=["run-not-object", "array"])
def test_archiving_a_sweep_with_a_damaged_sweep_json_is_refused_in_one_line(
    run_folder: Path, tmp_path: Path, damaged: object
) -> None:
    folder = sweep_folder(run_folder, tmp_path, damaged)
    res = run_cli("archive", "--run-root", str(folder), "--output", str(tmp_path / "s.tar.gz"))
    assert res.returncode == 2, res.stdout + res.stderr
    errors = [x for x in res.stderr.splitlines() if x.startswith("error:")]
    assert len(errors) == 1 and SWEEP_STATE in errors[0] and "Traceback" not in res.stderr, res.stderr
    assert not (tmp_path / "s.tar.gz").exists()
