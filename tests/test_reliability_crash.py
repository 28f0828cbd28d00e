"""Crashes, signals, concurrent writers, full disks and read-only run folders.

The evaluator runs as a real subprocess against the loopback test server. What the server received
(its request log) and what is on disk (the record file) are the evidence; nothing is mocked.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from support import launch
from support.cli import SCORE, clean_env, fast_eval_cmd

sys.path.insert(0, str(Path(__file__).resolve().parent))
from support import datagen  # noqa: E402
from support.openai_test_server import TestServer  # noqa: E402

pytestmark = pytest.mark.timeout(180)

PARTIAL = "responses.partial.jsonl"
SEED = int(os.environ.get("RELIABILITY_SEED", "0")) or random.randrange(1, 10**6)


class Proc:
    """An evaluator subprocess whose output goes to files (no pipe can fill up and block it)."""

    def __init__(self, cmd: list[str], log_dir: Path, name: str) -> None:
        self.out = log_dir / f"{name}.out"
        self.err = log_dir / f"{name}.err"
        with open(self.out, "wb") as out, open(self.err, "wb") as err:
            self.p = subprocess.Popen(cmd, stdout=out, stderr=err, env=clean_env())
        self.pid = self.p.pid

    def wait(self, timeout: float = 60) -> int:
        return self.p.wait(timeout)

    @property
    def stderr(self) -> str:
        return self.err.read_text(errors="replace")

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            self.p.kill()
        self.p.wait(10)


def run(cmd: list[str], timeout: float = 90) -> subprocess.CompletedProcess:
    return launch.run(cmd, capture_output=True, text=True, env=clean_env(), timeout=timeout)


def wait_until(cond: Callable[[], bool], proc: Proc | None = None, timeout: float = 30) -> bool:
    """True once cond() holds; False if the process exited first."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        if proc is not None and proc.p.poll() is not None:
            return cond()
        # a condition copies the server's whole request log or re-reads the records: at 100 polls a
        # second that was most of this process's CPU; 20 a second still lands a kill mid-run
        time.sleep(0.05)
    raise AssertionError("timed out waiting")


def done_ids(root: Path) -> set[str]:
    latest = {r["sample_id"]: r for r in datagen.complete_records(root)}
    return {sid for sid, r in latest.items() if r["status"] == "ok" and r["parsed_answer"] is not None}


def make_data(tmp_path: Path, n: int) -> tuple[Path, list[dict[str, Any]]]:
    rows = datagen.doccount_rows(n)
    data = tmp_path / "data"
    datagen.write_doccount(data / "test-0.parquet", rows)
    return data, rows


# --------------------------------------------------------------------------- SIGKILL, torn line, resume


