"""Pure parts of batch mode: custom ids, input lines, file budgets, output lines, the ledger."""

from __future__ import annotations

import json
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from evaluator.request.batch_lines import (
    MAX_LINES,
    FileBudget,
    custom_id,
    input_line,
    read_output_line,
)
from evaluator.runfolder.batches import (
    BatchEntry,
    Ledger,
    LedgerRow,
    batch_timing,
    keys_in_flight,
    lines_per_row,
    load_ledger,
    save_ledger,
)

AT = "2026-01-01T00:00:00.000Z"


@given(st.text(min_size=1), st.integers(0, 10_000), st.integers(0, 10_000))
def test_custom_id_names_row_repeat_and_attempt(sid: str, repeat: int, attempt: int) -> None:
    # the attempt is the last part (the collector reads it back); a sample id may hold the separator
    head, r, a = custom_id(sid, repeat, attempt).rsplit("#", 2)
    assert (head, int(r), int(a)) == (sid, repeat, attempt)


@given(st.dictionaries(st.text(), st.one_of(st.text(), st.integers(), st.floats(allow_nan=False))), st.text())
def test_input_line_carries_the_body_bytes_unchanged(body: dict, cid: str) -> None:
    raw = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
    line = input_line(cid, raw)
    assert line.endswith(b"}\n") and line.count(b"\n") == 1
    obj = json.loads(line)
    assert obj == {"custom_id": cid, "method": "POST", "url": "/v1/chat/completions", "body": body}
    assert raw in line


@given(st.lists(st.integers(1, 500), max_size=200), st.integers(500, 3000), st.integers(1, 20))
def test_budget_split_keeps_every_file_under_both_limits(
    sizes: list[int], max_bytes: int, max_lines: int
) -> None:
    files: list[list[int]] = []
    budget = FileBudget(max_bytes, max_lines)
    for size in sizes:
        if not files or not budget.fits(size):
            files.append([])
            budget = FileBudget(max_bytes, max_lines)
        budget.add(size)
        files[-1].append(size)
    assert [s for f in files for s in f] == sizes
    assert all(sum(f) <= max_bytes and len(f) <= max_lines for f in files)
    # a new file starts only when the next line would not fit
    for prev, nxt in zip(files, files[1:], strict=False):
        assert sum(prev) + nxt[0] > max_bytes or len(prev) == max_lines


def test_default_line_limit_is_openais() -> None:
    assert MAX_LINES == 50_000 and FileBudget(10**9).max_lines == 50_000


def _ok(content: str) -> dict:
    body = {"id": "c1", "choices": [{"message": {"content": content}, "finish_reason": "stop"}], "usage": {}}
    return {"id": "x", "custom_id": "a#0#0", "response": {"status_code": 200, "body": body}, "error": None}


def test_output_lines_of_every_shape() -> None:
    ok = read_output_line(_ok("<answer>3</answer>"), AT)
    assert ok is not None and ok.failure is None and ok.completion is not None
    assert ok.completion.response_text == "<answer>3</answer>"
    empty = read_output_line(_ok(""), AT)
    assert empty is not None and empty.failure is not None and empty.failure.kind == "empty_content"
    assert empty.retryable
    server = {"custom_id": "a", "response": {"status_code": 500, "body": {"error": {"message": "boom"}}}}
    r = read_output_line(server, AT)
    assert r is not None and r.retryable and r.failure is not None
    assert (r.failure.status_code, r.failure.message) == (500, "HTTP 500: boom")
    refused = {"custom_id": "a", "response": {"status_code": 400, "body": None}, "error": "bad image"}
    r = read_output_line(refused, AT)  # vLLM run-batch: the error as a string, no body
    assert r is not None and r.retryable and r.failure is not None and "bad image" in r.failure.message
    expired = {"custom_id": "a", "response": None, "error": {"code": "batch_expired", "message": "late"}}
    r = read_output_line(expired, AT)
    assert r is not None and r.unfinished and r.retryable
    line_error = {"custom_id": "a", "response": None, "error": {"code": "request_timeout", "message": "slow"}}
    r = read_output_line(line_error, AT)
    assert r is not None and r.retryable and not r.unfinished and r.failure is not None
    assert r.failure.message == "request_timeout: slow"
    assert read_output_line({"response": None}, AT) is None
    assert read_output_line([1, 2], AT) is None


def test_ledger_round_trip_and_rows_in_flight(tmp_path: Path) -> None:
    ledger = Ledger()
    rows = [LedgerRow("a#0#0", "a", 0, "h1"), LedgerRow("b#1#0", "b", 1, "h2")]
    ledger.batches.append(BatchEntry(input="batch/run-0001.jsonl", rows=rows, state="created", batch_id="b1"))
    ledger.batches.append(
        BatchEntry(input="batch/run-0002.jsonl", rows=[LedgerRow("c#0#0", "c", 0, "h")], state="collected")
    )
    save_ledger(tmp_path, ledger)
    back = load_ledger(tmp_path)
    assert back == ledger
    assert keys_in_flight(back) == {("a", 0), ("b", 1)}
    assert lines_per_row(back)[("c", 0)] == 1 and lines_per_row(back)[("z", 0)] == 0


def test_batch_timing() -> None:
    a = BatchEntry(
        input="x", rows=[], submitted_at="2026-01-01T00:00:00.000Z", ended_at="2026-01-01T00:00:30.000Z"
    )
    b = BatchEntry(
        input="y", rows=[], submitted_at="2026-01-01T00:00:10.000Z", ended_at="2026-01-01T00:01:00.500Z"
    )
    assert batch_timing([a, b]) == {
        "submitted_at": "2026-01-01T00:00:00.000Z",
        "completed_at": "2026-01-01T00:01:00.500Z",
        "seconds": 60.5,
    }
    assert batch_timing([BatchEntry(input="z", rows=[])]) == {}
