"""Sweeps on a real Slurm (`[serve] executor = "slurm"`; `make test-slurm` starts the cluster): one job per
run through submitit, the fast stand-in server (tests/support/standin_server.py) plugged in through `command`.
Packing on the cluster's 4 pretend GPUs, adopting jobs after the sweep process is gone, resubmitting a
job that hit its time limit (the folder resumes, no question answered twice), cancelling on Ctrl-C,
and no key in the job folder."""

from __future__ import annotations

import base64
import json
import os
import signal
import subprocess
import sys
import time
import urllib.parse
from pathlib import Path
from typing import Any

import pytest
from support.cli import REPO, clean_env, run_cli
from support.datagen import doccount_reply
from support.openai_test_server import TestServer
from support.slurm_cluster import queue_empty, slurm_fixture  # noqa: F401  (the `slurm` fixture)
from support.study import Study, overlapping_gpu_sharing, wait_until

pytestmark = [pytest.mark.slurm, pytest.mark.timeout(400)]


class ClusterStudy(Study):
    """A sweep folder in tmp_path whose runs are Slurm jobs serving the stand-in."""

    def __init__(self, tmp: Path, rows: int = 4, name: str = "cluster") -> None:
        super().__init__(tmp, rows, name)

    def write(
        self, runs: list[dict[str, Any]], serve: str = "", concurrency: int = 2, time_: str = "5"
    ) -> Path:
        command = self.command("--request-log", str(self.requests))
        text = self.header(concurrency) + (
            f'[serve]\nexecutor = "slurm"\npartition = "debug"\ntime = "{time_}"\n'
            f'gpus_per_node = 4\ncpus_per_gpu = 1\nmem_per_gpu = "256M"\ncommand = {json.dumps(command)}\n{serve}'
        )
        for r in runs:
            text += f'\n[[runs]]\nname = "{r["name"]}"\nmodel = "org/{r["name"]}"\n'
            if "serve" in r:
                text += (
                    "serve = {" + ", ".join(f"{k} = {json.dumps(v)}" for k, v in r["serve"].items()) + "}\n"
                )
            text += "".join(f"{k} = {json.dumps(v)}\n" for k, v in r.items() if k not in ("name", "serve"))
        self.file.write_text(text)
        return self.file

    def set_latency(self, seconds: float) -> None:
        """How long the stand-in waits before each answer, read by each server when it starts."""
        config = json.loads((self.tmp / "cfg.json").read_text())
        (self.tmp / "cfg.json").write_text(json.dumps({**config, "latency_s": seconds}))

    def sweep(self, *extra: str, env: dict[str, str] | None = None, timeout: float = 300) -> Any:
        return run_cli(
            "sweep", str(self.file), "--run-root", str(self.root), *extra, env=env, timeout=timeout
        )

    def start(self, *extra: str) -> subprocess.Popen[str]:
        cmd = [sys.executable, "-m", "evaluator.cli", "sweep", str(self.file), "--run-root", str(self.root)]
        return subprocess.Popen(
            [*cmd, *extra], env=clean_env(), cwd=str(REPO), stderr=subprocess.PIPE, text=True
        )

    def state(self) -> dict[str, Any]:
        try:
            return json.loads((self.folder / "sweep.json").read_text())["runs"]
        except (OSError, ValueError, KeyError):
            return {}

    def job_ids(self) -> dict[str, str]:
        return {name: st["job_id"] for name, st in self.state().items() if st.get("job_id")}

    def started(self) -> list[str]:
        return [r["name"] for r in self.server_records() if r["end"] is None]

    def submitted(self) -> list[str]:
        """The job ids submitit submitted for this sweep (one job folder each)."""
        folder = self.folder / "logs" / "slurm"
        return sorted(p.name for p in folder.iterdir() if p.is_dir()) if folder.is_dir() else []

    def sacct_states(self) -> dict[str, str]:
        """Each submitted job's state in Slurm's accounting database (`CANCELLED by 0` -> CANCELLED)."""
        ids = self.submitted()
        out = subprocess.run(
            ["sacct", "-X", "-n", "-P", "-o", "JobID,State", "-j", ",".join(ids)],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        return {j: s.split()[0] for j, s in (line.split("|") for line in out.splitlines() if line.strip())}

    def responses(self, run: str) -> list[dict[str, Any]]:
        path = self.folder / run / "responses.partial.jsonl"
        return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


def squeue_ids() -> set[str]:
    out = subprocess.run(["squeue", "-h", "-o", "%i"], capture_output=True, text=True, check=True).stdout
    return set(out.split())


# ----------------------------------------------------------------------------- packing


def test_runs_asking_1_1_2_4_gpus_never_share_one(slurm: str, tmp_path: Path) -> None:
    study = ClusterStudy(tmp_path, name="packing")
    needs = {"a1": 1, "b1": 1, "c2": 2, "d4": 4}
    study.write([{"name": n, "serve": {"gpus": g, "args": ["--hold-s", "1.5"]}} for n, g in needs.items()])
    res = study.sweep()
    assert res.returncode == 0, res.stderr
    got = study.intervals()
    assert sorted(r["name"] for r in got) == sorted(f"org/{n}" for n in needs)
    assert overlapping_gpu_sharing(got) == []
    for r in got:  # each server had exactly the GPUs Slurm gave its job, as many as it asked
        assert len(r["gpus"].split(",")) == needs[r["name"].split("/")[1]], r
    small = [r for r in got if r["name"] != "org/d4"]
    assert any(a["start"] < b["end"] and b["start"] < a["end"] for a in small for b in small if a is not b), (
        "the 1- and 2-GPU jobs never ran side by side: the sweep did not submit them at once"
    )
    jobs = study.job_ids()
    assert sorted(jobs) == sorted(needs)
    for name, job in jobs.items():
        config = json.loads((study.folder / name / "run_config.json").read_text())
        launch = config["launch"]
        assert launch["job_id"] == job and launch["partition"] == "debug" and launch["host"] == slurm
        assert len(launch["gpus"]) == needs[name]
        assert (study.folder / "logs" / "slurm" / job / f"{job}_0_log.out").is_file()
        assert (study.folder / "logs" / f"{name}.job.out").resolve().name == f"{job}_0_log.out"
        assert (study.folder / "logs" / f"{name}.server.log").is_file()
    assert queue_empty()


def test_a_run_asking_more_gpus_than_a_node_has_is_refused_at_plan_time(slurm: str, tmp_path: Path) -> None:
    study = ClusterStudy(tmp_path, name="toobig")
    study.write([{"name": "ok", "serve": {"gpus": 1}}, {"name": "huge", "serve": {"gpus": 8}}])
    for extra in ((), ("--plan",), ("--detach",)):
        res = study.sweep(*extra)
        assert res.returncode == 2, res.stderr
        assert "huge" in res.stderr and "gpus_per_node" in res.stderr
    assert not (study.folder / "sweep.json").exists() or study.job_ids() == {}
    assert study.submitted() == []


# ----------------------------------------------------------------------------- adopt, detach, status


def test_a_rerun_adopts_the_jobs_of_a_sweep_that_is_gone(slurm: str, tmp_path: Path) -> None:
    study = ClusterStudy(tmp_path, rows=6, name="adopt")
    study.write([{"name": f"r{i}", "serve": {"gpus": 1, "args": ["--hold-s", "1.5"]}} for i in range(3)])
    proc = study.start()
    wait_until(lambda: len(study.job_ids()) == 3 and len(study.started()) >= 2, 90, "jobs running")
    first = study.job_ids()
    proc.kill()  # the sweep process is gone; its jobs go on
    proc.wait()
    assert set(first.values()) <= squeue_ids()
    status = study.sweep("--status")
    assert status.returncode == 0, status.stderr
    for name, job in first.items():
        line = next(x for x in status.stdout.splitlines() + status.stderr.splitlines() if x.startswith(name))
        assert job in line and ("running" in line or "pending" in line or "done" in line), line
    again = study.sweep()
    assert again.returncode == 0, again.stderr
    assert study.job_ids() == first  # adopted, not submitted again
    assert study.submitted() == sorted(first.values())
    for name in first:
        ids = [r["sample_id"] for r in study.responses(name)]
        assert len(ids) == len(set(ids)) == 6
    # A third invocation finds every run done: nothing is submitted.
    third = study.sweep()
    assert third.returncode == 0 and study.submitted() == sorted(first.values())
    assert set(study.sacct_states().values()) == {"COMPLETED"}


def test_detach_submits_and_exits_then_status_and_a_rerun_follow_the_same_jobs(
    slurm: str, tmp_path: Path
) -> None:
    study = ClusterStudy(tmp_path, rows=4, name="detach")
    study.write([{"name": f"r{i}", "serve": {"gpus": 2, "args": ["--hold-s", "1"]}} for i in range(3)])
    res = study.sweep("--detach")
    assert res.returncode == 0, res.stderr
    jobs = study.job_ids()
    assert len(jobs) == 3 and set(jobs.values()) <= squeue_ids()
    print(res.stderr)
    wait_until(
        lambda: not (set(jobs.values()) & squeue_ids()) or len(study.intervals()) == 3, 120, "jobs end"
    )
    status = study.sweep("--status")
    print(status.stderr)
    done = study.sweep()
    assert done.returncode == 0, done.stderr
    assert study.job_ids() == jobs and study.submitted() == sorted(jobs.values())


def test_a_live_job_of_a_run_whose_settings_changed_is_cancelled_and_submitted_anew(
    slurm: str, tmp_path: Path
) -> None:
    study = ClusterStudy(tmp_path, rows=20, name="changed")
    study.write([{"name": "r", "serve": {"gpus": 1, "args": ["--hold-s", "2"]}}], concurrency=1)
    assert study.sweep("--detach").returncode == 0
    old = study.job_ids()["r"]
    study.write([{"name": "r", "serve": {"gpus": 1, "args": ["--hold-s", "0.1"]}}], concurrency=1)
    res = study.sweep()
    assert res.returncode == 0, res.stderr
    new = study.job_ids()["r"]
    assert new != old and study.sacct_states() == {old: "CANCELLED", new: "COMPLETED"}


# ----------------------------------------------------------------------------- time limit


def test_a_job_that_hits_its_time_limit_is_resubmitted_and_its_folder_resumes(
    slurm: str, tmp_path: Path
) -> None:
    """A 1-minute job over 40 rows of 3 s each, one at a time (Slurm enforces limits every 30 s, so the
    job runs 60-90 s): it ends TIMEOUT part-way. The re-run submits a new job (its server now answers at
    once: the stand-in reads its latency when it starts), which sends only the rows not yet recorded."""
    study = ClusterStudy(tmp_path, rows=40, name="timeout")
    study.write([{"name": "slow", "serve": {"gpus": 1}}], concurrency=1, time_="1")
    study.set_latency(3.0)
    first = study.sweep(timeout=240)
    assert first.returncode == 3, first.stderr
    st = study.state()["slow"]
    assert st["state"] == "failed" and "TIMEOUT" in st["message"], st
    partial = study.responses("slow")
    assert 10 <= len(partial) < 40
    job1 = st["job_id"]
    assert study.sacct_states()[job1] == "TIMEOUT"
    study.set_latency(0.0)
    second = study.sweep(timeout=240)
    assert second.returncode == 0, second.stderr
    assert study.job_ids()["slow"] != job1
    ids = [r["sample_id"] for r in study.responses("slow")]
    assert len(ids) == len(set(ids)) == 40  # no question answered twice
    chats = [json.loads(x) for x in study.requests.read_text().splitlines()]
    chats = [c for c in chats if c.get("path", "").endswith("/chat/completions")]
    assert len(chats) <= 40 + 1  # at most the one request in flight at the time limit is sent again
    assert study.sacct_states() == {job1: "TIMEOUT", study.job_ids()["slow"]: "COMPLETED"}


# ----------------------------------------------------------------------------- cancel


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_ctrl_c_or_sigterm_cancels_every_job_and_its_server(slurm: str, tmp_path: Path, sig: int) -> None:
    study = ClusterStudy(tmp_path, rows=30, name=f"cancel{sig}")
    runs = [
        {"name": f"r{i}", "serve": {"gpus": g, "args": ["--hold-s", "2"]}} for i, g in enumerate([2, 2, 4])
    ]
    study.write(runs, concurrency=1)
    proc = study.start()
    wait_until(lambda: len(study.started()) >= 2, 90, "two servers serving")
    jobs = study.job_ids()
    assert len(jobs) == 3
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=150)
    assert proc.returncode == 130, err
    assert not (set(jobs.values()) & squeue_ids()), "a job is still queued or running"
    wait_until(lambda: not study.servers_alive(), 30, "every stand-in server gone")
    assert set(study.sacct_states().values()) == {"CANCELLED"}