def test_sigkill_repeatedly_then_resume(tmp_path: Path) -> None:
    rng = random.Random(SEED)
    print(f"RELIABILITY_SEED={SEED}")
    data, rows = make_data(tmp_path, 120)
    sha_of = {r["sample_id"]: r["image_sha256"] for r in rows}
    config = {
        "answers": datagen.doccount_reply(rows),
        "latency_s": 0.08,
        "fault_rate": 0.15,
        "faults": ["500", "drop", "empty_content", "429_no_retry_after"],
        "seed": SEED,
    }
    root = tmp_path / "run"
    kills = 0
    torn_id: str | None = None
    with TestServer(config) as srv:
        for i in range(5):
            final = i == 4
            n0 = max((q["n"] for q in srv.requests()), default=0)
            done_before = done_ids(root)
            lines_before = len(datagen.complete_records(root))
            proc = Proc(
                fast_eval_cmd(srv.base_url, data, root, "--quiet", "--concurrency", "4", max_retries=10),
                tmp_path,
                f"run{i}",
            )
            if final:
                assert proc.wait(90) == 0, proc.stderr
            else:
                if i == 0:  # a random moment, most likely during start-up (imports, config, lock)
                    time.sleep(rng.uniform(0.05, 1.5))
                elif i == 3:  # make sure there are records to tear afterwards
                    wait_until(lambda lb=lines_before: len(datagen.complete_records(root)) >= lb + 3, proc)
                    time.sleep(rng.uniform(0, 0.2))
                else:  # a random moment while requests are in flight
                    k = rng.randint(1, 25)
                    wait_until(lambda t=n0 + k: max((q["n"] for q in srv.requests()), default=0) >= t, proc)
                    time.sleep(rng.uniform(0, 0.1))
                if proc.p.poll() is None:
                    proc.p.send_signal(signal.SIGKILL)
                    kills += 1
                proc.wait(10)
            time.sleep(0.2)  # let the server log anything still in its socket buffers
            # No row that was finished when this run started was sent again.
            sent = {q["image_sha256"] for q in srv.requests() if q["n"] > n0}
            assert not sent & {sha_of[s] for s in done_before}, f"finished rows re-sent (seed {SEED})"
            if torn_id is not None and final:
                assert "torn" in proc.stderr  # reported ...
                assert sha_of[torn_id] in sent  # ... and that row evaluated again
            if i == 3:  # tear the last record line, as a kill in the middle of a write would
                path = root / PARTIAL
                blob = path.read_bytes()
                assert blob.endswith(b"\n")
                start = blob.rstrip(b"\n").rfind(b"\n") + 1
                torn_id = json.loads(blob[start:])["sample_id"]
                cut = rng.randint(start + 1, len(blob) - 2)
                os.truncate(path, cut)
    assert kills >= 3, "the kills did not land while the evaluator ran"
    records = datagen.complete_records(root)
    ok = Counter(r["sample_id"] for r in records if r["status"] == "ok")
    assert ok == Counter({r["sample_id"]: 1 for r in rows}), f"lost or duplicated rows (seed {SEED})"
    assert all(r["correct"] for r in records if r["status"] == "ok")

    score = run([*SCORE, "--run-root", str(root)])
    assert score.returncode == 0, score.stderr
    assert "unparseable line" in score.stderr  # the torn fragment stays visible, and is ignored
    merged = [json.loads(line) for line in (root / "responses.jsonl").read_text().splitlines()]
    assert [r["sample_id"] for r in merged] == [r["sample_id"] for r in rows]
    assert all(r["status"] == "ok" and r["correct"] for r in merged)


def test_score_reports_a_torn_final_line(tmp_path: Path) -> None:
    data, rows = make_data(tmp_path, 5)
    root = tmp_path / "run"
    with TestServer({"answers": datagen.doccount_reply(rows)}) as srv:
        assert run(fast_eval_cmd(srv.base_url, data, root, "--quiet", max_retries=10)).returncode == 0
    path = root / PARTIAL
    os.truncate(path, path.stat().st_size - 40)
    score = run([*SCORE, "--run-root", str(root)])
    assert score.returncode == 0, score.stderr
    assert "torn" in score.stderr
    merged = [json.loads(line) for line in (root / "responses.jsonl").read_text().splitlines()]
    assert len(merged) == 5  # the torn row is present (as missing), never dropped from the denominator
    assert sum(r["status"] == "ok" for r in merged) == 4


