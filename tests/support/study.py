"""A served sweep in a temporary folder (docs/serving.md): data, the stand-in server's config and command
line (tests/support/standin_server.py records each server's life and requests), the sweep file, and
what its servers did. test_serve_sweep.py runs it locally, test_slurm_sweep.py on a real Slurm."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from support.cli import REPO, clean_env, processes_naming, run_cli
from support.datagen import doccount_reply, doccount_rows, write_doccount

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

    def header(self, concurrency: int, timeout: int = 60) -> str:
        """The sweep file's name, data and [defaults] (fast retries, so that a failure shows at once)."""
        return (
            f'name = "{self.name}"\ndata_files = "{self.tmp / "data" / "*.parquet"}"\n\n[defaults]\n'
            f"concurrency = {concurrency}\nmax_retries = 1\nretry_backoff = 0.01\nretry_max_wait = 0.05\n"
            f"timeout = {timeout}\n\n"
        )

    def write(
        self, runs: list[dict[str, Any]], gpus: str = "[0, 1, 2, 3]", concurrency: int = 2, timeout: int = 60
    ) -> Path:
        command = self.command("--state", str(self.tmp / "state"), "--request-log", str(self.requests))
        text = (
            self.header(concurrency, timeout) + f"[serve]\ngpus = {gpus}\ncommand = {json.dumps(command)}\n"
        )
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
