"""The sweep's loop in-process (evaluator/study/sweep.py, executors/): a fake executor whose units
finish, fail, are refused or interrupted; the local executor packing served runs onto its GPUs with a
stand-in unit; the Slurm executor against fake `sbatch`/`squeue`/`sacct`/`scancel` (tests/support/fake_slurm.py).
No wall clock: the loop's sleep is set to 0, the Slurm executor reads a virtual clock, units end when the
test says so. What only a real process shows (servers, signals, evaluate children) stays in
test_sweep.py, test_serve_sweep.py and test_slurm_sweep.py.
"""

from __future__ import annotations

import inspect
import io
import json
import logging
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
from collections.abc import Mapping, Sequence
from importlib import metadata
from pathlib import Path
from typing import get_args

import pytest
from support.answered import answered_run_fixture  # noqa: F401  (the `answered_run` fixture)
from support.cli import REPO
from support.fake_slurm import FakeSlurm

from evaluator.core.errors import ExitCode
from evaluator.core.vocab import RunStateWord, UnitEnd
from evaluator.runfolder.handoff import SWEEP_STATE, RunState
from evaluator.study import sweep as sweep_module
from evaluator.study.executors.base import PlanRow, Poll, StatusRow, recorded_status
from evaluator.study.executors.local import LocalExecutor
from evaluator.study.sweep import plan_sweep, run_sweep, sweep_status
from evaluator.study.sweep_file import load_sweep, option_specs
from evaluator.study.unit import UnitResult, UnitStatus, UnitTask

KEY = "sk-live-" + "k" * 24  # a run's key: never in sweep.json, the status or a message


@pytest.fixture(autouse=True)
def _no_sleep(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sweep_module, "POLL_S", 0.0)  # the loop's pace, not its logic


def specs() -> dict:
    from evaluator.cli.main import main

    return option_specs(main.commands["evaluate"].params)


def sweep_file(folder: Path, runs: dict[str, str], serve: str = "") -> Path:
    """A sweep file of endpoint runs (name -> extra TOML of the run), or served ones with `serve`."""
    text = f'name = "s"\ndata_files = "d/*.parquet"\n{serve}\n'
    for name, extra in runs.items():
        where = "" if "serve" in extra else 'base_url = "http://127.0.0.1:9/v1"\n'
        text += f'[[runs]]\nname = "{name}"\nmodel = "m"\n{where}{extra}\n'
    path = folder / "s.toml"
    path.write_text(text)
    return path


def sweep_json(root: Path) -> dict:
    return json.loads((root / "s" / SWEEP_STATE).read_text("utf-8"))


# ----------------------------------------------------------------------------- a fake executor
class FakeHandle:
    """A unit that is queued for `waits` polls, then evaluates, then ends as `end` says."""

    def __init__(self, task: UnitTask, end: UnitResult, waits: int, job_id: str | None) -> None:
        self.task, self.job_id = task, job_id
        self.polls = [*[Poll(queue="pending", detail="queued")] * waits,
                      Poll(unit=UnitStatus(phase="evaluating", detail=f"12/40 with {end.message or ''}")),
                      Poll(unit=UnitStatus(phase="finished", result=end))]  # fmt: skip
        self.cancelled = False

    def poll(self) -> Poll | None:
        return self.polls.pop(0) if len(self.polls) > 1 else self.polls[0]

    def cancel(self) -> None:
        if not self.cancelled:
            self.cancelled = True
            self.polls = [Poll(unit=UnitStatus(phase="finished", result=UnitResult(state="interrupted")))]