# --------------------------------------------------------------------------- SIGINT / SIGTERM


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_signal_stops_cleanly_in_flight_rows_not_recorded(tmp_path: Path, sig: signal.Signals) -> None:
    data, rows = make_data(tmp_path, 12)
    stuck = rows[3:5]  # these two are in flight when the signal arrives
    sha_of = {r["sample_id"]: r["image_sha256"] for r in rows}
    config = {
        "answers": datagen.doccount_reply(rows),
        "script": {r["image_sha256"]: ["slow"] for r in stuck},
        "slow_s": 60,
    }
    root = tmp_path / "run"
    with TestServer(config) as srv:
        cmd = fast_eval_cmd(srv.base_url, data, root, "--quiet", "--concurrency", "4", max_retries=10)
        cmd[cmd.index("--timeout") + 1] = "120"
        proc = Proc(cmd, tmp_path, "interrupted")
        wait_until(lambda: len(datagen.complete_records(root)) >= len(rows) - len(stuck), proc)
        in_flight = {q["image_sha256"] for q in srv.requests()}
        assert {r["image_sha256"] for r in stuck} <= in_flight
        t0 = time.monotonic()
        proc.p.send_signal(sig)
        code = proc.wait(20)
        assert time.monotonic() - t0 < 10  # does not wait for the 60 s responses
        assert code == 130, proc.stderr
        assert "Traceback" not in proc.stderr
        assert "interrupted" in proc.stderr
        recs = datagen.complete_records(root)
        assert (root / PARTIAL).read_bytes().endswith(b"\n")  # no half-written line
        assert {r["sample_id"] for r in recs} == {r["sample_id"] for r in rows} - {
            r["sample_id"] for r in stuck
        }
        assert all(r["status"] == "ok" for r in recs)

        srv.set_config(answers=datagen.doccount_reply(rows))  # the endpoint recovers
        srv.reset()
        resumed = run(fast_eval_cmd(srv.base_url, data, root, "--quiet", max_retries=10))
        assert resumed.returncode == 0, resumed.stderr
        assert sorted(q["image_sha256"] for q in srv.requests()) == sorted(
            sha_of[r["sample_id"]] for r in stuck
        )
    assert Counter(r["sample_id"] for r in datagen.complete_records(root)) == Counter(
        {r["sample_id"]: 1 for r in rows}
    )


# --------------------------------------------------------------------------- concurrent writers


def test_second_evaluator_is_refused_and_a_killed_holder_does_not_block(tmp_path: Path) -> None:
    data, rows = make_data(tmp_path, 16)
    root = tmp_path / "run"
    with TestServer({"answers": datagen.doccount_reply(rows), "latency_s": 0.4}) as srv:
        holder = Proc(
            fast_eval_cmd(srv.base_url, data, root, "--quiet", "--concurrency", "1", max_retries=10),
            tmp_path,
            "holder",
        )
        try:
            wait_until(lambda: len(srv.requests()) >= 1, holder)
            assert holder.p.poll() is None
            config_before = (root / "run_config.json").read_bytes()
            second = run(fast_eval_cmd(srv.base_url, data, root, "--quiet", max_retries=10))
            assert second.returncode == 2, second.stderr
            lines = second.stderr.strip().splitlines()
            assert len(lines) == 1 and lines[0].startswith("error: "), second.stderr
            assert f"pid {holder.pid} " in lines[0]  # says which process holds the folder
            assert "in use by another evaluator" in lines[0]
            assert (root / "run_config.json").read_bytes() == config_before
        finally:
            holder.p.send_signal(signal.SIGKILL)
            holder.wait(10)
        # Only the holder ever sent anything: no image twice (the refused run sent nothing).
        sent = Counter(q["image_sha256"] for q in srv.requests())
        assert max(sent.values()) == 1
        # The killed holder's lock file is left behind, naming a dead process: it must not block.
        assert f"pid {holder.pid}" in (root / ".lock").read_text()
        srv.update_config(latency_s=0)
        t0 = time.monotonic()
        after = run(fast_eval_cmd(srv.base_url, data, root, "--quiet", max_retries=10), timeout=60)
        assert after.returncode == 0, after.stderr
        assert time.monotonic() - t0 < 30
    ok = Counter(r["sample_id"] for r in datagen.complete_records(root) if r["status"] == "ok")
    assert ok == Counter({r["sample_id"]: 1 for r in rows})


# --------------------------------------------------------------------------- full disk, read-only folder


