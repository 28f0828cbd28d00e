"""Sweeps that serve their own models (docs/serving.md), with a fast stand-in server plugged in through
`[serve] command` (tests/support/standin_server.py takes the contract's arguments): packing on a pretend pool
of 4 GPU ids, a server that cannot start, one that serves another model, one that dies mid-run, and
teardown on SIGTERM, Ctrl-C and kill -9 of the sweep. Real processes, loopback only."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from support.study import Study, overlapping_gpu_sharing, wait_until

pytestmark = pytest.mark.timeout(300)

# ----------------------------------------------------------------------------- packing


def most_at_once(intervals: list[dict[str, Any]]) -> int:
    """The largest number of servers up at the same moment."""
    events = sorted([(r["start"], 1) for r in intervals] + [(r["end"], -1) for r in intervals])
    live = most = 0
    for _, step in events:  # an end sorts before a start at the same instant: touching is not overlapping
        live += step
        most = max(most, live)
    return most


def test_nine_runs_pack_onto_four_gpus_without_sharing_one(tmp_path: Path) -> None:
    study = Study(tmp_path)
    needs = [2, 1, 3, 1, 1, 4, 2, 1, 2]
    holds = [0.6, 0.2, 0.4, 0.8, 0.2, 0.3, 0.5, 0.7, 0.2]
    runs = [
        {"name": f"r{i}", "serve": {"gpus": g, "args": ["--hold-s", str(h)]}}
        for i, (g, h) in enumerate(zip(needs, holds, strict=True))
    ]
    study.write(runs)
    res = study.sweep("--parallel", "8")
    assert res.returncode == 0, res.stderr
    got = study.intervals()
    assert sorted(r["name"] for r in got) == sorted(f"org/r{i}" for i in range(len(needs)))
    assert overlapping_gpu_sharing(got) == []
    for r in got:  # each server had exactly the GPUs it asked for
        i = int(r["name"].split("/r")[1])
        assert len(r["gpus"].split(",")) == needs[i]
    # side by side, not one after another: at some moment several servers were up at once (read from the
    # servers' own start/end records, not from how long the sweep took on a loaded machine)
    assert most_at_once(got) >= 2, got
    assert all(s["state"] == "done" for s in study.state().values())


def test_plan_prints_servers_gpus_and_order_and_starts_nothing(tmp_path: Path) -> None:
    study = Study(tmp_path)
    study.write([{"name": "big", "serve": {"gpus": 3}}, {"name": "two", "serve": {"gpus": 2}},
                 {"name": "one", "serve": {"gpus": 1, "revision": "abc123"}}])  # fmt: skip
    res = study.sweep("--plan")
    assert res.returncode == 0, res.stderr
    lines = {ln.split()[0]: ln for ln in res.stdout.splitlines() if ln.startswith(("big", "two", "one"))}
    assert lines["big"].split()[1:3] == ["1", "0,1,2"]
    assert lines["one"].split()[1:3] == ["2", "3"]  # backfilled beside big
    assert lines["two"].split()[1] == "3" and "waits for big's GPUs" in lines["two"]
    assert "--served-model-name org/one --revision abc123" in res.stdout and '--port "$PORT"' in res.stdout
    assert not study.root.exists() and not study.records.exists()


def test_without_parallel_a_served_sweep_starts_as_many_servers_as_the_pool_holds(tmp_path: Path) -> None:
    study = Study(tmp_path)
    study.write(
        [{"name": f"one{i}", "serve": {"gpus": 1}} for i in range(7)], gpus="[0, 1, 2, 3, 4, 5, 6, 7]"
    )
    res = study.sweep("--plan")
    assert res.returncode == 0, res.stderr
    rows = [ln.split() for ln in res.stdout.splitlines() if ln.startswith("one")]
    assert [r[1] for r in rows] == [str(i) for i in range(1, 8)] and "waits for" not in res.stdout
    assert sorted(r[2] for r in rows) == [str(g) for g in range(7)]  # all side by side, not 4 then 3
    res = study.sweep("--plan", "--parallel", "4")
    assert res.stdout.count("waits for") == 3


def test_a_run_asking_more_gpus_than_the_pool_is_refused_before_anything_starts(tmp_path: Path) -> None:
    study = Study(tmp_path)
    study.write([{"name": "fits", "serve": {"gpus": 1}}, {"name": "huge", "serve": {"gpus": 8}}])
    res = study.sweep()
    assert res.returncode == 2
    assert "run huge asks for 8 GPU(s)" in res.stderr and "has 4" in res.stderr
    assert not study.records.exists() and not (study.root / "served").exists()


# ----------------------------------------------------------------------------- failures


def test_failing_servers_are_tried_a_bounded_number_of_times_and_the_others_go_on(tmp_path: Path) -> None:
    study = Study(tmp_path)
    study.write([
        {"name": "oom", "serve": {"gpus": 2, "args": ["--fail-starts", "9"]}},
        {"name": "flaky", "serve": {"gpus": 1, "args": ["--fail-starts", "1"]}},
        {"name": "imposter", "serve": {"gpus": 1, "args": ["--serve-as", "some/other-model"]}},
        {"name": "fine", "serve": {"gpus": 1}},
    ])  # fmt: skip
    res = study.sweep("--parallel", "4")
    assert res.returncode == 3, res.stderr
    state = study.state()
    assert {n: s["state"] for n, s in state.items()} == {
        "oom": "failed",
        "flaky": "done",
        "imposter": "failed",
        "fine": "done",
    }
    log = (study.root / "served" / "logs" / "oom.server.log").read_text()
    assert log.count("--- try ") == 3 and (tmp_path / "state" / "org_oom.starts").read_text() == "3"
    table = res.stderr[res.stderr.index("sweep served: 4 run(s)") :]
    oom_line = next(ln for ln in table.splitlines() if ln.startswith("oom"))
    assert "CUDA out of memory" in oom_line and "gave up after 3 tries" in oom_line
    imposter_line = next(ln for ln in table.splitlines() if ln.startswith("imposter"))
    assert "does not serve 'org/imposter'" in imposter_line
    assert (study.root / "served" / "logs" / "imposter.server.log").read_text().count("--- try ") == 1
    assert not (study.root / "served" / "imposter" / "responses.partial.jsonl").exists()  # never evaluated
    config = json.loads((study.root / "served" / "flaky" / "run_config.json").read_text())
    launch, serving = config["launch"], config["serving"]
    assert launch["tries"] == 2 and launch["launcher"] == "process" and len(launch["gpus"]) == 1
    assert launch["command"][-4:] == ["--served-model-name", "org/flaky", "--fail-starts", "1"]
    assert serving["model"] == "org/flaky" and serving["args"] == ["--fail-starts", "1"]
    assert serving["server_version"] == "test-server-0" and config["model"] == "org/flaky"
    assert study.servers_alive() == []


def test_a_server_dying_mid_run_is_noticed_within_seconds_and_the_run_resumes(tmp_path: Path) -> None:
    study = Study(tmp_path, rows=10)
    study.write(
        [{"name": "fragile", "serve": {"gpus": 1, "args": ["--die-after", "4", "--hold-s", "0.2"]}}],
        concurrency=1,
        timeout=600,  # far above the sweep's own time on a loaded machine (59 s seen at load 14)
    )
    t0 = time.monotonic()
    res = study.sweep()
    took = time.monotonic() - t0
    assert res.returncode == 3, res.stderr
    st = study.state()["fragile"]
    assert (
        st["state"] == "failed" and "exited mid-run" in st["message"] and "EngineCore died" in st["message"]
    )
    partial = study.root / "served" / "fragile" / "responses.partial.jsonl"
    first = [json.loads(x) for x in partial.read_text().splitlines()]
    answered = {r["sample_id"] for r in first if r["status"] == "ok"}
    assert 0 < len(answered) < 10
    # waiting out the in-flight request would take the whole 600 s request timeout
    assert took < 300, f"the death was noticed only after {took:.0f} s (the request timeout is 600 s)"
    study.write([{"name": "fragile", "serve": {"gpus": 1}}], concurrency=1)
    n_before = len((tmp_path / "requests.jsonl").read_text().splitlines())
    res = study.sweep()
    assert res.returncode == 0, res.stderr
    later = [json.loads(x) for x in (tmp_path / "requests.jsonl").read_text().splitlines()[n_before:]]
    by_sha = {r["image_sha256"]: r["sample_id"] for r in study.rows}
    assert not {by_sha[r["image_sha256"]] for r in later} & answered  # no question answered twice
    assert study.state()["fragile"]["state"] == "done"


# ----------------------------------------------------------------------------- teardown


def test_sigterm_then_ctrl_c_each_stop_every_server_and_a_rerun_resumes(tmp_path: Path) -> None:
    """SIGTERM to a sweep, then Ctrl-C to the sweep that resumes it: each time every server stops and every
    run (the queued third too) ends interrupted; a last re-run finishes. One folder for both signals: a
    re-run after each cost three more served runs (servers, evaluate and score children)."""
    study = Study(tmp_path, rows=12)  # enough rows that the second sweep still has some to record
    study.write(
        [{"name": f"s{i}", "serve": {"gpus": 2, "args": ["--hold-s", "0.5"]}} for i in range(3)],
        concurrency=1,
    )
    partials = [study.root / "served" / run / "responses.partial.jsonl" for run in ("s0", "s1")]

    def recorded() -> list[int]:
        return [p.read_text().count("\n") if p.exists() else 0 for p in partials]

    for how in ("sigterm", "ctrl-c"):
        before = recorded()
        proc = study.start(stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
        # a row more in both running runs: an evaluate child still importing when the stop reaches it dies
        # of the signal (the run "error", not "interrupted")
        grew = lambda b=before: all(n > m for n, m in zip(recorded(), b, strict=True))  # noqa: E731
        wait_until(grew, 90, f"no row recorded before the {how}")
        if how == "sigterm":
            proc.send_signal(signal.SIGTERM)
        else:
            os.killpg(proc.pid, signal.SIGINT)  # a terminal's Ctrl-C reaches the whole foreground group
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 130, (how, err)
        assert study.servers_alive() == [], how
        assert {s["state"] for s in study.state().values()} == {"interrupted"}, how
    res = study.sweep()
    assert res.returncode == 0, res.stderr
    assert study.servers_alive() == []


def test_servers_stop_when_the_sweep_is_killed_with_sigkill(tmp_path: Path) -> None:
    study = Study(tmp_path, rows=8)
    study.write(
        [{"name": f"k{i}", "serve": {"gpus": 1, "args": ["--hold-s", "0.5"]}} for i in range(2)],
        concurrency=1,
    )
    proc = study.start(stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_until(
        lambda: len(study.records.read_text().splitlines()) >= 2 if study.records.exists() else False,
        90,
        "no server started",
    )
    assert study.servers_alive()
    proc.kill()
    proc.wait(10)
    took = wait_until(lambda: not study.servers_alive(), 20, "a server outlived its sweep")
    print(f"\nservers gone {took:.1f} s after the sweep's kill -9")
    res = study.sweep()
    assert res.returncode == 0, res.stderr
