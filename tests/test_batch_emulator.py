"""The Files/Batches emulator itself (tests/support/batch_emulator.py), driven by the real openai client."""

from __future__ import annotations

import hashlib
import json
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from support.batch_emulator import BatchEmulator  # noqa: E402
from support.openai_test_server import data_url  # noqa: E402

pytestmark = pytest.mark.timeout(60)

IMG_A, IMG_B, IMG_C = b"\x89PNG image A", b"\x89PNG image B", b"\x89PNG image C"


def line(cid: str, image: bytes, model: str = "test-model") -> dict[str, Any]:
    content = [{"type": "image_url", "image_url": {"url": data_url(image)}}, {"type": "text", "text": "n?"}]
    body = {"model": model, "messages": [{"role": "user", "content": content}], "max_tokens": 16}
    return {"custom_id": cid, "method": "POST", "url": "/v1/chat/completions", "body": body}


def jsonl(lines: list[dict[str, Any]]) -> bytes:
    return b"".join(json.dumps(x).encode() + b"\n" for x in lines)


@pytest.fixture
def emu() -> Iterator[BatchEmulator]:
    with BatchEmulator({"step_s": 0.05}) as e:
        yield e


def client(emu: BatchEmulator) -> openai.OpenAI:
    return openai.OpenAI(base_url=emu.base_url, api_key="k", max_retries=0)


def submit(emu: BatchEmulator, lines: list[dict[str, Any]]) -> str:
    c = client(emu)
    f = c.files.create(file=("in.jsonl", jsonl(lines)), purpose="batch")
    return c.batches.create(input_file_id=f.id, endpoint="/v1/chat/completions", completion_window="24h").id


def wait_terminal(emu: BatchEmulator, batch_id: str) -> tuple[Any, list[str]]:
    """Poll until the batch is terminal; every status seen on the way, in order."""
    c, seen = client(emu), []
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        b = c.batches.retrieve(batch_id)
        if not seen or seen[-1] != b.status:
            seen.append(b.status)
        if b.status in ("completed", "failed", "expired", "cancelled"):
            return b, seen
        time.sleep(0.005)
    raise TimeoutError(seen)


def lines_of(emu: BatchEmulator, file_id: str | None) -> list[dict[str, Any]]:
    if file_id is None:
        return []
    return [json.loads(x) for x in client(emu).files.content(file_id).content.splitlines()]


def test_upload_refusals(emu: BatchEmulator) -> None:
    c = client(emu)
    with pytest.raises(openai.BadRequestError, match="Invalid value for purpose"):
        c.files.create(file=("in.jsonl", b"{}\n"), purpose="nonsense")  # type: ignore[arg-type]
    with pytest.raises(openai.BadRequestError, match=r"Must be \.jsonl"):
        c.files.create(file=("in.json", jsonl([line("a", IMG_A)])), purpose="batch")
    emu.update_config(max_file_bytes=100)
    with pytest.raises(openai.BadRequestError, match="File is too large"):
        c.files.create(file=("in.jsonl", jsonl([line("a", IMG_A)])), purpose="batch")
    assert emu.snapshot()["counts"]["files_uploaded"] == 0


def test_status_sequence_output_file_and_counts(emu: BatchEmulator) -> None:
    c = client(emu)
    f = c.files.create(file=("in.jsonl", jsonl([line("a", IMG_A), line("b", IMG_B)])), purpose="batch")
    created = c.batches.create(input_file_id=f.id, endpoint="/v1/chat/completions", completion_window="24h")
    batch, seen = wait_terminal(emu, created.id)
    # every status in order: the batch starts validating and has the stamp of each step; the polls see them
    # in order, though on a loaded machine a poll may come too late for a short one
    full = ["validating", "in_progress", "finalizing", "completed"]
    assert created.status == "validating" and seen[-1] == "completed"
    assert [s for s in full if s in seen] == seen, seen
    assert batch.in_progress_at and batch.finalizing_at and batch.completed_at and batch.failed_at is None
    assert batch.created_at <= batch.in_progress_at <= batch.finalizing_at <= batch.completed_at
    assert batch.request_counts is not None
    assert (batch.request_counts.total, batch.request_counts.completed, batch.request_counts.failed) == (
        2,
        2,
        0,
    )
    assert batch.error_file_id is None
    out = lines_of(emu, batch.output_file_id)
    assert sorted(x["custom_id"] for x in out) == ["a", "b"]
    for x in out:
        assert x["error"] is None and x["response"]["status_code"] == 200
        assert x["response"]["body"]["choices"][0]["message"]["content"]
    # the upstream got each line's body, as the JSON the evaluator sends
    assert len(emu.upstream.requests()) == 2