# ----------------------------------------------------------------------------- keys


def key_forms(key: str) -> list[str]:
    raw = key.encode()
    return [
        key,
        base64.b64encode(raw).decode(),
        base64.b64encode(f"Bearer {key}".encode()).decode()[:-4],
        urllib.parse.quote(key),
        json.dumps(key)[1:-1],
        raw.hex(),
        key[4:16],
    ]


def test_no_key_in_the_job_folder_and_only_the_runs_own_key_in_its_job(slurm: str, tmp_path: Path) -> None:
    study = ClusterStudy(tmp_path, rows=4, name="keys")
    key, other = "sk-slurmtest-" + "A1b2C3d4E5f6G7h8J9", "sk-othertest-" + "Z9y8X7w6V5u4T3s2R1"
    names = tmp_path / "job-env-names"
    with TestServer({"answers": doccount_reply(study.rows)}) as server:
        study.write(
            [
                {"name": "remote", "base_url": server.base_url, "api_key_env": "DOCCOUNT_TEST_KEY"},
                {"name": "other", "base_url": server.base_url, "api_key_env": "DOCCOUNT_OTHER_KEY"},
                {"name": "served", "serve": {"gpus": 1}},
            ],
            serve=f'setup = ["env | cut -d= -f1 | sort > {names}.$SLURM_JOB_ID"]\n',
        )
        env = {"DOCCOUNT_TEST_KEY": key, "DOCCOUNT_OTHER_KEY": other, "HF_TOKEN": "hf_" + "q" * 30}
        res = study.sweep(env=env)
        assert res.returncode == 0, res.stderr
        auth = {
            r["headers"].get("authorization_sha256")
            for r in server.requests()
            if r["path"].endswith("/completions")
        }
    assert None not in auth and len(auth) == 2  # each remote run sent its own key
    jobs = study.job_ids()
    seen = {name: Path(f"{names}.{job}").read_text().split() for name, job in jobs.items()}
    assert "DOCCOUNT_TEST_KEY" in seen["remote"] and "DOCCOUNT_OTHER_KEY" not in seen["remote"]
    assert "DOCCOUNT_OTHER_KEY" in seen["other"] and "DOCCOUNT_TEST_KEY" not in seen["other"]
    for name in jobs:
        assert "HF_TOKEN" not in seen[name] and "MODEL_API_KEY" not in seen[name]
    assert not {"DOCCOUNT_TEST_KEY", "DOCCOUNT_OTHER_KEY"} & set(seen["served"])
    files = [p for p in study.folder.rglob("*") if p.is_file()]
    assert any(p.name.endswith("_submitted.pkl") for p in files) and any(
        p.name.endswith(".sh") for p in files
    )
    for path in files:
        data = path.read_bytes()
        for secret in (key, other):
            for form in key_forms(secret):
                assert form.encode() not in data, f"{path} holds the key ({form!r})"


