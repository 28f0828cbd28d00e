"""Tests for the fault-injecting OpenAI-compatible test server (tests/openai_test_server.py)."""

from __future__ import annotations

import asyncio
import hashlib
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

try:  # openai >= 2 ships the client as httpx2; older stacks use httpx
    import httpx2 as httpx
except ImportError:  # pragma: no cover - depends on the installed openai
    import httpx  # type: ignore[no-redef]

sys.path.insert(0, str(Path(__file__).resolve().parent))
from openai_test_server import (  # noqa: E402
    DEFAULT_REPLY,
    FAULTS,
    TestServer,
    data_url,
    image_sha256_of_body,
    sha256_hex,
    validate_config,
    write_config,
)

pytestmark = pytest.mark.timeout(60)

IMG_A = b"\x89PNG fake image A"
IMG_B = b"\x89PNG fake image B"
SHA_A = hashlib.sha256(IMG_A).hexdigest()
SHA_B = hashlib.sha256(IMG_B).hexdigest()
KEY = "sk-test-SECRET-0123456789"


def chat_body(image: bytes | None = IMG_A, model: str = "test-model", **extra: Any) -> dict[str, Any]:
    """A chat request body with an optional data-URL image."""
    content: list[dict[str, Any]] = [{"type": "text", "text": "How many tables?"}]
    if image is not None:
        content.append({"type": "image_url", "image_url": {"url": data_url(image), "detail": "high"}})
    return {"model": model, "messages": [{"role": "user", "content": content}], **extra}


def post(srv: TestServer, body: dict[str, Any], timeout: float = 5.0) -> httpx.Response:
    """POST a chat request with a bearer key."""
    return httpx.post(
        f"{srv.base_url}/chat/completions",
        json=body,
        headers={"Authorization": f"Bearer {KEY}"},
        timeout=timeout,
    )


@pytest.fixture()
def srv() -> Iterator[TestServer]:
    with TestServer() as server:
        yield server


def test_normal_answer_shape_and_info_endpoints(srv: TestServer) -> None:
    assert srv.base_url == f"{srv.url}/v1" and srv.url.startswith("http://127.0.0.1:")
    r = post(srv, chat_body(model="whatever"))
    assert r.status_code == 200
    data = r.json()
    assert data["id"] == "chatcmpl-1" and data["object"] == "chat.completion"
    assert data["model"] == "whatever" and data["system_fingerprint"] == "test-fp"
    assert isinstance(data["created"], int)
    (choice,) = data["choices"]
    assert choice["index"] == 0 and choice["finish_reason"] == "stop"
    assert choice["message"] == {"role": "assistant", "content": DEFAULT_REPLY}
    usage = data["usage"]
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"] > 0

    models = httpx.get(f"{srv.base_url}/models").json()
    assert models == {
        "object": "list",
        "data": [{"id": "test-model", "object": "model", "created": 0, "owned_by": "test"}],
    }
    assert httpx.get(f"{srv.url}/health").status_code == 200
    assert httpx.get(f"{srv.url}/version").json() == {"version": "test-server-0"}
    # Same routes without the /v1 prefix.
    assert httpx.post(f"{srv.url}/chat/completions", json=chat_body()).status_code == 200


def test_answer_map_reasoning_and_strict_model(srv: TestServer) -> None:
    srv.set_config(answers={SHA_A: "<answer>7</answer>"}, reasoning="thinking...")
    a = post(srv, chat_body(IMG_A)).json()["choices"][0]["message"]
    b = post(srv, chat_body(IMG_B)).json()["choices"][0]["message"]
    none = post(srv, chat_body(None)).json()["choices"][0]["message"]
    assert a == {"role": "assistant", "content": "<answer>7</answer>", "reasoning": "thinking..."}
    assert b["content"] == DEFAULT_REPLY and none["content"] == DEFAULT_REPLY

    srv.set_config(reasoning="r", reasoning_field="reasoning_content", default_reply="x")
    msg = post(srv, chat_body()).json()["choices"][0]["message"]
    assert msg == {"role": "assistant", "content": "x", "reasoning_content": "r"}

    srv.set_config(served_model="served", strict_model=True)
    assert httpx.get(f"{srv.base_url}/models").json()["data"][0]["id"] == "served"
    assert post(srv, chat_body(model="served")).status_code == 200
    r = post(srv, chat_body(model="other"))
    assert r.status_code == 404
    assert r.json()["error"]["type"] == "NotFoundError" and r.json()["error"]["code"] == 404


