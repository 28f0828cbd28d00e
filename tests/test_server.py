"""What a server process the sweep starts gets (evaluator/study/server.py).

Its environment (trust3 #13): none of the user's credential variables (the Slurm executor's rule,
study.secrets.credential_named), only what a server needs (HF_TOKEN for gated weights not yet cached) and its
own fresh token; the stand-in server logs the environment it was given. Its readiness polls (trust3 #5): each
GET /health within a whole-request deadline and a size cap; a server dripping its /health no longer holds the
sweep."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from support.adversarial_server import RouteServer
from support.cli import run_cli
from support.study import Study

from evaluator.study.secrets import credential_named
from evaluator.study.server import SERVER_NEEDS, Server, ServerFailure, server_environment

pytestmark = pytest.mark.timeout(300)

USER = {
    "AWS_SECRET_ACCESS_KEY": "aws-secret-0123456789",
    "GITHUB_TOKEN": "ghp_0123456789abcdefghij",
    "OPENAI_API_KEY": "sk-user-0123456789abcdef",
    "SSH_AUTH_SOCK": "/tmp/ssh-agent.sock",
    "HF_TOKEN": "hf_gated0123456789abcdef",
    "DOCCOUNT_PLAIN_SETTING": "kept",
}


def test_a_local_served_model_gets_no_credential_of_the_user(tmp_path: Path) -> None:
    study = Study(tmp_path, rows=2)
    env_log = tmp_path / "server-env.json"
    command = study.command("--env-log", str(env_log))
    text = study.header(2) + f'[serve]\nexecutor = "local"\ngpus = [0]\ncommand = {json.dumps(command)}\n'
    text += '\n[[runs]]\nname = "a"\nmodel = "org/a"\nserve = { gpus = 1 }\n'
    study.file.write_text(text)
    res = run_cli("sweep", str(study.file), "--run-root", str(study.root), env=USER, timeout=240)
    assert res.returncode == 0, res.stderr
    seen = json.loads(env_log.read_text())
    for name in ("AWS_SECRET_ACCESS_KEY", "GITHUB_TOKEN", "OPENAI_API_KEY", "SSH_AUTH_SOCK"):
        assert name not in seen, name
    withheld = ("AWS_SECRET_ACCESS_KEY", "GITHUB_TOKEN", "OPENAI_API_KEY")
    assert not {USER[n] for n in withheld} & set(seen.values())  # under no other name either
    assert seen["HF_TOKEN"] == USER["HF_TOKEN"]  # gated weights not yet cached
    assert seen["DOCCOUNT_PLAIN_SETTING"] == "kept"
    assert seen["CUDA_VISIBLE_DEVICES"] == "0" and len(seen["VLLM_API_KEY"]) >= 32  # its own token


NAMES = st.from_regex(r"[A-Z][A-Z0-9]{0,6}(_[A-Z0-9]{1,8}){0,3}", fullmatch=True)


@given(st.dictionaries(NAMES, st.text(max_size=5), max_size=12), st.lists(NAMES, max_size=3))
def test_server_environment_keeps_exactly_the_plain_and_the_needed(env: dict, drop: list) -> None:
    out = server_environment(env, drop)
    for name, value in env.items():
        kept = name not in drop and (name in SERVER_NEEDS or not credential_named(name))
        assert (out.get(name) == value) if kept else name not in out
    assert set(out) <= set(env)


def test_a_dripping_health_check_ends_at_the_readiness_deadline(tmp_path: Path) -> None:
    with RouteServer({"/health": "drip"}) as srv:
        server = Server(None, "r", [], tmp_path / "log", {})  # type: ignore[arg-type]  # no launch here
        server.port = srv.server_address[1]
        server.proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
        try:
            t0 = time.monotonic()
            with pytest.raises(ServerFailure, match="not ready within 2 s"):
                server.wait_ready(2.0, threading.Event())
            took = time.monotonic() - t0
        finally:
            server.proc.kill()
            server.proc.wait()
    assert took < 5.0 + 4.0, took  # one poll of at most 5 s past the 2 s (the drip alone: 5 minutes)
