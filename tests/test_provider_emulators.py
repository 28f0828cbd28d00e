"""The provider emulators (tests/support/provider_emulators.py) enforce their rules: refusals with the providers'
texts and error shapes, URL layouts, reasoning and usage fields, rate-limit replies."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from support.datagen import image_bytes
from support.openai_test_server import data_url, sha256_hex
from support.provider_emulators import (
    VLLM,
    AnthropicCompat,
    GeminiCompat,
    InlineThinkHost,
    Moonshot,
    OpenAIReasoning,
    OpenRouter,
    ProviderEmulator,
    Rules,
    Zhipu,
)

try:  # openai >= 2 ships the client as httpx2; older stacks use httpx
    import httpx2 as httpx
except ImportError:  # pragma: no cover - depends on the installed openai
    import httpx  # type: ignore[no-redef]

pytestmark = pytest.mark.timeout(60)

IMG = image_bytes(7)
SHA = sha256_hex(IMG)
REPLY = "I see 3 regions.\n<answer>3</answer>"
PROTOCOL = {"temperature": 1, "top_p": 0.95, "max_tokens": 32768}  # the DocCount defaults


def body(**fields: Any) -> dict[str, Any]:
    content = [
        {"type": "image_url", "image_url": {"url": data_url(IMG, "image/jpeg")}},
        {"type": "text", "text": "Q"},
    ]
    return {"model": "m", "messages": [{"role": "user", "content": content}], **fields}


def without(*keys: str, **extra: Any) -> dict[str, Any]:
    return body(**{k: v for k, v in PROTOCOL.items() if k not in keys}, **extra)


def post(emu: ProviderEmulator, payload: dict[str, Any], url: str | None = None) -> httpx.Response:
    return httpx.post(url or emu.chat_url, json=payload, headers={"Authorization": "Bearer sk-x"}, timeout=10)


def emulator(rules: Rules, **kw: Any) -> Iterator[ProviderEmulator]:
    with ProviderEmulator(rules, answers={SHA: REPLY}, **kw) as emu:
        yield emu


def error_message(resp: httpx.Response) -> str:
    data = resp.json()
    if isinstance(data, list):
        data = data[0]
    return data["error"]["message"]


# --------------------------------------------------------------------------- OpenAI reasoning models


@pytest.fixture
def openai_emu() -> Iterator[ProviderEmulator]:
    yield from emulator(OpenAIReasoning())


def test_openai_refuses_the_protocol_defaults_field_by_field(openai_emu: ProviderEmulator) -> None:
    r = post(openai_emu, body(**PROTOCOL))
    assert r.status_code == 400
    assert r.json() == {
        "error": {
            "message": "Unsupported parameter: 'max_tokens' is not supported with this model. "
            "Use 'max_completion_tokens' instead.",
            "type": "invalid_request_error",
            "param": "max_tokens",
            "code": "unsupported_parameter",
        }
    }
    r = post(openai_emu, without("max_tokens", max_completion_tokens=32768))
    assert r.status_code == 400 and r.json()["error"]["param"] == "top_p"
    assert error_message(r) == "Unsupported parameter: 'top_p' is not supported with this model."
    r = post(openai_emu, body(temperature=0.0, max_completion_tokens=100))
    assert r.status_code == 400 and r.json()["error"]["code"] == "unsupported_value"
    assert error_message(r) == (
        "Unsupported value: 'temperature' does not support 0.0 with this model. "
        "Only the default (1) value is supported."
    )


def test_openai_recipe_shape_answers_with_reasoning_tokens_and_no_reasoning_text(openai_emu) -> None:
    for temperature in ({"temperature": 1}, {}):
        r = post(openai_emu, body(max_completion_tokens=32768, **temperature))
        assert r.status_code == 200, r.text
        msg = r.json()["choices"][0]["message"]
        assert msg == {"role": "assistant", "content": REPLY}
        usage = r.json()["usage"]
        assert usage["completion_tokens_details"]["reasoning_tokens"] == 48
        assert usage["prompt_tokens_details"]["cached_tokens"] == 0
        assert usage["completion_tokens"] > 48 and r.headers["x-ratelimit-remaining-requests"] == "499"


def test_openai_quota_and_rate_limit_replies(openai_emu) -> None:
    openai_emu.set_script(["insufficient_quota", "rate_limit"])
    r = post(openai_emu, body(max_completion_tokens=10))
    assert r.status_code == 429 and r.json()["error"]["code"] == "insufficient_quota"
    assert r.json()["error"]["type"] == "insufficient_quota" and "retry-after" not in r.headers
    r = post(openai_emu, body(max_completion_tokens=10))
    assert r.status_code == 429 and r.json()["error"]["code"] == "rate_limit_exceeded"
    assert (
        r.headers["x-ratelimit-remaining-requests"] == "0"
        and r.headers["x-ratelimit-reset-requests"] == "20s"
    )
    assert post(openai_emu, body(max_completion_tokens=10)).status_code == 200
    with pytest.raises(ValueError, match="no fault"):
        openai_emu.set_script(["nonsense"])


def test_openai_layout_is_v1_only(openai_emu) -> None:
    r = post(openai_emu, body(max_completion_tokens=1), url=f"{openai_emu.url}/v1/v1/chat/completions")
    assert r.status_code == 404 and error_message(r) == "Invalid URL (POST /v1/v1/chat/completions)"


# --------------------------------------------------------------------------- Anthropic compatibility


def test_anthropic_refuses_temperature_with_top_p_and_returns_no_thinking() -> None:
    for emu in emulator(AnthropicCompat()):
        assert emu.base_url.endswith("/v1")
        r = post(emu, body(**PROTOCOL))
        assert r.status_code == 400
        assert r.json() == {
            "type": "error",
            "error": {
                "type": "invalid_request_error",
                "message": "`temperature` and `top_p` cannot both be specified for this model. Please use only one.",
            },
        }
        thinking = {"thinking": {"type": "enabled", "budget_tokens": 2048}}
        for payload in (without("top_p"), without("temperature"), without("top_p", **thinking)):
            r = post(emu, payload)
            assert r.status_code == 200
            assert r.json()["choices"][0]["message"] == {"role": "assistant", "content": REPLY}
            assert r.json()["usage"]["completion_tokens_details"] == {}  # no reasoning token count


# --------------------------------------------------------------------------- Gemini compatibility


def test_gemini_serves_only_under_v1beta_openai() -> None:
    for emu in emulator(GeminiCompat()):
        assert emu.base_url == f"{emu.url}/v1beta/openai"
        assert post(emu, body(**PROTOCOL)).status_code == 200
        for wrong in ("/v1beta/openai/v1/chat/completions", "/v1/chat/completions"):
            r = post(emu, body(**PROTOCOL), url=emu.url + wrong)
            assert r.status_code == 404 and r.json()["error"]["status"] == "NOT_FOUND"


def test_gemini_returns_thoughts_as_a_thought_block_only_when_asked() -> None:
    thoughts = {"extra_body": {"google": {"thinking_config": {"include_thoughts": True}}}}
    for emu in emulator(GeminiCompat()):
        plain = post(emu, body(**PROTOCOL)).json()["choices"][0]["message"]
        assert plain == {"role": "assistant", "content": REPLY}
        asked = post(emu, body(**PROTOCOL, **thoughts)).json()
        content = asked["choices"][0]["message"]["content"]
        assert content.startswith("<thought>") and content.endswith("</thought>" + REPLY)
        assert "reasoning" not in asked["choices"][0]["message"]
        assert "completion_tokens_details" not in asked["usage"]


@pytest.mark.parametrize("list_body", [False, True])
def test_gemini_429_puts_the_wait_in_the_body_only(list_body: bool) -> None:
    for emu in emulator(
        GeminiCompat(list_body=list_body, retry_delay="7s"), script=["rate_limit", "daily_quota"]
    ):
        for quota in ("PerMinute", "PerDay"):
            r = post(emu, body(**PROTOCOL))
            assert r.status_code == 429 and "retry-after" not in r.headers
            data = r.json()
            assert isinstance(data, list) is list_body
            err = (data[0] if list_body else data)["error"]
            assert err["status"] == "RESOURCE_EXHAUSTED" and err["code"] == 429
            delays = [d["retryDelay"] for d in err["details"] if d["@type"].endswith("RetryInfo")]
            ids = [v["quotaId"] for d in err["details"] if "violations" in d for v in d["violations"]]
            assert delays == ["7s"] and quota in ids[0]


# --------------------------------------------------------------------------- OpenRouter


def test_openrouter_require_parameters_refuses_what_default_routing_drops() -> None:
    no_top_p = OpenRouter(supported=frozenset({"max_tokens", "temperature", "reasoning"}))
    for emu in emulator(no_top_p):
        assert emu.base_url.endswith("/api/v1")
        r = post(emu, body(**PROTOCOL))  # default routing: top_p dropped silently
        assert r.status_code == 200 and emu.requests()[-1]["dropped"] == ["top_p"]
        r = post(emu, body(**PROTOCOL, provider={"require_parameters": True}))
        assert r.status_code == 404
        assert r.json() == {
            "error": {"code": 404, "message": "No endpoints found that can handle the requested parameters."}
        }
        r = post(emu, without("top_p", provider={"require_parameters": True}))
        assert r.status_code == 200
        msg = r.json()["choices"][0]["message"]
        assert msg["reasoning"].startswith("I scan") and msg["content"] == REPLY
        assert r.json()["usage"]["completion_tokens_details"]["reasoning_tokens"] == 48


def test_openrouter_transient_402_carries_retry_after() -> None:
    for emu in emulator(OpenRouter(), script=["in_flight_budget"]):
        r = post(emu, body(**PROTOCOL))
        assert r.status_code == 402 and r.headers["Retry-After"] == "1"
        assert r.json()["error"]["metadata"]["limit_source"] == "openrouter_in_flight_budget"
        assert post(emu, body(**PROTOCOL)).status_code == 200


# --------------------------------------------------------------------------- Moonshot, Zhipu


def test_moonshot_accepts_only_temperature_1_and_top_p_095() -> None:
    for emu in emulator(Moonshot()):
        r = post(emu, body(**PROTOCOL))
        assert r.status_code == 200
        msg = r.json()["choices"][0]["message"]
        assert msg["content"] == REPLY and msg["reasoning_content"].startswith("I scan")
        r = post(emu, body(temperature=0.6, top_p=0.95))
        assert r.status_code == 400
        assert r.json() == {
            "error": {
                "message": "invalid temperature: only 1 is allowed for this model",
                "type": "invalid_request_error",
            }
        }
        r = post(emu, body(temperature=1, top_p=1.0))
        assert error_message(r) == "invalid top_p: only 0.95 is allowed for this model"


def test_zhipu_layout_has_no_v1_and_uses_string_codes() -> None:
    for emu in emulator(Zhipu(max_tokens_cap=16384)):
        assert emu.base_url == f"{emu.url}/api/paas/v4"
        r = post(emu, body(**PROTOCOL))
        assert r.status_code == 400 and r.json()["error"]["code"] == "1214"
        r = post(emu, body(**{**PROTOCOL, "max_tokens": 16384}))
        assert r.status_code == 200 and r.json()["choices"][0]["message"]["reasoning_content"]
        r = post(emu, body(**PROTOCOL), url=f"{emu.url}/api/paas/v4/v1/chat/completions")
        assert r.status_code == 404 and r.json()["error"]["code"] == "1210"


# --------------------------------------------------------------------------- inline think, vLLM


def test_inline_think_hosts_keep_reasoning_in_content() -> None:
    for emu in emulator(InlineThinkHost(prefix="/inference/v1")):
        r = post(emu, body(**PROTOCOL))
        content = r.json()["choices"][0]["message"]["content"]
        assert content.startswith("<think>\nI scan") and content.endswith("</think>\n\n" + REPLY)
        assert set(r.json()["choices"][0]["message"]) == {"role", "content"}


@pytest.mark.parametrize(
    ("rules", "field", "content_start"),
    [
        (VLLM(reasoning_parser=True), "reasoning", "I see 3"),
        (VLLM(reasoning_parser=False), None, "<think>\n"),
        (VLLM(reasoning_parser=False, template="qwen3.5"), None, "I scan"),
    ],
)
def test_vllm_reasoning_with_and_without_parser(rules: VLLM, field: str | None, content_start: str) -> None:
    for emu in emulator(rules):
        assert httpx.get(f"{emu.url}/health", timeout=5).status_code == 200
        msg = post(emu, body(**PROTOCOL)).json()["choices"][0]["message"]
        assert msg["content"].startswith(content_start) and msg["content"].endswith(REPLY)
        if field:
            assert msg[field].startswith("I scan")
        else:
            assert set(msg) == {"role", "content"} and "</think>" in msg["content"]


def test_vllm_context_overflow_is_a_hard_400() -> None:
    for emu in emulator(VLLM(max_model_len=8192)):
        r = post(emu, body(**PROTOCOL))
        assert r.status_code == 400 and "maximum context length is 8192 tokens" in error_message(r)
        assert post(emu, body(**{**PROTOCOL, "max_tokens": 4096})).status_code == 200


def test_requests_are_recorded_without_image_bytes_or_keys() -> None:
    for emu in emulator(Moonshot()):
        post(emu, body(**PROTOCOL))
        (rec,) = emu.requests()
        assert rec["image_sha256"] == SHA and rec["status"] == 200 and rec["headers"]["has_authorization"]
        assert "sk-x" not in repr(rec) and "base64" not in repr(rec["body"])


def test_anthropic_refuses_an_image_over_8000_px() -> None:
    tall = image_bytes(3, size=(16, 8001))
    for emu in emulator(AnthropicCompat()):
        payload = without("top_p")
        payload["messages"][0]["content"][0]["image_url"]["url"] = data_url(tall, "image/jpeg")
        r = post(emu, payload)
        assert r.status_code == 400 and r.json()["error"]["type"] == "invalid_request_error"
        assert error_message(r) == (
            "messages.0.content.0.image.source.base64.data: At least one of the image dimensions exceed max "
            "allowed size: 8000 pixels"
        )
        assert post(emu, without("top_p")).status_code == 200