@contextlib.contextmanager
def tmpfs(path: Path, size: str) -> Iterator[Path]:
    path.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root")
    proc = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], capture_output=True
    )
    if proc.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {proc.stderr.decode().strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def fill(path: Path, leave_bytes: int) -> Path:
    """Fill the file system holding `path` until about `leave_bytes` are free."""
    st = os.statvfs(path)
    free = st.f_bavail * st.f_frsize
    filler = path / "filler"
    with open(filler, "wb") as f:
        f.write(b"\0" * max(0, free - leave_bytes))
    return filler


def test_disk_full_mid_run_clear_error_records_stay_valid(tmp_path: Path) -> None:
    data, rows = make_data(tmp_path, 60)
    sha_of = {r["sample_id"]: r["image_sha256"] for r in rows}
    with (
        tmpfs(tmp_path / "disk", "512k") as disk,
        TestServer({"answers": datagen.doccount_reply(rows)}) as srv,
    ):
        root = disk / "run"
        filler = fill(disk, 40 * 1024)  # room for config and manifest, not for 60 records
        proc = run(fast_eval_cmd(srv.base_url, data, root, "--quiet", "--concurrency", "2", max_retries=10))
        assert proc.returncode == 2, proc.stderr
        assert "Traceback" not in proc.stderr
        last = proc.stderr.strip().splitlines()[-1]
        assert last.startswith("error: cannot write") and "No space left on device" in last
        assert "records already written stay valid" in last and "re-run the same command" in last
        written = datagen.complete_records(root)
        assert 0 < len(written) < len(rows)
        assert all(r["status"] == "ok" and r["correct"] for r in written)  # every complete line is valid
        first_done = done_ids(root)

        filler.unlink()  # free the space, resume
        srv.reset()
        resumed = run(fast_eval_cmd(srv.base_url, data, root, "--quiet", max_retries=10))
        assert resumed.returncode == 0, resumed.stderr
        sent = {q["image_sha256"] for q in srv.requests()}
        assert not sent & {sha_of[s] for s in first_done}
        ok = Counter(r["sample_id"] for r in datagen.complete_records(root) if r["status"] == "ok")
        assert ok == Counter({r["sample_id"]: 1 for r in rows})


def test_disk_full_at_start_is_a_clear_error(tmp_path: Path) -> None:
    data, rows = make_data(tmp_path, 5)
    with (
        tmpfs(tmp_path / "disk", "256k") as disk,
        TestServer({"answers": datagen.doccount_reply(rows)}) as srv,
    ):
        fill(disk, 0)
        proc = run(fast_eval_cmd(srv.base_url, data, disk / "run", "--quiet", max_retries=10))
        assert proc.returncode == 2, proc.stderr
        assert "Traceback" not in proc.stderr
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
        assert "No space left on device" in lines[0] and str(disk / "run") in lines[0]
        assert srv.requests() == []


def test_read_only_run_folder(tmp_path: Path) -> None:
    data, rows = make_data(tmp_path, 5)
    with tmpfs(tmp_path / "disk", "1m") as disk, TestServer({"answers": datagen.doccount_reply(rows)}) as srv:
        root = disk / "run"
        assert (
            run(fast_eval_cmd(srv.base_url, data, root, "--quiet", "--limit", "3", max_retries=10)).returncode
            == 0
        )
        before = {p.name: p.read_bytes() for p in root.iterdir() if p.is_file()}
        remount = subprocess.run(["mount", "-o", "remount,ro", str(disk)], capture_output=True)
        if remount.returncode != 0:
            pytest.skip(f"cannot remount read-only: {remount.stderr.decode().strip()}")
        srv.reset()
        proc = run(fast_eval_cmd(srv.base_url, data, root, "--quiet", max_retries=10))
        assert proc.returncode == 2, proc.stderr
        assert "Traceback" not in proc.stderr
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
        assert str(root) in lines[0] and "not writable" in lines[0] and "--run-root" in lines[0]
        assert srv.requests() == []
        after = {p.name: p.read_bytes() for p in root.iterdir() if p.is_file()}
        assert after == before  # the records already written are untouched
        score = run([*SCORE, "--run-root", str(root)])  # scoring a read-only folder: clear error too
        assert "Traceback" not in score.stderr, score.stderr
        assert score.returncode == 2 and score.stderr.startswith("error: "), score.stderr
