"""Issue #39 point 12: a server a sweep starts gets a fresh random token in its environment (VLLM_API_KEY,
never on its command line, never written), its run's requests (and the readiness check) carry it, and
the user's own keys never reach it. The stand-in server (tests/support/standin_server.py) refuses /v1 requests
without the token, as vLLM does, and reports every request it received."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from support.cli import run_cli
from support.datagen import doccount_reply
from support.openai_test_server import TestServer
from support.study import Study

pytestmark = pytest.mark.timeout(300)

USER_KEY = "user-own-key-0123456789-must-never-reach-a-served-model"
USER_VLLM = "user-vllm-key-0123456789-must-not-be-the-server-token"


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _files_under(root: Path) -> dict[Path, bytes]:
    return {p: p.read_bytes() for p in root.rglob("*") if p.is_file()}


def test_each_served_run_has_its_own_token_and_no_key_of_the_user(tmp_path: Path) -> None:
    study = Study(tmp_path, rows=3)
    access = tmp_path / "access.jsonl"
    command = study.command("--state", str(tmp_path / "state"), "--access-log", str(access))
    with TestServer({"answers": doccount_reply(study.rows)}) as remote:
        text = study.header(2) + f"[serve]\ngpus = [0, 1]\ncommand = {json.dumps(command)}\n"
        for name in ("a", "b"):
            text += f'\n[[runs]]\nname = "{name}"\nmodel = "org/{name}"\nserve = {{ gpus = 1 }}\n'
        # an endpoint run in the same sweep: its key is the user's, and it goes to that endpoint only
        text += (
            f'\n[[runs]]\nname = "remote"\nmodel = "test-model"\nbase_url = "{remote.base_url}"\n'
            'api_key_env = "DOCCOUNT_USER_KEY"\n'
        )
        study.file.write_text(text)
        env = {"DOCCOUNT_USER_KEY": USER_KEY, "MODEL_API_KEY": USER_KEY, "VLLM_API_KEY": USER_VLLM}
        res = run_cli("sweep", str(study.file), "--run-root", str(study.root), env=env, timeout=240)
        remote_auth = {r["headers"]["authorization_sha256"] for r in remote.requests()}
    assert res.returncode == 0, res.stderr
    assert remote_auth == {_sha(f"Bearer {USER_KEY}")}  # the endpoint run still sends the user's key
    seen = [{**e.pop("request"), **e} for e in map(json.loads, access.read_text().splitlines())]
    tokens = {s["token"] for s in seen}
    assert len(tokens) == 2 and None not in tokens  # one fresh token per server
    assert not tokens & {USER_KEY, USER_VLLM} and all(len(t) >= 32 for t in tokens)
    for s in seen:
        assert s["token"] not in " ".join(s["argv"])  # never on its command line
        assert s["allowed"], s  # every request carried its server's token: no 401
        if s["path"].startswith("/v1"):
            assert s["authorization_sha256"] == _sha(f"Bearer {s['token']}")
        assert s["authorization_sha256"] not in {_sha(f"Bearer {USER_KEY}"), _sha(f"Bearer {USER_VLLM}")}
    paths = {s["path"] for s in seen}
    assert {"/v1/models", "/v1/chat/completions"} <= paths  # readiness check and the run's requests
    chats = [s for s in seen if s["path"] == "/v1/chat/completions"]
    assert len(chats) == 2 * 3
    files = _files_under(study.root)  # run folders, sweep.json, logs, leaderboard
    assert any(p.name.endswith(".server.log") for p in files)
    for secret in (*tokens, USER_KEY, USER_VLLM):
        leaked = [str(p) for p, blob in files.items() if secret.encode() in blob]
        assert leaked == [], leaked
    for run in ("a", "b"):
        config = json.loads((study.folder / run / "run_config.json").read_text())
        assert config["launch"]["command"] and not tokens & set(config["launch"]["command"])


def test_a_stand_in_with_a_token_refuses_a_request_without_it(tmp_path: Path) -> None:
    """What makes the test above meaningful: the stand-in answers /v1 only with the token, /health always."""
    import httpx2 as httpx

    with TestServer(api_key="t" * 40) as srv, httpx.Client(timeout=5) as http:
        assert http.get(f"{srv.url}/health").status_code == 200
        assert http.get(f"{srv.base_url}/models").status_code == 401
        assert http.get(f"{srv.base_url}/models", headers={"Authorization": "Bearer x"}).status_code == 401
        ok = http.get(f"{srv.base_url}/models", headers={"Authorization": f"Bearer {'t' * 40}"})
        assert ok.status_code == 200


def test_a_served_run_with_a_key_variable_is_refused(tmp_path: Path) -> None:
    study = Study(tmp_path, rows=2)
    study.write([{"name": "a", "serve": {"gpus": 1}}])
    text = study.file.read_text().replace(
        "serve = { gpus = 1 }", 'serve = { gpus = 1 }\napi_key_env = "DOCCOUNT_USER_KEY"'
    )
    study.file.write_text(text)
    res = run_cli(
        "sweep", str(study.file), "--run-root", str(study.root), env={"DOCCOUNT_USER_KEY": USER_KEY}
    )
    assert res.returncode == 2, res.stderr
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:") and "api_key_env" in lines[0], res.stderr
    assert not (study.folder / "a").exists() and not study.records.exists()  # nothing started


def test_defaults_key_variable_goes_to_endpoint_runs_only_never_a_served_one(tmp_path: Path) -> None:
    """`api_key_env` in [defaults] is every endpoint run's; a served run takes its server's token instead
    (it is not refused for a variable it never named)."""
    study = Study(tmp_path, rows=2)
    study.write([{"name": "a", "serve": {"gpus": 1}}])
    text = study.file.read_text().replace(  # a defaults key goes beside its base_url (trust3 #7)
        "[defaults]\n",
        '[defaults]\nbase_url = "http://127.0.0.1:9/v1"\napi_key_env = "DOCCOUNT_USER_KEY"\n',
        1,
    )
    study.file.write_text(text)
    res = run_cli(
        "sweep", str(study.file), "--run-root", str(study.root), "--plan", env={"DOCCOUNT_USER_KEY": USER_KEY}
    )
    assert res.returncode == 0, res.stderr
    assert USER_KEY not in res.stdout + res.stderr
    assert "key: its server's own fresh token (none of yours)" in res.stdout