@pytest.fixture(autouse=True)
def _nothing_left(request: pytest.FixtureRequest) -> Any:
    yield
    if "slurm" in request.fixturenames:
        assert queue_empty(60), f"jobs left in the queue: {squeue_ids()}"


# ----------------------------------------------------------------------------- real vLLM


def test_one_job_serves_the_real_vllm_cpu_server(slurm: str, tmp_path: Path) -> None:
    """The tiny checkpoint on vLLM's CPU build, started, checked, used and stopped inside one Slurm job."""
    from support.vllm import FLAGS, marked, tiny_model, vllm_env, vllm_python

    python = vllm_python()
    model = tiny_model(python)
    study = ClusterStudy(tmp_path, rows=4, name="vllm-slurm")
    command = [python, str(REPO / "scripts" / "vllm_cpu_serve.py")]
    study.file.write_text(
        f'name = "vllm-slurm"\ndata_files = "{tmp_path / "data" / "*.parquet"}"\n\n[defaults]\nconcurrency = 2\n'
        f"max_tokens = 16\ntimeout = 120\nmax_retries = 1\n"
        # the tiny random model never writes a parsable answer: the format smoke stop is off here
        f'no_smoke_check = true\n\n[serve]\nexecutor = "slurm"\npartition = "debug"\n'
        f'time = "15:00"\ngpus_per_node = 4\nmem_per_gpu = "4G"\ncommand = {json.dumps(command)}\n\n[[runs]]\n'
        f'name = "tiny"\nmodel = "{model}"\nserved_model_name = "tiny"\n'
        f"serve = {{ gpus = 1, args = {json.dumps(FLAGS)} }}\n"
    )
    token = os.urandom(8).hex()
    env = vllm_env(token)
    t0 = time.monotonic()
    res = study.sweep(env=env, timeout=900)
    took = time.monotonic() - t0
    logs = study.folder / "logs"
    assert res.returncode == 0, res.stderr[-4000:] + "".join(
        p.read_text()[-3000:] for p in logs.glob("*.server.log")
    )
    records = [json.loads(x) for x in (study.folder / "tiny" / "responses.jsonl").read_text().splitlines()]
    assert (
        len(records) == 4
        and {r["status"] for r in records} == {"ok"}
        and {r["model"] for r in records} == {"tiny"}
    )
    launch = json.loads((study.folder / "tiny" / "run_config.json").read_text())["launch"]
    (job,) = study.submitted()
    assert launch["job_id"] == job and launch["partition"] == "debug" and launch["host"] == slurm
    assert launch["command"][:2] == command and len(launch["gpus"]) == 1
    assert study.sacct_states() == {job: "COMPLETED"}
    assert marked(token) == [], "a process of the vLLM server outlived its job"
    print(f"\nreal vLLM in a Slurm job: submitted, served, evaluated and stopped in {took:.0f} s")
