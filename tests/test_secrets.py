"""The API key (env MODEL_API_KEY) never reaches a file in the run folder, a log line or an error message,
also when the server echoes it back in an error body, and also when it arrives with stray whitespace
(a CRLF .env file) that makes the HTTP layer quote it in its own exception text. The key is read by
evaluator.core.secrets.api_key_from_env: vLLM's placeholder `EMPTY` means no key.
"""

from __future__ import annotations

import hashlib
import json
import secrets
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Any

import pytest
from support import launch
from support.cli import SCORE, clean_env, eval_args, fast_eval_cmd, run_cli
from support.datagen import doccount_reply, doccount_rows, write_doccount

from evaluator.core.secrets import ShortKeyError, api_key_from_env

DOCCOUNT = [sys.executable, "-c", "from evaluator.cli import entry; entry()"]

sys.path.insert(0, str(Path(__file__).resolve().parent))
from support import datagen  # noqa: E402
from support.openai_test_server import TestServer  # noqa: E402

pytestmark = pytest.mark.timeout(120)


def run(cmd: list[str], key: str) -> subprocess.CompletedProcess:
    return launch.run(cmd, capture_output=True, env=clean_env(MODEL_API_KEY=key), timeout=90)


def canary() -> tuple[str, list[bytes]]:
    """A distinctive key and the fragments of it that must appear nowhere (whole, or a long piece)."""
    core = secrets.token_hex(16)
    key = f"sk-canary-{core}"
    return key, [key.encode(), core[:16].encode(), core[16:].encode()]


def assert_nowhere(needles: list[bytes], root: Path, *outputs: bytes) -> int:
    files = [p for p in root.rglob("*") if p.is_file()]
    assert files, "the run folder is empty: nothing was checked"
    for path in files:
        blob = path.read_bytes()
        for needle in needles:
            assert needle not in blob, f"the API key leaked into {path.relative_to(root)}"
    for out in outputs:
        for needle in needles:
            assert needle not in out, "the API key leaked into the output"
    return len(files)


def bearer_sha(key: str) -> str:
    return hashlib.sha256(f"Bearer {key}".encode()).hexdigest()


def test_key_is_never_stored_or_printed_even_when_the_server_echoes_it(tmp_path: Path) -> None:
    key, needles = canary()
    rows = datagen.doccount_rows(12)
    data = tmp_path / "data"
    datagen.write_doccount(data / "test-0.parquet", rows)
    echoed = [r["image_sha256"] for r in rows[:3]]
    config = {
        "answers": datagen.doccount_reply(rows),
        "script": {sha: ["echo_secret", "echo_secret"] for sha in echoed},
        "fault_rate": 0.3,
        "faults": ["500", "429_no_retry_after", "malformed_json", "drop"],
        "seed": 7,
    }
    root = tmp_path / "run"
    with TestServer(config) as srv:
        first = run(fast_eval_cmd(srv.base_url, data, root, timeout=3, max_retries=8), key)
        second = run(
            fast_eval_cmd(srv.base_url, data, root, timeout=3, max_retries=8), key
        )  # resume: the echoing rows again
        score = run([*SCORE, "--run-root", str(root)], key)
        reqs = srv.requests()
    assert first.returncode == 3 and second.returncode == 3, first.stderr.decode()
    assert score.returncode == 0, score.stderr.decode()
    # The key was really sent, on every request (so the checks below can fail) ...
    assert reqs and {q["headers"]["authorization_sha256"] for q in reqs} == {bearer_sha(key)}
    assert sum(q["fault"] == "echo_secret" for q in reqs) == 2 * len(echoed)
    # ... the server really echoed it, and the record shows the echo with the key removed.
    recs = [json.loads(line) for line in (root / "responses.partial.jsonl").read_text().splitlines()]
    shown = [r for r in recs if "Incorrect API key provided: Bearer [REDACTED]" in (r["request_error"] or "")]
    assert len(shown) == 2 * len(echoed)
    outputs = [p.stdout for p in (first, second, score)] + [p.stderr for p in (first, second, score)]
    assert assert_nowhere(needles, root, *outputs) >= 5


