"""Bad input catalogue: every mistake a user can make gets one clear line, a non-zero exit, no traceback.

Each case runs the real evaluator in a subprocess (exit codes and stderr are what users see) against
the loopback test server, whose request log proves that refused runs sent nothing. Row-level problems
(a bad image, a bad answer) are not fatal: they become data_error records and are never sent.
"""

from __future__ import annotations

import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner
from support import launch
from support.cli import clean_env, eval_args
from support.cli import read_records as records

from evaluator.cli.main import evaluate_cmd

sys.path.insert(0, str(Path(__file__).resolve().parent))
from support import datagen  # noqa: E402
from support.openai_test_server import TestServer  # noqa: E402

pytestmark = pytest.mark.timeout(120)

EVALUATE = [sys.executable, "-c", "from evaluator.cli import evaluate_main; evaluate_main()"]
FAST = ["--retry-backoff", "0.01", "--retry-max-wait", "0.05", "--timeout", "2", "--quiet"]


def evaluate(
    *args: str, env: dict[str, str] | None = None, timeout: float = 60
) -> subprocess.CompletedProcess:
    return launch.run(
        [*EVALUATE, *args], capture_output=True, text=True, env=env or clean_env(), timeout=timeout
    )


def assert_one_line_error(proc: subprocess.CompletedProcess, *needles: str, code: int = 2) -> str:
    """Exit `code`; stderr is exactly one line `error: ...` containing every needle; no traceback."""
    assert proc.returncode == code, (proc.returncode, proc.stderr)
    assert "Traceback" not in proc.stderr and "Traceback" not in proc.stdout
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("error: "), proc.stderr
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    return lines[0]


@pytest.fixture
def server() -> Iterator[TestServer]:
    with TestServer() as srv:
        yield srv


@pytest.fixture
def data(tmp_path: Path, server: TestServer) -> tuple[Path, list[dict[str, Any]]]:
    rows = datagen.doccount_rows(6)
    datagen.write_doccount(tmp_path / "data" / "test-00000-of-00001.parquet", rows)
    server.set_config(answers=datagen.doccount_reply(rows))
    return tmp_path / "data", rows


def base_args(server: TestServer, data_dir: Path, root: Path) -> list[str]:
    return [
        *eval_args(server.base_url, str(data_dir / "*.parquet"), root, model="test-model"),
        *FAST,
    ]


# --------------------------------------------------------------------------- refused before any request


@pytest.mark.parametrize(
    ("extra", "needles"),
    [
        ('{"top_k": 20', ("--extra-body-json", "not valid JSON", "pass an object such as")),
        ('{"model": "x", "temperature": 0}', ("--extra-body-json", "model, temperature", "matching flag")),
        ("[20]", ("--extra-body-json", "must be a JSON object", "top_k")),
        ('{"top_k": NaN}', ("--extra-body-json", "not valid JSON", "NaN is not a JSON number")),
        (
            '{"x": {"y": -Infinity}}',
            ("--extra-body-json", "not valid JSON", "-Infinity is not a JSON number"),
        ),
    ],
    ids=["malformed", "reserved", "not-an-object", "nan", "infinity"],
)
def test_extra_body_json(server, data, tmp_path, extra, needles) -> None:
    proc = evaluate(*base_args(server, data[0], tmp_path / "run"), "--extra-body-json", extra)
    assert_one_line_error(proc, *needles)
    assert server.requests() == []
    assert not (tmp_path / "run").exists()  # nothing is created for a refused command


def test_glob_matching_nothing(server, tmp_path) -> None:
    proc = evaluate(*base_args(server, tmp_path / "nowhere", tmp_path / "run"))
    assert_one_line_error(proc, "--data-files", "matches no file", "quote the glob")
    assert server.requests() == []