class FakeExecutor:
    """The executor interface with nothing behind it: each run ends as `ends` says; every state of
    sweep.json seen while the loop runs is kept."""

    name = "local"
    parallel = 2
    can_detach = False

    def __init__(
        self,
        ends: Mapping[str, UnitResult],
        state_file: Path,
        waits: int = 2,
        handle_type: type[FakeHandle] = FakeHandle,
    ) -> None:
        self.ends, self.state_file, self.waits, self.handle_type = ends, state_file, waits, handle_type
        self.submitted: list[str] = []
        self.handles: list[FakeHandle] = []
        self.closed = 0

    def check(self, tasks: Sequence[UnitTask]) -> None:
        pass

    def plan(self, tasks: Sequence[UnitTask]) -> list[PlanRow]:
        return [PlanRow(run=t.run, where="fake") for t in tasks]

    def plan_header(self) -> list[str]:
        return ["executor fake"]

    def submit(self, task: UnitTask) -> FakeHandle:
        self.submitted.append(task.run)
        handle = self.handle_type(task, self.ends[task.run], self.waits, job_id=f"j-{task.run}")
        self.handles.append(handle)
        return handle

    def close(self) -> None:
        self.closed += 1
        for h in self.handles:
            h.cancel()

    def status(self, runs: Sequence[str], states: Mapping[str, RunState], folder: Path) -> list[StatusRow]:
        return [recorded_status(r, states.get(r)) for r in runs]


ENDS = {
    "ok": UnitResult(state="done", exit_code=0),
    "bad": UnitResult(state="failed", exit_code=3, message=f"error: 3 requests failed (key {KEY})"),
    "refused": UnitResult(state="refused", exit_code=2, message="error: the folder's settings changed"),
    "stopped": UnitResult(state="interrupted", exit_code=130, message="error: interrupted"),
}


def test_each_units_end_is_its_run_state_and_no_queue_word_is_recorded(tmp_path: Path) -> None:
    path = sweep_file(tmp_path, dict.fromkeys(ENDS, 'api_key_env = "A_KEY"\n'))
    root = tmp_path / "runs"
    executor = FakeExecutor(ENDS, root / "s" / SWEEP_STATE)
    code = run_sweep(load_sweep(path, specs()), specs(), root, [], None, env={"A_KEY": KEY},
                     out=io.StringIO(), executor=executor)  # fmt: skip
    final = sweep_json(root)
    assert code == ExitCode.INCOMPLETE and executor.closed == 1
    assert {n: r["state"] for n, r in final["runs"].items()} == {
        "ok": "done",
        "bad": "failed",
        "refused": "refused",
        "stopped": "interrupted",
    }
    assert {n: r.get("exit_code") for n, r in final["runs"].items()} == {
        "ok": 0,
        "bad": 3,
        "refused": 2,
        "stopped": 130,
    }
    assert final["runs"]["ok"]["job_id"] == "j-ok" and "message" not in final["runs"]["ok"]
    assert KEY not in json.dumps(final) and "error: 3 requests failed" in final["runs"]["bad"]["message"]
    assert {r["state"] for r in final["runs"].values()} <= set(get_args(RunStateWord))


def test_a_rerun_submits_again_what_did_not_finish_and_only_that(tmp_path: Path) -> None:
    path = sweep_file(tmp_path, dict.fromkeys(ENDS, ""))
    root = tmp_path / "runs"
    sweep = load_sweep(path, specs())
    # a run counts as finished only when its folder holds run_config.json: the unit that ends done wrote it
    (root / "s" / "ok").mkdir(parents=True)
    (root / "s" / "ok" / "run_config.json").write_text("{}")
    first = FakeExecutor(ENDS, root / "s" / SWEEP_STATE)
    run_sweep(sweep, specs(), root, [], None, env={}, out=io.StringIO(), executor=first)
    assert sorted(first.submitted) == sorted(ENDS)
    ends = {n: UnitResult(state="done", exit_code=0) for n in ENDS}
    second = FakeExecutor(ends, root / "s" / SWEEP_STATE)
    code = run_sweep(sweep, specs(), root, [], None, env={}, out=io.StringIO(), executor=second)
    assert sorted(second.submitted) == ["bad", "refused", "stopped"]  # ok finished with the same settings
    assert code == ExitCode.OK and sweep_json(root)["invocations"] == 2
    assert {r["state"] for r in sweep_json(root)["runs"].values()} == {"done"}