@pytest.mark.parametrize("junk", ["\r", " \n"], ids=["CR", "space-LF"])
def test_key_with_stray_whitespace_is_not_leaked_by_the_http_layer(tmp_path: Path, junk: str) -> None:
    key, needles = canary()
    rows = datagen.doccount_rows(3)
    data = tmp_path / "data"
    datagen.write_doccount(data / "test-0.parquet", rows)
    root = tmp_path / "run"
    with TestServer({"answers": datagen.doccount_reply(rows)}) as srv:
        proc = run(fast_eval_cmd(srv.base_url, data, root, timeout=3, max_retries=8), key + junk)
        reqs = srv.requests()
    assert_nowhere(needles, root, proc.stdout, proc.stderr)
    # A key read from a CRLF file works as the key it is.
    assert proc.returncode == 0, proc.stderr.decode()
    assert {q["headers"]["authorization_sha256"] for q in reqs} == {bearer_sha(key)}


@pytest.mark.parametrize("mistake", ["in-url", "as-url"])
def test_key_pasted_into_the_base_url_is_not_echoed(tmp_path: Path, mistake: str) -> None:
    key, needles = canary()
    rows = datagen.doccount_rows(2)
    data = tmp_path / "data"
    datagen.write_doccount(data / "test-0.parquet", rows)
    url = f"https://user:{key}@api.example.com/v1" if mistake == "in-url" else key
    proc = run(fast_eval_cmd(url, data, tmp_path / "run", timeout=3, max_retries=8), key)
    assert proc.returncode == 2
    err = proc.stderr.decode()
    assert err.startswith("error: ") and len(err.strip().splitlines()) == 1, err
    assert "Traceback" not in err
    for needle in needles:
        assert needle not in proc.stderr and needle not in proc.stdout


def test_key_echoed_in_every_server_string_is_stored_nowhere(tmp_path: Path) -> None:
    """A server that puts the Authorization header into /v1/models, /version and every answer's
    content, reasoning, id and fingerprint: run_config.json, the records, responses.jsonl, the report
    and the archive hold no trace of the key, and the answers still parse."""
    key, needles = canary()
    rows = datagen.doccount_rows(4)
    data = tmp_path / "data"
    datagen.write_doccount(data / "test-0.parquet", rows)
    root = tmp_path / "run"
    config = {"answers": datagen.doccount_reply(rows), "reasoning": "I counted.", "echo_key": True}
    with TestServer(config) as srv:
        evaluate = run(fast_eval_cmd(srv.base_url, data, root, timeout=3), key)
        score = run([*SCORE, "--run-root", str(root)], key)
        archive = run(
            [*DOCCOUNT, "archive", "--run-root", str(root), "--output", str(tmp_path / "a.tar.gz")], key
        )
    assert evaluate.returncode == 0, evaluate.stderr.decode()
    assert score.returncode == 0 and archive.returncode == 0, (score.stderr + archive.stderr).decode()
    # The server really echoed the key where a run stores what the server says ...
    server = json.loads((root / "run_config.json").read_text())["server"]
    assert "echo Bearer [REDACTED]" in server["models"] and server["version"]["auth"] == "Bearer [REDACTED]"
    recs = [json.loads(line) for line in (root / "responses.partial.jsonl").read_text().splitlines()]
    assert all(r["response_text"].startswith("Bearer [REDACTED] ") for r in recs)
    assert all("[REDACTED]" in r["reasoning_text"] and "[REDACTED]" in r["response_id"] for r in recs)
    assert all(r["correct"] for r in recs)
    assert (root / "scores" / "report.html").exists()
    # ... and the key itself is in no file, no output and not in the archive.
    assert assert_nowhere(needles, root, evaluate.stderr, score.stdout, score.stderr, archive.stderr) >= 6
    with tarfile.open(tmp_path / "a.tar.gz") as tar:
        for member in tar.getmembers():
            blob = tar.extractfile(member).read() if member.isfile() else b""
            assert not any(n in blob for n in needles), member.name


def _data(tmp_path: Path, n: int = 4) -> tuple[str, list[dict[str, Any]]]:
    rows = doccount_rows(n)
    write_doccount(tmp_path / "d" / "test-0.parquet", rows)
    return str(tmp_path / "d" / "*.parquet"), rows


def test_the_vllm_placeholder_key_means_no_key(tmp_path, server) -> None:
    assert api_key_from_env({"MODEL_API_KEY": "EMPTY"}) is None
    assert api_key_from_env({"MODEL_API_KEY": " EMPTY\r"}) is None
    with pytest.raises(ShortKeyError):
        api_key_from_env({"MODEL_API_KEY": "empty1"})  # only the placeholder itself
    data, rows = _data(tmp_path)
    server.update_config(answers=doccount_reply(rows))
    res = run_cli(
        "evaluate", *eval_args(server.base_url, data, tmp_path / "r"), env={"MODEL_API_KEY": "EMPTY"}
    )
    assert res.returncode == 0, res.stderr