def test_duplicate_custom_id_fails_validation(emu: BatchEmulator) -> None:
    batch, seen = wait_terminal(emu, submit(emu, [line("a", IMG_A), line("a", IMG_B)]))
    assert seen[-1] == "failed" and batch.output_file_id is None
    assert batch.errors is not None and batch.errors.data is not None
    assert [(e.code, e.line) for e in batch.errors.data] == [("duplicate_custom_id", 2)]
    assert emu.upstream.requests() == []


def test_model_mismatch_and_empty_file(emu: BatchEmulator) -> None:
    batch, _ = wait_terminal(emu, submit(emu, [line("a", IMG_A), line("b", IMG_B, model="other")]))
    assert batch.errors is not None and batch.errors.data is not None
    assert [e.code for e in batch.errors.data] == ["model_mismatch"]
    batch, _ = wait_terminal(emu, submit(emu, []))
    assert batch.errors is not None and batch.errors.data is not None
    assert [e.code for e in batch.errors.data] == ["empty_file"]


def test_too_many_lines(emu: BatchEmulator) -> None:
    emu.update_config(max_lines=2)
    batch, _ = wait_terminal(emu, submit(emu, [line(c, IMG_A) for c in "abc"]))
    assert batch.status == "failed"
    assert batch.errors is not None and [e.code for e in batch.errors.data or []] == ["too_many_tasks"]


def test_non_200_and_error_lines_go_to_the_error_file(emu: BatchEmulator) -> None:
    emu.upstream.update_config(script={hashlib.sha256(IMG_B).hexdigest(): ["500"]})
    emu.update_config(error_lines={"c": {"code": "request_timeout", "message": "the model timed out"}})
    batch, _ = wait_terminal(emu, submit(emu, [line("a", IMG_A), line("b", IMG_B), line("c", IMG_C)]))
    assert batch.status == "completed"
    assert batch.request_counts is not None
    assert (batch.request_counts.completed, batch.request_counts.failed) == (1, 2)
    assert [x["custom_id"] for x in lines_of(emu, batch.output_file_id)] == ["a"]
    errors = {x["custom_id"]: x for x in lines_of(emu, batch.error_file_id)}
    assert errors["b"]["response"]["status_code"] == 500 and errors["b"]["error"] is None
    assert "Injected fault 500" in errors["b"]["response"]["body"]["error"]["message"]
    assert errors["c"]["response"] is None and errors["c"]["error"]["code"] == "request_timeout"


def test_expiry_keeps_the_finished_lines(emu: BatchEmulator) -> None:
    emu.update_config(expire=[1], expire_after=1)
    batch, seen = wait_terminal(emu, submit(emu, [line("a", IMG_A), line("b", IMG_B), line("c", IMG_C)]))
    assert seen[-1] == "expired"
    assert [x["custom_id"] for x in lines_of(emu, batch.output_file_id)] == ["a"]
    errors = lines_of(emu, batch.error_file_id)
    assert [(x["custom_id"], x["error"]["code"]) for x in errors] == [
        ("b", "batch_expired"),
        ("c", "batch_expired"),
    ]


def test_cancel_a_held_batch(emu: BatchEmulator) -> None:
    emu.update_config(hold=True)
    batch_id = submit(emu, [line("a", IMG_A), line("b", IMG_B)])
    emu.wait_until(lambda s: s["batches"][0]["status"] == "in_progress")
    assert client(emu).batches.cancel(batch_id).status == "cancelling"
    batch, _ = wait_terminal(emu, batch_id)
    assert batch.status == "cancelled" and batch.output_file_id is None
    assert {x["error"]["code"] for x in lines_of(emu, batch.error_file_id)} == {"batch_cancelled"}
    assert emu.upstream.requests() == []


def test_key_is_required_and_never_echoed_unless_asked(emu: BatchEmulator) -> None:
    emu.update_config(api_key="sk-emu-SECRET")
    with pytest.raises(openai.AuthenticationError):
        client(emu).batches.list()
    c = openai.OpenAI(base_url=emu.base_url, api_key="sk-emu-SECRET", max_retries=0)
    assert c.batches.list().data == []