def test_openai_client_roundtrip(srv: TestServer) -> None:
    openai = pytest.importorskip("openai")
    srv.set_config(answers={SHA_A: "seven"}, reasoning="because")
    client = openai.OpenAI(base_url=srv.base_url, api_key=KEY, max_retries=0, timeout=5)
    resp = client.chat.completions.create(**chat_body())
    assert resp.choices[0].message.content == "seven"
    assert (resp.choices[0].message.model_extra or {}).get("reasoning") == "because"
    srv.set_config(always_fault="429")
    with pytest.raises(openai.RateLimitError):
        client.chat.completions.create(**chat_body())


ERROR_FAULTS = [
    "400",
    "401",
    "404",
    "408",
    "409",
    "422",
    "425",
    "429",
    "429_no_retry_after",
    "500",
    "502",
    "503",
]


@pytest.mark.parametrize("fault", ERROR_FAULTS)
def test_http_error_faults(srv: TestServer, fault: str) -> None:
    srv.set_config(always_fault=fault, retry_after=3)
    r = post(srv, chat_body())
    assert r.status_code == int(fault[:3])
    err = r.json()["error"]
    assert err["code"] == r.status_code and err["message"] and err["type"].endswith("Error")
    if fault == "429":
        assert r.headers["Retry-After"] == "3"
    else:
        assert "Retry-After" not in r.headers
    assert srv.requests()[-1]["fault"] == fault


def test_drop_closes_connection_without_response(srv: TestServer) -> None:
    srv.set_config(always_fault="drop")
    with pytest.raises(httpx.RemoteProtocolError):
        post(srv, chat_body())
    assert srv.requests()[0]["fault"] == "drop"


def test_truncated_body_raises_on_read(srv: TestServer) -> None:
    srv.set_config(always_fault="truncated")
    with httpx.Client(timeout=5) as client:
        with client.stream("POST", f"{srv.base_url}/chat/completions", json=chat_body()) as r:
            assert r.status_code == 200
            assert int(r.headers["Content-Length"]) > 1000
            with pytest.raises(httpx.RemoteProtocolError):
                r.read()
        # The non-streaming API raises too.
        with pytest.raises(httpx.RemoteProtocolError):
            client.post(f"{srv.base_url}/chat/completions", json=chat_body())


def test_bad_200_faults(srv: TestServer) -> None:
    srv.set_config(always_fault="malformed_json")
    r = post(srv, chat_body())
    assert r.status_code == 200 and r.headers["Content-Type"].startswith("application/json")
    with pytest.raises(ValueError):
        r.json()

    srv.set_config(always_fault="empty_content")
    assert post(srv, chat_body()).json()["choices"][0]["message"]["content"] == ""
    srv.set_config(always_fault="null_content")
    assert post(srv, chat_body()).json()["choices"][0]["message"]["content"] is None
    srv.set_config(always_fault="no_choices")
    data = post(srv, chat_body()).json()
    assert data["choices"] == [] and data["object"] == "chat.completion"
    srv.set_config(always_fault="not_openai")
    r = post(srv, chat_body())
    assert r.status_code == 200 and r.headers["Content-Type"].startswith("text/html")
    assert r.text.lstrip().startswith("<!DOCTYPE html>")


def test_slow_exceeds_client_timeout_and_stops_fast() -> None:
    with TestServer({"always_fault": "slow", "slow_s": 30}) as srv:
        t0 = time.monotonic()
        with pytest.raises(httpx.ReadTimeout):
            post(srv, chat_body(), timeout=0.3)
        assert srv.requests()[0]["fault"] == "slow"
        srv.set_config(always_fault="slow", slow_s=0.2)
        assert post(srv, chat_body()).json()["choices"][0]["message"]["content"] == DEFAULT_REPLY
    assert time.monotonic() - t0 < 5