def test_ended_runs_are_scored_in_the_sweeps_process_and_what_scoring_says_is_in_their_logs(
    tmp_path: Path, answered_run: Path
) -> None:
    """Scoring a run that ended starts no process (a child per run cost ~1.5 s of CPU): its warnings, a lone
    surrogate among them, reach the run's log; a folder that cannot be scored is an error line there and
    the other run is still scored."""
    ends = {"ok": UnitResult(state="done", exit_code=0), "broken": UnitResult(state="done", exit_code=0)}
    root = tmp_path / "runs"
    ok = shutil.copytree(answered_run, root / "s" / "ok")
    last = json.loads((ok / "responses.partial.jsonl").read_text().splitlines()[-1])
    with open(ok / "responses.partial.jsonl", "a", encoding="ascii") as f:  # json.dumps escapes it
        f.write(json.dumps({**last, "sample_id": "stranger-\udc00"}) + "\n")
    (root / "s" / "broken").mkdir()
    (root / "s" / "broken" / "run_config.json").write_text("{}")
    executor = FakeExecutor(ends, root / "s" / SWEEP_STATE)
    code = run_sweep(load_sweep(sweep_file(tmp_path, dict.fromkeys(ends, "")), specs()), specs(), root, [],
                     None, env={}, out=io.StringIO(), executor=executor)  # fmt: skip
    assert code == ExitCode.OK
    assert json.loads((ok / "scores" / "summary.json").read_text())["primary"]["questions"] == 4
    log = (root / "s" / "logs" / "ok.log").read_text("utf-8").splitlines()
    assert any(line.startswith("warning: ") and "stranger-\\udc00" in line for line in log), log
    assert f"report: {ok / 'scores' / 'report.html'}" in log and (ok / "scores" / "report.html").is_file()
    broken = (root / "s" / "logs" / "broken.log").read_text("utf-8").splitlines()
    assert len(broken) == 1 and broken[0].startswith("error: ") and "run_config.json" in broken[0], broken
    assert not (root / "s" / "broken" / "scores").exists()


def test_ctrl_c_during_the_loop_cancels_every_unit_and_exits_130(tmp_path: Path) -> None:
    path = sweep_file(tmp_path, {"a": "", "b": ""})
    root = tmp_path / "runs"
    polls = 0

    class CtrlC(FakeHandle):
        def poll(self) -> Poll | None:
            nonlocal polls
            polls += 1
            if polls == 3:
                raise KeyboardInterrupt  # as Ctrl-C arrives while the loop polls
            return super().poll()

    executor = FakeExecutor(
        {"a": ENDS["ok"], "b": ENDS["ok"]}, root / "s" / SWEEP_STATE, waits=3, handle_type=CtrlC
    )
    code = run_sweep(load_sweep(path, specs()), specs(), root, [], None, env={}, out=io.StringIO(),
                     executor=executor)  # fmt: skip
    assert code == ExitCode.INTERRUPTED and executor.closed == 1
    assert all(h.cancelled for h in executor.handles)
    assert {r["state"] for r in sweep_json(root)["runs"].values()} == {"interrupted"}


def test_a_real_ctrl_c_stops_the_sweep_even_where_a_library_swallows_keyboardinterrupt(
    tmp_path: Path,
) -> None:
    # SIGINT to the sweep's own process while its main thread is inside code that catches BaseException
    # (as third-party code may): a KeyboardInterrupt raised there would be lost and the sweep would go on
    path = sweep_file(tmp_path, {"a": "", "b": ""})
    root = tmp_path / "runs"
    polls = 0
    # as in a terminal's foreground (a background job started by a script inherits SIGINT ignored)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)

    class Swallowing(FakeHandle):
        def poll(self) -> Poll | None:
            nonlocal polls
            polls += 1
            try:
                if polls == 3:
                    os.kill(os.getpid(), signal.SIGINT)  # a terminal's Ctrl-C
                    for _ in range(1000):  # Python runs the handler between bytecodes, here
                        pass
            except BaseException:  # noqa: BLE001, S110 - the library that loses it
                pass
            return super().poll()

    ends = {"a": ENDS["ok"], "b": ENDS["ok"]}
    executor = FakeExecutor(ends, root / "s" / SWEEP_STATE, waits=3, handle_type=Swallowing)
    try:
        code = run_sweep(load_sweep(path, specs()), specs(), root, [], None, env={}, out=io.StringIO(),
                         executor=executor)  # fmt: skip
        handler_after = signal.getsignal(signal.SIGINT)
    finally:
        signal.signal(signal.SIGINT, previous)
    assert code == ExitCode.INTERRUPTED and all(h.cancelled for h in executor.handles)
    assert handler_after is signal.default_int_handler  # given back after the sweep