def test_missing_column(server, tmp_path) -> None:
    rows = datagen.doccount_rows(3)
    table = pa.Table.from_pylist(rows, schema=datagen.DOCCOUNT_SCHEMA).drop_columns(["prompt"])
    (tmp_path / "data").mkdir()
    pq.write_table(table, tmp_path / "data" / "test-0.parquet")
    proc = evaluate(*base_args(server, tmp_path / "data", tmp_path / "run"))
    line = assert_one_line_error(
        proc, "test-0.parquet", "lacks column(s) prompt", "Expected columns", "Found"
    )
    assert "evaluator/data/benchmarks/doccount.py" in line  # where a renamed column is fixed
    assert server.requests() == []


@pytest.mark.parametrize("damage", ["truncated", "not-parquet", "corrupt-page-header"])
def test_unreadable_parquet(server, data, tmp_path, damage) -> None:
    data_dir, _ = data
    path = next(data_dir.glob("*.parquet"))
    blob = path.read_bytes()
    if damage == "truncated":
        blob = blob[: len(blob) * 2 // 3]
    elif damage == "not-parquet":
        blob = b"<html>this is a download error page, not parquet</html>\n"
    else:  # footer intact, the first page header is garbage (arrow's message spans lines)
        blob = blob[:4] + b"\xff" * 64 + blob[68:]
    path.write_bytes(blob)
    proc = evaluate(*base_args(server, data_dir, tmp_path / "run"))
    assert_one_line_error(proc, path.name, "re-download it")
    assert server.requests() == []


def test_duplicate_sample_ids(server, data, tmp_path) -> None:
    data_dir, rows = data
    datagen.write_doccount(data_dir / "test-copy.parquet", rows[:2])
    proc = evaluate(*base_args(server, data_dir, tmp_path / "run"))
    assert_one_line_error(proc, "2 duplicate sample id(s)", rows[0]["sample_id"], "--data-files glob")
    assert server.requests() == []


INVALID_FLAGS = [
    ("--concurrency", "0"),
    ("--concurrency", "many"),
    ("--timeout", "-1"),
    ("--max-retries", "-2"),
    ("--limit", "0"),
    ("--temperature", "3"),
    ("--top-p", "0"),
    ("--max-tokens", "1.5"),
    ("--retry-parse-failures", "x"),
    # NaN passes every range check and is not JSON; the infinities are not numbers a server can take
    ("--temperature", "nan"),
    ("--top-p", "inf"),
    ("--temperature", "-inf"),
    ("--timeout", "nan"),
    ("--retry-max-wait", "inf"),
    ("--max-requests-per-minute", "nan"),
    ("--rate-limit-patience", "nan"),
    ("--rate-limit-patience", "0"),
]


def test_a_nan_sampling_value_is_one_line_in_a_real_process(server, data, tmp_path) -> None:
    proc = evaluate(*base_args(server, data[0], tmp_path / "run"), "--temperature", "nan")
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "'--temperature'" in lines[0] and "not a finite number" in lines[0], lines
    assert server.requests() == []


def test_invalid_numeric_flag_in_a_real_process(server, data, tmp_path) -> None:
    proc = evaluate(*base_args(server, data[0], tmp_path / "run"), "--concurrency", "0")
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    # exactly one line: the option, the accepted range and where to look
    assert proc.stderr.strip().splitlines() == [
        "error: Invalid value for '--concurrency': 0 is not in the range 1<=x<=4096. (see `doccount-evaluate --help`)"
    ]
    assert server.requests() == []
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize(("flag", "value"), INVALID_FLAGS)
def test_invalid_numeric_flags(data, tmp_path, flag, value) -> None:
    """Pure option parsing (click, before any evaluator code runs), so in-process for speed."""
    args = ["--model", "m", "--base-url", "http://127.0.0.1:9/v1", "--data-files", str(data[0] / "*.parquet")]
    result = CliRunner().invoke(
        evaluate_cmd, [*args, "--run-root", str(tmp_path / "run"), flag, value], prog_name="doccount-evaluate"
    )
    assert result.exit_code == 2, result.output
    assert isinstance(result.exception, SystemExit)  # a usage error, not a crash
    # click's usage error: the one error line names the option and the accepted values.
    errors = [line for line in result.stderr.splitlines() if line.lower().startswith("error:")]
    assert len(errors) == 1 and f"'{flag}'" in errors[0], result.stderr
    assert not (tmp_path / "run").exists()


def test_run_root_is_a_file(server, data, tmp_path) -> None:
    (tmp_path / "run").write_text("not a folder")
    proc = evaluate(*base_args(server, data[0], tmp_path / "run"))
    assert_one_line_error(proc, "run", "is a file, not a folder", "--run-root")
    assert (tmp_path / "run").read_text() == "not a folder"
    assert server.requests() == []


def test_base_url_not_http(data, tmp_path) -> None:
    args = ["--model", "m", "--base-url", "ftp://example.org/v1", "--data-files", str(data[0] / "*.parquet")]
    proc = evaluate(*args, "--run-root", str(tmp_path / "run"), *FAST)
    assert_one_line_error(proc, "'ftp://example.org/v1'", "not an http(s) URL", "https://api.example.com/v1")


def test_no_endpoint_for_api_backend(data, tmp_path) -> None:
    args = ["--model", "m", "--data-files", str(data[0] / "*.parquet"), "--run-root", str(tmp_path / "run")]
    proc = evaluate(*args, *FAST)
    assert_one_line_error(proc, "--base-url", "MODEL_API_BASE_URL")


def test_run_folder_of_other_settings_is_refused(server, data, tmp_path) -> None:
    root = tmp_path / "run"
    assert evaluate(*base_args(server, data[0], root), "--limit", "1").returncode == 0
    before = (root / "responses.partial.jsonl").read_bytes()
    sent = len(server.requests())
    args = base_args(server, data[0], root)
    args[args.index("test-model")] = "other-model"
    proc = evaluate(*args)
    assert_one_line_error(proc, str(root), "different model", "--run-name")
    assert (root / "responses.partial.jsonl").read_bytes() == before
    assert len(server.requests()) == sent


# --------------------------------------------------------------------------- endpoint problems


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_unreachable_endpoint(data, tmp_path) -> None:
    """Nothing listening: one error line naming host and port, exit 3, no record (a re-run continues;
    tests/test_early_stop.py runs that re-run)."""
    data_dir, _ = data
    root = tmp_path / "run"
    port = free_port()
    url = f"http://127.0.0.1:{port}/v1"
    proc = evaluate(
        *eval_args(url, str(data_dir / "*.parquet"), root, model="m"), *FAST, "--max-retries", "2"
    )
    assert proc.returncode == 3, proc.stderr
    assert "Traceback" not in proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert (
        len(errors) == 1 and f"127.0.0.1:{port}" in errors[0] and "nothing was sent or recorded" in errors[0]
    )
    assert records(root) == [] and not (root / "run_config.json").exists()


def test_endpoint_that_is_not_openai_compatible(server, data, tmp_path) -> None:
    data_dir, rows = data
    server.update_config(always_fault="not_openai")
    root = tmp_path / "run"
    proc = evaluate(*base_args(server, data_dir, root), "--max-retries", "1")
    assert proc.returncode == 3, proc.stderr
    assert "Traceback" not in proc.stderr
    recs = records(root)
    assert len(recs) == len(rows)
    for rec in recs:
        assert rec["status"] == "request_error"
        assert rec["request_error"].startswith("response is not JSON")
        assert "<!DOCTYPE html>" in rec["request_error"]  # what the endpoint sent instead
    assert len(server.requests()) == 2 * len(rows)


def test_endpoint_without_chat_completions(server, data, tmp_path) -> None:
    """A base URL with nothing behind it (404 on chat, and its /models answers nothing): a configuration
    error at the first refusal (exit 2) naming the URL that answered 404 and the checked /v1; nothing
    reached the chat route and no row is recorded as answered."""
    data_dir, rows = data
    root = tmp_path / "run"
    args = base_args(server, data_dir, root)
    args[args.index(server.base_url)] = f"{server.url}/not-the-api"
    proc = evaluate(*args)
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    assert f"404 Not Found for {server.url}/not-the-api/chat/completions" in proc.stderr
    assert f"--base-url {server.url}/v1 answers" in proc.stderr
    assert all(rec["status"] == "request_error" for rec in records(root))  # a re-run sends them again
    assert server.requests() == []  # the test server logs only requests that reached the chat route


# --------------------------------------------------------------------------- row-level data problems


def test_bad_rows_become_data_errors_and_are_never_sent(server, tmp_path) -> None:
    good = datagen.doccount_rows(4)
    bad = datagen.doccount_rows(5, start=100)
    not_an_image = b"GIF-ish but not an image at all"
    bad[0]["image"] = {"bytes": not_an_image, "path": "x.jpg"}
    bad[0]["image_sha256"] = datagen.sha(not_an_image)  # hash matches: only the content is wrong
    bad[1]["image_sha256"] = datagen.sha(b"other bytes")  # hash mismatch
    bad[2]["image"] = {"bytes": None, "path": "missing.jpg"}  # no bytes
    bad[3]["answer"] = -2  # negative answer
    datagen.write_doccount(tmp_path / "data" / "test-0.parquet", good[:2] + bad[:4])
    # A release whose answer column is text: non-integers must not slip through.
    text_answers = [{**r, "answer": str(r["answer"])} for r in good[2:]] + [{**bad[4], "answer": "2.5"}]
    schema = datagen.DOCCOUNT_SCHEMA.set(
        datagen.DOCCOUNT_SCHEMA.get_field_index("answer"), pa.field("answer", pa.string())
    )
    datagen.write_doccount(tmp_path / "data" / "test-1.parquet", text_answers, schema=schema)
    rows = good + bad
    server.set_config(answers=datagen.doccount_reply(good))
    root = tmp_path / "run"
    expected = {
        bad[0]["sample_id"]: "image bytes are not JPEG, PNG, GIF or WebP",
        bad[1]["sample_id"]: "does not match the released",
        bad[2]["sample_id"]: "image bytes are missing",
        bad[3]["sample_id"]: "answer -2 is negative",
        bad[4]["sample_id"]: "answer '2.5' is not a non-negative integer",
    }

    dry = evaluate(*base_args(server, tmp_path / "data", root), "--dry-run")
    assert dry.returncode == 1 and "FAILED: 5 row(s)" in dry.stdout, dry.stdout + dry.stderr
    for sid, needle in expected.items():  # the dry run finds every row the real run would refuse
        assert any(line.startswith(f"  {sid}: ") and needle in line for line in dry.stdout.splitlines()), sid
    assert server.requests() == []

    proc = evaluate(*base_args(server, tmp_path / "data", root))
    assert "Traceback" not in proc.stderr
    assert proc.returncode == 0, proc.stderr
    assert "data errors 5" in proc.stderr
    recs = {r["sample_id"]: r for r in records(root)}
    assert set(recs) == {r["sample_id"] for r in rows}
    for sid, needle in expected.items():
        rec = recs[sid]
        assert rec["status"] == "data_error" and rec["correct"] is False and rec["attempts"] == 0
        assert needle in rec["data_error"], rec["data_error"]
    for r in good:
        assert recs[r["sample_id"]]["status"] == "ok" and recs[r["sample_id"]]["correct"] is True
    sent = {q["image_sha256"] for q in server.requests()}
    assert sent == {r["image_sha256"] for r in good}  # no bad row ever reached the endpoint


def test_dry_run_with_duplicate_sample_ids_is_an_integrity_failure(server, data, tmp_path) -> None:
    data_dir, rows = data
    datagen.write_doccount(data_dir / "test-copy.parquet", rows[:2])
    proc = evaluate("--model", "m", "--dry-run", "--data-files", str(data_dir / "*.parquet"))
    assert proc.returncode == 1, proc.stderr
    assert "FAILED: 2 duplicate sample id(s)" in proc.stdout and rows[0]["sample_id"] in proc.stdout
    assert "unique sample ids: no" in proc.stdout
    assert server.requests() == []