def test_echo_secret_and_request_record_never_holds_the_key(srv: TestServer) -> None:
    srv.set_config(always_fault="echo_secret")
    r = post(srv, chat_body())
    assert r.status_code == 401 and KEY in r.json()["error"]["message"]

    srv.set_config()
    body = chat_body(IMG_B, temperature=0)
    raw = json.dumps(body).encode()
    httpx.post(
        f"{srv.base_url}/chat/completions",
        content=raw,
        headers={"Authorization": f"Bearer {KEY}", "Content-Type": "application/json"},
    )
    httpx.post(f"{srv.base_url}/chat/completions", json=chat_body(None))
    recs = srv.requests()
    assert [r["n"] for r in recs] == [1, 2, 3]
    assert KEY not in json.dumps(recs)
    rec = recs[1]
    assert rec["fault"] is None and isinstance(rec["time"], float)
    assert rec["headers"]["has_authorization"] is True
    assert rec["headers"]["authorization_sha256"] == sha256_hex(f"Bearer {KEY}")
    assert "authorization" not in rec["headers"]
    assert rec["body_sha256"] == hashlib.sha256(raw).hexdigest()
    assert rec["image_sha256"] == SHA_B == image_sha256_of_body(body) == image_sha256_of_body(raw)
    part = rec["body"]["messages"][0]["content"][1]
    assert part["image_url"] == {
        "url": {"mime": "image/png", "sha256": SHA_B, "len": len(IMG_B)},
        "detail": "high",
    }
    assert rec["body"]["temperature"] == 0 and "raw_body" not in rec
    assert recs[2]["image_sha256"] is None and recs[2]["headers"]["has_authorization"] is False

    srv.set_config(keep_raw_bodies=True)
    post(srv, chat_body())
    assert json.loads(srv.requests()[-1]["raw_body"]) == chat_body()


def test_script_per_image_sequences(srv: TestServer) -> None:
    srv.set_config(
        script={SHA_A: ["500", None, "429", "drop"], SHA_B: ["no_choices"], "*": ["503"]},
        always_fault="400",
    )
    codes_a = []
    for _ in range(4):
        try:
            codes_a.append(post(srv, chat_body(IMG_A)).status_code)
        except httpx.RemoteProtocolError:
            codes_a.append("drop")
    assert codes_a == [500, 200, 429, "drop"]
    assert post(srv, chat_body(IMG_B)).json()["choices"] == []
    assert post(srv, chat_body(None)).status_code == 503  # "*" applies to unscripted requests
    # Scripts exhausted: always_fault takes over.
    assert post(srv, chat_body(IMG_A)).status_code == 400
    assert [r["fault"] for r in srv.requests()] == ["500", None, "429", "drop", "no_choices", "503", "400"]
    # Replacing the config restarts the script.
    srv.set_config(script={SHA_A: ["502"]})
    assert post(srv, chat_body(IMG_A)).status_code == 502
    assert post(srv, chat_body(IMG_A)).status_code == 200


def run_seeded(seed: int, n: int = 40) -> list[str | None]:
    """Fault sequence of ``n`` sequential requests under a seeded fault rate."""
    cfg = {"fault_rate": 0.5, "faults": ["500", "503", "429_no_retry_after"], "seed": seed}
    with TestServer(cfg) as srv:
        with httpx.Client(timeout=5) as client:
            for _ in range(n):
                client.post(f"{srv.base_url}/chat/completions", json=chat_body())
        return [r["fault"] for r in srv.requests()]


def test_seeded_fault_rate_is_reproducible() -> None:
    a, b, c = run_seeded(1), run_seeded(1), run_seeded(2)
    assert a == b and a != c
    hits = [f for f in a if f is not None]
    assert 8 <= len(hits) <= 32 and set(hits) <= {"500", "503", "429_no_retry_after"}


async def _fire(url: str, n: int) -> list[int]:
    limits = httpx.Limits(max_connections=n, max_keepalive_connections=n)
    async with httpx.AsyncClient(timeout=20, limits=limits) as client:
        rs = await asyncio.gather(*(client.post(url, json=chat_body()) for _ in range(n)))
    return [r.status_code for r in rs]


@pytest.mark.parametrize("n", [64, 256])
def test_concurrency(n: int) -> None:
    with TestServer({"latency_s": 0.5}) as srv:
        t0 = time.monotonic()
        codes = asyncio.run(_fire(f"{srv.base_url}/chat/completions", n))
        elapsed = time.monotonic() - t0
        assert codes == [200] * n
        assert len(srv.wait_for_requests(n, timeout=1)) == n
    assert elapsed < min(10.0, n * 0.5 / 4), elapsed