def test_status_and_plan_ask_the_executor(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = sweep_file(tmp_path, {"ok": "", "bad": 'api_key_env = "A_KEY"\n', "later": ""})
    root = tmp_path / "runs"
    sweep = load_sweep(path, specs())
    ends = {**ENDS, "later": ENDS["ok"]}
    run_sweep(sweep, specs(), root, ["ok", "bad"], None, env={"A_KEY": KEY}, out=io.StringIO(),
              executor=FakeExecutor(ends, root / "s" / SWEEP_STATE))  # fmt: skip
    out = io.StringIO()
    assert sweep_status(sweep, specs(), root, [], env={}, out=out, executor=FakeExecutor(ends, root)) == 0
    lines = out.getvalue().splitlines()
    assert lines[0] == "sweep s: 3 run(s), local"
    rows = {line.split()[0]: line.split(None, 2)[1:] for line in lines[3:]}
    assert rows["ok"] == ["done"] and rows["later"] == ["pending", "not started"]
    assert rows["bad"][0] == "failed" and KEY not in out.getvalue()
    with caplog.at_level(logging.INFO, logger="doccount.answer"):
        assert plan_sweep(sweep, specs(), root, [], None, env={}, executor=FakeExecutor(ends, root)) == 0
    plan = "\n".join(caplog.messages)
    assert "executor fake" in plan and "later" in plan


# ----------------------------------------------------------------------------- packing on the local pool
class Units:
    """A stand-in for serve_and_evaluate: records each start's GPUs and ends only when released."""

    def __init__(self) -> None:
        self.lock = threading.Condition()
        self.started: dict[str, list[str]] = {}
        self.released: set[str] = set()
        self.live: set[str] = set()
        self.shared: list[tuple[str, str]] = []

    def __call__(self, task: UnitTask, env: Mapping[str, str], report, stop) -> UnitResult:  # noqa: ANN001
        gpus = [g for g in env["CUDA_VISIBLE_DEVICES"].split(",") if g]
        with self.lock:
            self.shared += [(task.run, o) for o in self.live if set(self.started[o]) & set(gpus)]
            self.started[task.run] = gpus
            self.live.add(task.run)
            self.lock.notify_all()
            report(UnitStatus(phase="evaluating", detail="running"))
            self.lock.wait_for(lambda: task.run in self.released or stop.is_set(), timeout=60)
            self.live.discard(task.run)
        return UnitResult(state="done", exit_code=0)

    def wait_started(self, *runs: str) -> dict[str, list[str]]:
        with self.lock:
            assert self.lock.wait_for(lambda: set(runs) <= set(self.started), timeout=60), self.started
            return dict(self.started)

    def release(self, run: str) -> None:
        with self.lock:
            self.released.add(run)
            self.lock.notify_all()


def test_served_runs_pack_onto_the_pool_first_fit_with_backfill(tmp_path: Path) -> None:
    needs = {"a": 2, "b": 2, "c": 4, "d": 1}
    runs = {n: f"serve = {{ gpus = {g} }}\n" for n, g in needs.items()}
    path = sweep_file(tmp_path, runs, serve='[serve]\ncommand = ["my-server"]\ngpus = [0, 1, 2, 3]\n')
    root, units = tmp_path / "runs", Units()
    executor = LocalExecutor(["0", "1", "2", "3"], 0, {}, run=units)
    codes: list[int] = []
    sweep = load_sweep(path, specs())
    loop = threading.Thread(
        target=lambda: codes.append(
            run_sweep(sweep, specs(), root, [], None, env={}, out=io.StringIO(), executor=executor)
        )  # fmt: skip
    )
    loop.start()
    assert units.wait_started("a", "b") == {"a": ["0", "1"], "b": ["2", "3"]}  # c (4) and d wait
    units.release("a")
    assert units.wait_started("d")["d"] == ["0"]  # d backfills the freed GPUs; c still waits for 4
    assert "c" not in units.started
    units.release("b")
    units.release("d")
    assert units.wait_started("c")["c"] == ["0", "1", "2", "3"]
    units.release("c")
    loop.join(60)
    assert codes == [ExitCode.OK] and not units.shared  # servers that overlap never share a GPU
    assert {r["state"] for r in sweep_json(root)["runs"].values()} == {"done"}


# ----------------------------------------------------------------------------- what a local sweep imports
def test_a_local_sweep_never_imports_submitit(tmp_path: Path) -> None:
    """Every module of evaluator.study but the Slurm executor, and a local `--plan` and `--status`."""
    path = sweep_file(tmp_path, {"a": ""})
    code = (
        "import importlib, pkgutil, sys, evaluator.study, evaluator.cli.main\n"
        "for m in pkgutil.walk_packages(evaluator.study.__path__, 'evaluator.study.'):\n"
        "    if m.name != 'evaluator.study.executors.slurm':\n"
        "        importlib.import_module(m.name)\n"
        "from evaluator.cli.main import main\n"
        f"for extra in (['--plan'], ['--status']):\n"
        f"    try: main(['sweep', {str(path)!r}, '--run-root', {str(tmp_path / 'runs')!r}, *extra])\n"
        "    except SystemExit as e: assert e.code == 0, e.code\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'submitit'))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "[]"


def test_the_overridden_submitit_method_is_still_there_as_expected() -> None:
    """executors.slurm overrides one private method of submitit (the sbatch argv): the pinned version
    has it, with this signature, and its submission still calls it."""
    from submitit.slurm.slurm import SlurmExecutor as SubmititSlurm

    pinned = re.search(r'"submitit==([^"]+)"', (REPO / "pyproject.toml").read_text("utf-8"))
    assert pinned and metadata.version("submitit") == pinned.group(1)
    sig = inspect.signature(SubmititSlurm._make_submission_command)
    assert list(sig.parameters) == ["self", "submission_file_path"]
    assert "self._make_submission_command(submission_file_path)" in inspect.getsource(
        SubmititSlurm._submit_command
    )


def test_run_states_cover_every_unit_end_but_not_started() -> None:
    assert set(get_args(UnitEnd)) - set(get_args(RunStateWord)) == {"not-started"}


# ----------------------------------------------------------------------------- Slurm, faked at its commands
class Clock:
    """Virtual seconds for the Slurm executor's queue refresh: moved by the test (or `step` per read)."""

    def __init__(self, step: float = 0.0) -> None:
        self.now, self.step = 0.0, step

    def __call__(self) -> float:
        self.now += self.step
        return self.now


def slurm_sweep(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, FakeSlurm]:
    fake = FakeSlurm(tmp_path / "bin")
    monkeypatch.setenv("PATH", fake.path())
    for name in ("A_KEY", "B_KEY", "HF_TOKEN"):
        monkeypatch.setenv(name, f"{KEY}-{name}")
    runs = {"a": 'api_key_env = "A_KEY"\n', "b": 'api_key_env = "B_KEY"\n', "c": ""}
    return sweep_file(tmp_path, runs, '[serve]\nexecutor = "slurm"\npartition = "debug"\n'), fake


def status_rows(out: str) -> dict[str, list[str]]:
    return {line.split()[0]: line.split(None, 3)[1:] for line in out.splitlines()[3:]}


DONE = {"state": "done", "exit_code": 0}


def test_slurm_jobs_submitted_detached_then_followed_adopted_and_resubmitted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from evaluator.study.executors.slurm import REFRESH_S, SlurmExecutor

    path, fake = slurm_sweep(tmp_path, monkeypatch)
    sweep, root = load_sweep(path, specs()), tmp_path / "runs"
    fake.plan(a={"states": ["PENDING", "RUNNING", "COMPLETED"], "result": DONE},
              b={"states": ["PENDING", "FAILED"]}, c={"states": ["PENDING", "RUNNING", "GONE:TIMEOUT"]})  # fmt: skip
    out = io.StringIO()
    assert run_sweep(sweep, specs(), root, [], None, out=out, detach=True) == ExitCode.OK
    assert status_rows(out.getvalue()) == {r: ["pending", j, "pending (Resources)"] for r, j in
                                           (("a", "101"), ("b", "102"), ("c", "103"))}  # fmt: skip
    runs = sweep_json(root)["runs"]
    assert {n: (r.get("state", "pending"), r["job_id"]) for n, r in runs.items()} == {
        "a": ("pending", "101"),
        "b": ("pending", "102"),
        "c": ("pending", "103"),
    }
    # sbatch ran without the other runs' keys and the credential-named variables; a run's own key reached it
    env_a, env_c = fake.sbatch_env("101"), fake.sbatch_env("103")
    assert env_a["A_KEY"] == f"{KEY}-A_KEY" and "B_KEY" not in env_a and "HF_TOKEN" not in env_a
    assert not {"A_KEY", "B_KEY", "HF_TOKEN"} & set(env_c)

    for expected in (
        {"a": ["running", "101", "on node1, 1:02 elapsed, 0 rows recorded"],
         "b": ["failed", "102", "FAILED after 1:02, 0 rows recorded"],
         "c": ["running", "103", "on node1, 1:02 elapsed, 0 rows recorded"]},
        {"a": ["done", "101", "COMPLETED after 1:02, 0 rows recorded"],  # the unit's own result
         "b": ["failed", "102", "FAILED after 1:02, 0 rows recorded"],
         "c": ["failed", "103", "TIMEOUT after 00:01:10, 0 rows recorded"]},  # gone from squeue: sacct
    ):  # fmt: skip
        out = io.StringIO()
        assert sweep_status(sweep, specs(), root, [], out=out) == ExitCode.OK
        assert out.getvalue().splitlines()[0] == "sweep s: 3 run(s), slurm"
        assert status_rows(out.getvalue()) == expected
    assert fake.calls("sacct") >= 1 and fake.calls("sbatch") == 3

    # following them: a finished (adopted, not submitted again); b and c are submitted again and end done
    fake.plan(b={"states": ["RUNNING", "COMPLETED"], "result": DONE},
              c={"states": ["PENDING", "RUNNING", "COMPLETED"], "result": DONE})  # fmt: skip
    jobs = {n: r["job_id"] for n, r in runs.items()}
    executor = SlurmExecutor(sweep.serve.slurm, "s", dict(os.environ), ["A_KEY", "B_KEY"],
                             jobs=jobs, logs=root / "s" / "logs", clock=Clock(step=REFRESH_S))  # fmt: skip
    code = run_sweep(sweep, specs(), root, [], None, out=io.StringIO(), executor=executor)
    final = sweep_json(root)["runs"]
    assert code == ExitCode.OK and fake.calls("sbatch") == 5
    assert {n: (r["state"], r["job_id"]) for n, r in final.items()} == {
        "a": ("done", "101"),
        "b": ("done", "104"),
        "c": ("done", "105"),
    }
    assert KEY not in (root / "s" / SWEEP_STATE).read_text("utf-8")


def test_slurm_queue_is_read_at_most_every_refresh_and_close_cancels(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from evaluator.study.executors.slurm import REFRESH_S, SlurmExecutor
    from evaluator.study.serve_file import SlurmSettings

    _, fake = slurm_sweep(tmp_path, monkeypatch)
    logs = tmp_path / "runs" / "s" / "logs"
    logs.mkdir(parents=True)
    fake.plan(a={"states": ["PENDING", "PENDING", "RUNNING"]})
    clock = Clock()
    executor = SlurmExecutor(SlurmSettings(), "s", {}, logs=logs, clock=clock)
    task = UnitTask(run="a", evaluate_args=["--run-root", str(tmp_path / "runs" / "s" / "a")],
                    evaluate_log=str(logs / "a.log"))  # fmt: skip
    handle = executor.submit(task)
    assert handle.job_id == "101" and (logs / "a.job.out").is_symlink()
    first = handle.poll()
    assert first.queue == "pending" and first.unit is None and first.result is None
    assert [handle.poll() for _ in range(5)] == [first] * 5 and fake.calls("squeue") == 1  # no time passed
    clock.now += REFRESH_S
    handle.poll()
    clock.now += REFRESH_S
    assert handle.poll().queue == "running" and fake.calls("squeue") == 3
    executor.close()  # Ctrl-C: scancel, then wait until Slurm no longer lists the job as live
    assert fake.calls("scancel") == 1 and fake.jobs()["101"]["states"] == ["CANCELLED by 0"]
    clock.now += REFRESH_S
    end = handle.poll()
    assert end.result is not None and end.result.state == "interrupted" and end.queue == "failed"
    assert "Slurm job 101 ended CANCELLED" in (end.result.message or "")
    assert end.unit is not None and end.unit.phase == "finished"
