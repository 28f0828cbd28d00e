"""Sweeps that serve their own models (docs/serving.md), with a fast stand-in server plugged in through
`[serve] command` (tests/standin_server.py takes the contract's arguments): packing on a pretend pool
of 4 GPU ids, a server that cannot start, one that serves another model, one that dies mid-run, and
teardown on SIGTERM, Ctrl-C and kill -9 of the sweep. Real processes, loopback only."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import REPO, clean_env, run_cli
from datagen import doccount_reply, doccount_rows, write_doccount
from test_sweep import processes_naming

pytestmark = pytest.mark.timeout(300)

STANDIN = str(Path(__file__).resolve().parent / "standin_server.py")


class Study:
    """A sweep folder in tmp_path: data, the stand-in's config, a sweep file, and what its servers did."""

    def __init__(self, tmp: Path, rows: int = 4, name: str = "served") -> None:
        self.tmp, self.name = tmp, name
        self.rows = doccount_rows(rows)
        write_doccount(tmp / "data" / "test-00000-of-00001.parquet", self.rows)
        (tmp / "cfg.json").write_text(json.dumps({"answers": doccount_reply(self.rows)}))
        (tmp / "state").mkdir()
        self.records = tmp / "servers.jsonl"
        self.requests = tmp / "requests.jsonl"
        self.root = tmp / "runs"
        self.file = tmp / "sweep.toml"
        self.folder = self.root / name

    def command(self, *extra: str) -> list[str]:
        """The stand-in server's command line: it records each server's life and every request."""
        cfg = str(self.tmp / "cfg.json")
        return [sys.executable, STANDIN, "--config", cfg, "--record", str(self.records), *extra]

    def header(self, concurrency: int) -> str:
        """The sweep file's name, data and [defaults] (fast retries, so that a failure shows at once)."""
        return (
            f'name = "{self.name}"\ndata_files = "{self.tmp / "data" / "*.parquet"}"\n\n[defaults]\n'
            f"concurrency = {concurrency}\nmax_retries = 1\nretry_backoff = 0.01\nretry_max_wait = 0.05\n"
            "timeout = 60\n\n"
        )

    def write(self, runs: list[dict[str, Any]], gpus: str = "[0, 1, 2, 3]", concurrency: int = 2) -> Path:
        command = self.command("--state", str(self.tmp / "state"), "--request-log", str(self.requests))
        text = self.header(concurrency) + f"[serve]\ngpus = {gpus}\ncommand = {json.dumps(command)}\n"
        for r in runs:
            serve = ", ".join(f"{k} = {json.dumps(v)}" for k, v in r["serve"].items())
            text += f'\n[[runs]]\nname = "{r["name"]}"\nmodel = "org/{r["name"]}"\nserve = {{ {serve} }}\n'
        self.file.write_text(text)
        return self.file

    def sweep(self, *extra: str, timeout: float = 240) -> subprocess.CompletedProcess:
        return run_cli("sweep", str(self.file), "--run-root", str(self.root), *extra, timeout=timeout)

    def start(self, *extra: str, **popen: Any) -> subprocess.Popen:
        cmd = [
            sys.executable,
            "-m",
            "evaluator.cli",
            "sweep",
            str(self.file),
            "--run-root",
            str(self.root),
            *extra,
        ]
        return subprocess.Popen(cmd, env=clean_env(), cwd=str(REPO), **popen)

    def server_records(self) -> list[dict[str, Any]]:
        """The stand-ins' own records: each server's name, GPU ids, start and end (None while it runs)."""
        return [json.loads(x) for x in self.records.read_text().splitlines()] if self.records.exists() else []

    def intervals(self) -> list[dict[str, Any]]:
        """Each ended server's (name, GPU ids, start, end)."""
        return [r for r in self.server_records() if r["end"] is not None]

    def state(self) -> dict[str, Any]:
        return json.loads((self.folder / "sweep.json").read_text())["runs"]

    def servers_alive(self) -> list[int]:
        """Pids of live stand-ins and guards of this study (their command lines name its folder)."""
        return processes_naming(str(self.tmp / "cfg.json"))


def wait_until(cond: Any, timeout: float, what: str) -> float:
    start = time.monotonic()
    while not cond():
        assert time.monotonic() - start < timeout, what
        time.sleep(0.05)
    return time.monotonic() - start


def overlapping_gpu_sharing(intervals: list[dict[str, Any]]) -> list[tuple[str, str]]:
    bad = []
    for i, a in enumerate(intervals):
        for b in intervals[i + 1 :]:
            overlap = a["start"] < b["end"] and b["start"] < a["end"]
            if overlap and set(a["gpus"].split(",")) & set(b["gpus"].split(",")) - {""}:
                bad.append((a["name"], b["name"]))
    return bad


# ----------------------------------------------------------------------------- packing


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
    makespan = max(r["end"] for r in got) - min(r["start"] for r in got)
    durations = [r["end"] - r["start"] for r in got]
    area = sum(len(r["gpus"].split(",")) * (r["end"] - r["start"]) for r in got)
    bound = max(area / 4, max(durations))
    print(f"\npacking: {len(got)} servers on 4 GPUs: makespan {makespan:.1f} s, lower bound {bound:.1f} s "
          f"(GPU-seconds/4 {area / 4:.1f}, longest {max(durations):.1f}), one after another {sum(durations):.1f} s")  # fmt: skip
    assert makespan < 0.8 * sum(durations)  # side by side, not one after another
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
    assert took < 45, f"the death was noticed only after {took:.0f} s (the request timeout is 60 s)"
    study.write([{"name": "fragile", "serve": {"gpus": 1}}], concurrency=1)
    n_before = len((tmp_path / "requests.jsonl").read_text().splitlines())
    res = study.sweep()
    assert res.returncode == 0, res.stderr
    later = [json.loads(x) for x in (tmp_path / "requests.jsonl").read_text().splitlines()[n_before:]]
    by_sha = {r["image_sha256"]: r["sample_id"] for r in study.rows}
    assert not {by_sha[r["image_sha256"]] for r in later} & answered  # no question answered twice
    assert study.state()["fragile"]["state"] == "done"


# ----------------------------------------------------------------------------- teardown


@pytest.mark.parametrize("how", ["sigterm", "ctrl-c"])
def test_sigterm_or_ctrl_c_stops_every_server_and_a_rerun_resumes(tmp_path: Path, how: str) -> None:
    study = Study(tmp_path, rows=8)
    study.write(
        [{"name": f"s{i}", "serve": {"gpus": 2, "args": ["--hold-s", "0.5"]}} for i in range(3)],
        concurrency=1,
    )
    proc = study.start(stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    partial = study.root / "served" / "s0" / "responses.partial.jsonl"
    wait_until(lambda: partial.exists() and partial.read_text().count("\n") >= 1, 90, "no row recorded")
    if how == "sigterm":
        proc.send_signal(signal.SIGTERM)
    else:
        os.killpg(proc.pid, signal.SIGINT)  # a terminal's Ctrl-C reaches the whole foreground group
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert study.servers_alive() == []
    assert {s["state"] for s in study.state().values()} == {"interrupted"}
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