def test_control_endpoints(srv: TestServer) -> None:
    r = httpx.post(f"{srv.url}/_config", json={"always_fault": "502"})
    assert r.status_code == 200 and r.json()["config"]["always_fault"] == "502"
    assert post(srv, chat_body()).status_code == 502
    recs = httpx.get(f"{srv.url}/_requests").json()
    assert len(recs) == 1 and recs[0]["fault"] == "502" and recs[0]["image_sha256"] == SHA_A
    assert httpx.post(f"{srv.url}/_reset").json() == {"ok": True}
    assert httpx.get(f"{srv.url}/_requests").json() == []
    bad = httpx.post(f"{srv.url}/_config", json={"always_fault": "explode"})
    assert bad.status_code == 400 and "explode" in bad.json()["error"]["message"]
    assert httpx.post(f"{srv.url}/_config", json={"no_such_key": 1}).status_code == 400
    assert post(srv, chat_body()).status_code == 502  # rejected configs leave the old one in place
    srv.update_config(latency_s=0.01)  # merges: always_fault stays
    assert srv.config["always_fault"] == "502" and srv.config["latency_s"] == 0.01
    assert post(srv, chat_body()).status_code == 502


def test_config_validation_and_write_config(tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        validate_config({"faults": ["nope"], "fault_rate": 0.1})
    with pytest.raises(ValueError):
        validate_config({"script": {SHA_A: ["500", "bogus"]}})
    with pytest.raises(ValueError):
        validate_config({"fault_rate": 2})
    assert {"drop", "truncated", "429", "echo_secret"} <= FAULTS
    p = write_config(tmp_path / "c.json", latency_s=0.1, script={SHA_A: [None, "500"]})
    assert json.loads(p.read_text()) == {"latency_s": 0.1, "script": {SHA_A: [None, "500"]}}


def test_invalid_json_request_is_recorded(srv: TestServer) -> None:
    r = httpx.post(f"{srv.base_url}/chat/completions", content=b"{not json", headers={"Content-Type": "x"})
    assert r.status_code == 400 and r.json()["error"]["type"] == "BadRequestError"
    (rec,) = srv.requests()
    assert rec["body"] is None and rec["body_sha256"] == sha256_hex(b"{not json")


def test_streaming_answer(srv: TestServer) -> None:
    srv.set_config(answers={SHA_A: "five"})
    r = post(srv, chat_body(stream=True, stream_options={"include_usage": True}))
    assert r.headers["Content-Type"].startswith("text/event-stream")
    events = [line[6:] for line in r.text.splitlines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    assert text == "five" and "usage" in chunks[-1]


def test_cli_subprocess_with_port_file_and_request_log(tmp_path: Path) -> None:
    cfg = write_config(tmp_path / "cfg.json", answers={SHA_A: "from cli"}, script={SHA_B: ["503"]})
    port_file, log = tmp_path / "port", tmp_path / "requests.jsonl"
    script = Path(__file__).resolve().parent / "openai_test_server.py"
    cmd = [sys.executable, str(script), "--port", "0", "--port-file", str(port_file)]
    cmd += ["--config", str(cfg), "--request-log", str(log)]
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as proc:
        try:
            deadline = time.monotonic() + 15
            while not port_file.exists():
                assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
                assert time.monotonic() < deadline, "server did not write its port file"
                time.sleep(0.05)
            port = int(port_file.read_text())
            assert proc.stdout is not None and int(proc.stdout.readline()) == port
            base = f"http://127.0.0.1:{port}/v1"
            auth = {"Authorization": KEY}
            r = httpx.post(f"{base}/chat/completions", json=chat_body(IMG_A), headers=auth)
            assert r.json()["choices"][0]["message"]["content"] == "from cli"
            assert httpx.post(f"{base}/chat/completions", json=chat_body(IMG_B)).status_code == 503
            lines = [json.loads(x) for x in log.read_text().splitlines()]  # flushed per request
            got = [(x["n"], x["image_sha256"], x["fault"]) for x in lines]
            assert got == [(1, SHA_A, None), (2, SHA_B, "503")]
            assert KEY not in log.read_text()
        finally:
            proc.terminate()
            proc.wait(timeout=10)
    assert proc.returncode == 0
