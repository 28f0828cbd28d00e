"""Loopback emulators of providers' OpenAI-compatible chat endpoints: one rule set per provider.

Each rule set reproduces what its provider documents (or what its maintainers' issues show) about
the chat-completions request shape it refuses, the exact error text and JSON shape, the URL layout
(path prefix), the reasoning field, the usage fields and the rate-limit replies. Every rule carries
a comment naming its source; rules nobody confirmed say so. The emulators run on 127.0.0.1 only.

    with ProviderEmulator(OpenAIReasoning(), answers={sha: "<answer>3</answer>"}) as emu:
        ... --base-url emu.base_url ...   # http://127.0.0.1:PORT/v1
        emu.requests()                     # what arrived (image data URLs replaced by digests)

Faults are scripted per request with ``script=[name or None, ...]`` (consumed in order; None answers
normally); each rule set lists the fault names it knows in ``faults``.
"""

from __future__ import annotations

import asyncio
import base64
import copy
import io
import json
import threading
import time
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

from aiohttp import web

from support.openai_test_server import _header_record, _redacted_body

__all__ = [
    "ALL_RULES",
    "AnthropicCompat",
    "GeminiCompat",
    "InlineThinkHost",
    "Moonshot",
    "OpenAIReasoning",
    "OpenRouter",
    "ProviderEmulator",
    "Refusal",
    "Rules",
    "VLLM",
    "Zhipu",
]

REASONING = "I scan the page region by region and count each instance once."
# Parameters that count as sampling/decoding parameters for OpenRouter's require_parameters check.
OPENROUTER_PARAMETERS = frozenset(
    {
        "temperature", "top_p", "top_k", "min_p", "top_a", "max_tokens", "max_completion_tokens",
        "seed", "stop", "frequency_penalty", "presence_penalty", "repetition_penalty", "logit_bias",
        "logprobs", "top_logprobs", "response_format", "structured_outputs", "tools", "tool_choice",
        "reasoning", "include_reasoning", "verbosity",
    }
)  # fmt: skip


@dataclass
class Refusal:
    """An error reply: HTTP status, JSON body (any JSON value), extra headers."""

    status: int
    body: Any
    headers: dict[str, str] = field(default_factory=dict)


def _image_side(part: Any) -> int | None:
    """The longer side in pixels of a content part's base64 data-URL image, else None."""
    if not isinstance(part, dict) or part.get("type") != "image_url":
        return None
    url = str((part.get("image_url") or {}).get("url", ""))
    head, sep, payload = url.partition(",")
    if not (url.startswith("data:") and sep and head.endswith(";base64")):
        return None
    from PIL import Image  # pillow comes with the dev/demo extras

    try:
        with Image.open(io.BytesIO(base64.b64decode(payload))) as img:
            return max(img.size)
    except (OSError, ValueError):
        return None


def _num(value: Any) -> str:
    """A JSON number as the request spelled it (OpenAI's messages echo the value sent)."""
    return json.dumps(value)


class Rules:
    """Base rule set: an OpenAI-shaped endpoint that refuses nothing."""

    name = "openai-compatible"
    prefix = "/v1"
    # Where the reasoning text comes back: a message field name, "inline" (a <think> block at the
    # start of content), "close_only" (reasoning, then a lone </think>, then the answer) or None.
    reasoning_style: str | None = None
    reports_reasoning_tokens = False
    reports_cached_tokens = False
    faults: tuple[str, ...] = ()

    def refuse(self, body: Mapping[str, Any]) -> Refusal | None:
        """The refusal of a request this provider does not accept, else None."""
        return None

    def error(self, status: int, message: str, etype: str = "invalid_request_error", **extra: Any) -> Refusal:
        """The provider's error shape; the base is OpenAI's {"error": {message, type, param, code}}."""
        return Refusal(
            status, {"error": {"message": message, "type": etype, "param": None, "code": None, **extra}}
        )

    def not_found(self, method: str, path: str) -> Refusal:
        return self.error(404, f"Invalid URL ({method} {path})")

    def fault(self, name: str) -> Refusal:
        raise ValueError(f"{self.name} has no fault {name!r}; known: {list(self.faults)}")

    def success_headers(self) -> dict[str, str]:
        return {}

    def usage(self, prompt: int, completion: int, reasoning: int) -> dict[str, Any]:
        usage: dict[str, Any] = {
            "prompt_tokens": prompt,
            "completion_tokens": completion + reasoning,
            "total_tokens": prompt + completion + reasoning,
        }
        if self.reports_reasoning_tokens:
            usage["completion_tokens_details"] = {"reasoning_tokens": reasoning}
        if self.reports_cached_tokens:
            usage["prompt_tokens_details"] = {"cached_tokens": 0}
        return usage

    def reply_message(self, body: Mapping[str, Any], answer: str, reasoning: str | None) -> dict[str, Any]:
        """The message of a reply to `body` (a rule set whose reasoning depends on the request overrides it)."""
        return self.message(answer, reasoning if self.reasoning_style is not None else None)

    def message(self, answer: str, reasoning: str | None) -> dict[str, Any]:
        msg: dict[str, Any] = {"role": "assistant", "content": answer}
        style = self.reasoning_style
        if reasoning is None or style is None:
            return msg
        if style == "inline":
            msg["content"] = f"<think>\n{reasoning}\n</think>\n\n{answer}"
        elif style == "close_only":
            msg["content"] = f"{reasoning}\n</think>\n\n{answer}"
        else:
            msg[style] = reasoning
        return msg


class OpenAIReasoning(Rules):
    """OpenAI GPT-5.x / o-series on /v1/chat/completions (https://api.openai.com/v1)."""

    name = "openai-reasoning"
    reports_reasoning_tokens = (
        True  # OpenAI reasoning guide: usage.completion_tokens_details.reasoning_tokens
    )
    reports_cached_tokens = True  # OpenAI prompt caching guide: usage.prompt_tokens_details.cached_tokens
    faults = ("insufficient_quota", "rate_limit", "tpm_too_large")
    # Chat completions return no reasoning text for these models (OpenAI reasoning guide; OpenRouter's
    # reasoning-tokens page: "some reasoning models do not return their reasoning tokens").

    def refuse(self, body: Mapping[str, Any]) -> Refusal | None:
        # Text, type, param and code as shown in griptape-ai/ComfyUI-Griptape#312, fish2018/YPrompt#26
        # (gpt-5 / gpt-5.1), koosoli/ESPHomeDesigner#379 (gpt-5.4), teilomillet/gollm#33 (o1, o3-mini).
        if "max_tokens" in body:
            return self._unsupported(
                "max_tokens",
                "Unsupported parameter: 'max_tokens' is not supported with this model. "
                "Use 'max_completion_tokens' instead.",
            )
        # aandrew-me/tgpt#333 (o1), microsoft/vscode#282170 (GPT 5.1 Codex), brainlid/langchain#428
        # (gpt-5.2+ refuse top_p). litellm lists top_p as unsupported for gpt-5 (gpt_5_transformation.py).
        if "top_p" in body:
            return self._unsupported(
                "top_p", "Unsupported parameter: 'top_p' is not supported with this model."
            )
        # OpenHands/OpenHands#4131, johny-b/llmcomp#69 (GPT-5.4), gabrii/Cursor-Azure-GPT-5#33: only 1.
        # (Which of the three checks OpenAI runs first is not documented: this order is a guess.)
        temp = body.get("temperature")
        if temp is not None and temp != 1:
            return self.error(
                400,
                f"Unsupported value: 'temperature' does not support {_num(temp)} with this model. "
                "Only the default (1) value is supported.",
                param="temperature",
                code="unsupported_value",
            )
        return None

    def _unsupported(self, param: str, message: str) -> Refusal:
        return self.error(400, message, param=param, code="unsupported_parameter")

    def fault(self, name: str) -> Refusal:
        if name == "insufficient_quota":
            # NextChat#3664 / OpenAI error-codes guide: a 429 that waiting does not fix.
            r = self.error(
                429,
                "You exceeded your current quota, please check your plan and billing details. For more "
                "information on this error, read the docs: https://platform.openai.com/docs/guides/error-codes/api-errors.",
                etype="insufficient_quota",
                code="insufficient_quota",
            )
            return r
        if name == "rate_limit":
            # OpenAI rate-limit guide: per-minute request limit, with x-ratelimit-* headers.
            r = self.error(
                429,
                "Rate limit reached for gpt-5.2 in organization org-emulator on requests per min (RPM): "
                "Limit 3, Used 3, Requested 1. Please try again in 20s.",
                etype="requests",
                code="rate_limit_exceeded",
            )
            r.headers.update(self._ratelimit_headers(remaining=0, reset="20s"))
            return r
        if name == "tpm_too_large":
            # OpenAI rate-limit guide / community threads: one request above the tier's TPM.
            return self.error(
                429,
                "Request too large for gpt-5.2 in organization org-emulator on tokens per min (TPM): "
                "Limit 30000, Requested 33000. The input or output tokens must be reduced in order to run "
                "successfully.",
                etype="tokens",
                code="rate_limit_exceeded",
            )
        return super().fault(name)

    @staticmethod
    def _ratelimit_headers(remaining: int, reset: str) -> dict[str, str]:
        # Header names from OpenAI's rate-limit guide ("6m0s" / "0.25s" style reset values).
        return {
            "x-ratelimit-limit-requests": "500",
            "x-ratelimit-remaining-requests": str(remaining),
            "x-ratelimit-reset-requests": reset,
            "x-ratelimit-limit-tokens": "30000",
            "x-ratelimit-remaining-tokens": "29000",
            "x-ratelimit-reset-tokens": "2s",
        }

    def success_headers(self) -> dict[str, str]:
        return self._ratelimit_headers(remaining=499, reset="120ms")

    def not_found(self, method: str, path: str) -> Refusal:
        # OpenAI answers an unknown path with this text (seen across many client issues; unconfirmed
        # in OpenAI's own docs).
        return self.error(404, f"Invalid URL ({method} {path})")


class AnthropicCompat(Rules):
    """Claude 4.5 through Anthropic's OpenAI SDK compatibility layer (https://api.anthropic.com/v1/)."""

    name = "anthropic-compat"
    prefix = "/v1"  # Anthropic OpenAI SDK compatibility page: base_url "https://api.anthropic.com/v1/"
    # Same page (https://docs.anthropic.com/en/api/openai-sdk, "Extended thinking support"): `thinking` in
    # the body works, "but the OpenAI SDK won't return Claude's detailed thought process"; reasoning_effort
    # is ignored. So no reasoning field, whatever the request asks, and (its response-fields table, as
    # issue 48 reads it) usage.completion_tokens_details left empty: no reasoning token count either.
    faults = ("overloaded",)

    def usage(self, prompt: int, completion: int, reasoning: int) -> dict[str, Any]:
        return {**super().usage(prompt, completion, reasoning), "completion_tokens_details": {}}

    MAX_IMAGE_SIDE = 8000

    def refuse(self, body: Mapping[str, Any]) -> Refusal | None:
        # Claude 4.5 migration guide; langfuse/langfuse#9882, fwdai/reticle#7 (Sonnet 4.5). Whether the
        # compatibility layer passes this 400 through unchanged is unconfirmed (BerriAI/litellm#15097):
        # assumed here.
        if body.get("temperature") is not None and body.get("top_p") is not None:
            return self.error(
                400, "`temperature` and `top_p` cannot both be specified for this model. Please use only one."
            )
        return self._oversized_image(body)

    def _oversized_image(self, body: Mapping[str, Any]) -> Refusal | None:
        # Anthropic vision docs: an image over 8000 px on a side is refused; text as in
        # anthropics/claude-code#4778, #12351 (native API; the message index after the compatibility
        # layer hoists system messages is assumed).
        turns = [m for m in body.get("messages") or [] if isinstance(m, dict) and m.get("role") != "system"]
        for i, msg in enumerate(turns):
            parts = msg.get("content") if isinstance(msg.get("content"), list) else []
            for j, part in enumerate(parts):
                side = _image_side(part)
                if side is not None and side > self.MAX_IMAGE_SIDE:
                    return self.error(
                        400,
                        f"messages.{i}.content.{j}.image.source.base64.data: At least one of the image "
                        f"dimensions exceed max allowed size: {self.MAX_IMAGE_SIDE} pixels",
                    )
        return None

    def error(self, status: int, message: str, etype: str = "invalid_request_error", **extra: Any) -> Refusal:
        # Anthropic's error shape (Anthropic "Errors" page): {"type": "error", "error": {type, message}}.
        # Vali-98/ChatterUI#564 shows the same type/message pair. Still an "error" object with "message".
        return Refusal(status, {"type": "error", "error": {"type": etype, "message": message, **extra}})

    def not_found(self, method: str, path: str) -> Refusal:
        return self.error(404, f"Not Found: {path}", etype="not_found_error")

    def fault(self, name: str) -> Refusal:
        if name == "overloaded":
            # Anthropic "Errors" page: 529 overloaded_error.
            return self.error(529, "Overloaded", etype="overloaded_error")
        return super().fault(name)


class GeminiCompat(Rules):
    """Gemini's OpenAI compatibility (https://generativelanguage.googleapis.com/v1beta/openai/)."""

    name = "gemini-compat"
    prefix = "/v1beta/openai"  # Gemini "OpenAI compatibility" page; there is no /v1 under it
    faults = ("rate_limit", "daily_quota")

    def __init__(self, list_body: bool = False, retry_delay: str = "1s") -> None:
        # n4ze3m/page-assist#406: the compat endpoint's 429 body was a JSON list around the error.
        self.list_body = list_body
        self.retry_delay = retry_delay

    def reply_message(self, body: Mapping[str, Any], answer: str, reasoning: str | None) -> dict[str, Any]:
        # Gemini "OpenAI compatibility" page (https://ai.google.dev/gemini-api/docs/openai, thinking):
        # thoughts come back only when asked, through the body's
        # {"extra_body": {"google": {"thinking_config": {"include_thoughts": true}}}} (the OpenAI SDK's
        # extra_body holding an "extra_body" key, as Google's answer shows in
        # https://discuss.ai.google.dev/t/how-to-include-thoughts-on-openai-compatibility/87141); they
        # arrive in the content as a <thought>...</thought> block before the answer (issue 48's reading of
        # the layer; no reasoning field, and no reasoning token count is emulated).
        google = (
            (body.get("extra_body") or {}).get("google") if isinstance(body.get("extra_body"), dict) else None
        )
        config = (google or {}).get("thinking_config") if isinstance(google, dict) else None
        if reasoning is None or not isinstance(config, dict) or config.get("include_thoughts") is not True:
            return self.message(answer, None)
        return {"role": "assistant", "content": f"<thought>{reasoning}</thought>{answer}"}

    def error(self, status: int, message: str, etype: str = "INVALID_ARGUMENT", **extra: Any) -> Refusal:
        # Google's error shape (google/generative-ai-docs#236, RooCodeInc/Roo-Code#3883):
        # {"error": {"code": 429, "message": ..., "status": "RESOURCE_EXHAUSTED", "details": [...]}}.
        err = {"error": {"code": status, "message": message, "status": etype, **extra}}
        return Refusal(status, [err] if self.list_body and status == 429 else err)

    def not_found(self, method: str, path: str) -> Refusal:
        # Google's 404 for a path outside the API (exact body unconfirmed; the status is what matters).
        return self.error(404, f"Requested entity was not found: {path}", etype="NOT_FOUND")

    def fault(self, name: str) -> Refusal:
        # The wait is only in the body, as a google.rpc.RetryInfo detail, and no Retry-After header is
        # sent (dcdpr/jp#1061; googleapis/python-genai#2044; RooCodeInc/Roo-Code#2118).
        retry = {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": self.retry_delay}
        if name == "rate_limit":
            quota = "GenerateRequestsPerMinutePerProjectPerModel-FreeTier"
        elif name == "daily_quota":
            # A per-day quota does not clear by waiting (dcdpr/jp#1061; langchain-google#1445).
            quota = "GenerateRequestsPerDayPerProjectPerModel-FreeTier"
        else:
            return super().fault(name)
        failure = {
            "@type": "type.googleapis.com/google.rpc.QuotaFailure",
            "violations": [
                {
                    "quotaMetric": "generativelanguage.googleapis.com/generate_content_free_tier_requests",
                    "quotaId": quota,
                    "quotaDimensions": {"location": "global", "model": "gemini-emulated"},
                }
            ],
        }
        message = (
            "You exceeded your current quota, please check your plan and billing details. For more "
            "information on this error, head to: https://ai.google.dev/gemini-api/docs/rate-limits."
        )
        return self.error(429, message, etype="RESOURCE_EXHAUSTED", details=[failure, retry])


class OpenRouter(Rules):
    """OpenRouter (https://openrouter.ai/api/v1)."""

    name = "openrouter"
    prefix = "/api/v1"  # OpenRouter API reference: POST /api/v1/chat/completions
    # OpenRouter reasoning-tokens page: reasoning text in the message's `reasoning` field; reasoning
    # tokens are output tokens (usage.completion_tokens_details.reasoning_tokens).
    reasoning_style = "reasoning"
    reports_reasoning_tokens = True
    faults = ("in_flight_budget",)

    def __init__(self, supported: frozenset[str] | None = None) -> None:
        # The routed endpoints' supported_parameters (per model on OpenRouter's models API).
        self.supported = (
            supported
            if supported is not None
            else frozenset(
                {"temperature", "top_p", "max_tokens", "seed", "reasoning", "include_reasoning", "stop"}
            )
        )

    def unsupported(self, body: Mapping[str, Any]) -> list[str]:
        return sorted(k for k in body if k in OPENROUTER_PARAMETERS and k not in self.supported)

    def refuse(self, body: Mapping[str, Any]) -> Refusal | None:
        # Provider-routing page: require_parameters=true routes only to providers that support every
        # parameter sent; without it, unsupported parameters are dropped silently (see `drop`).
        # The refusal when none qualifies: block/buzz#3018.
        provider = body.get("provider")
        if isinstance(provider, dict) and provider.get("require_parameters") and self.unsupported(body):
            return self.error(404, "No endpoints found that can handle the requested parameters.")
        return None

    def error(self, status: int, message: str, etype: str = "", **extra: Any) -> Refusal:
        # OpenRouter errors page: {"error": {"code": <int>, "message": ..., "metadata"?: {...}}}.
        return Refusal(status, {"error": {"code": status, "message": message, **extra}})

    def fault(self, name: str) -> Refusal:
        if name == "in_flight_budget":
            # OpenRouter limits page (OpenRouterTeam/docs api_reference/limits.mdx): the in-flight
            # spending budget is transient and its 402 carries Retry-After.
            r = self.error(
                402,
                "Your in-flight requests already use your spending budget; retry when some finish.",
                metadata={"limit_source": "openrouter_in_flight_budget"},
            )
            r.headers["Retry-After"] = "1"
            return r
        return super().fault(name)


class Moonshot(Rules):
    """Moonshot's Kimi K2.5 in its default thinking mode (https://api.moonshot.ai/v1)."""

    name = "moonshot"
    # Kimi K2.5 quickstart (platform.moonshot.ai): reasoning in `reasoning_content`.
    reasoning_style = "reasoning_content"

    def refuse(self, body: Mapping[str, Any]) -> Refusal | None:
        # Thinking mode fixes temperature 1 and top_p 0.95; anything else is a 400 (Kimi K2.5 docs;
        # texts from Mai-with-u/MaiBot#1538, NoFxAiOS/nofx#1415 and CherryHQ/cherry-studio#12691).
        temp, top_p = body.get("temperature"), body.get("top_p")
        if temp is not None and temp != 1:
            return self.error(400, "invalid temperature: only 1 is allowed for this model")
        if top_p is not None and top_p != 0.95:
            return self.error(400, "invalid top_p: only 0.95 is allowed for this model")
        return None

    def error(self, status: int, message: str, etype: str = "invalid_request_error", **extra: Any) -> Refusal:
        # Mai-with-u/MaiBot#1538: {"error": {"message": ..., "type": "invalid_request_error"}}.
        return Refusal(status, {"error": {"message": message, "type": etype, **extra}})


class Zhipu(Rules):
    """Zhipu BigModel (GLM-4.6V), https://open.bigmodel.cn/api/paas/v4."""

    name = "zhipu"
    prefix = "/api/paas/v4"  # Zhipu API docs: POST /api/paas/v4/chat/completions, no /v1
    # Thinking GLM models return `reasoning_content` before `content` (nashsu/llm_wiki#748).
    reasoning_style = "reasoning_content"

    def __init__(self, max_tokens_cap: int | None = None) -> None:
        # GLM-4.6V's output cap is not confirmed; off unless a test sets it.
        self.max_tokens_cap = max_tokens_cap

    def refuse(self, body: Mapping[str, Any]) -> Refusal | None:
        cap = self.max_tokens_cap
        if cap is not None and isinstance(body.get("max_tokens"), int) and body["max_tokens"] > cap:
            # lobehub/lobehub#1398: a max_tokens above the model's cap is error code 1214.
            return self.error(400, "max_tokens参数非法。请检查文档。", code="1214")
        return None

    def error(self, status: int, message: str, etype: str = "", code: str = "1210", **extra: Any) -> Refusal:
        # fuzhengwei/chatglm-sdk-java#8, sam-dumont/immich-video-memory-generator#919:
        # {"error": {"code": "1210", "message": ...}} (the code is a string).
        return Refusal(status, {"error": {"code": code, "message": message, **extra}})


class InlineThinkHost(Rules):
    """Together / Fireworks-style hosts serving a reasoning model whose thinking stays in content."""

    name = "inline-think"
    # docs.fireworks.ai/guides/reasoning: reasoning normally goes to `reasoning_content`, but for some
    # models it stays in `content` inside <think></think>.
    reasoning_style = "inline"

    def __init__(self, prefix: str = "/v1", reasoning_style: str = "inline") -> None:
        # Together: https://api.together.xyz/v1; Fireworks: https://api.fireworks.ai/inference/v1.
        self.prefix = prefix
        self.reasoning_style = reasoning_style


class VLLM(Rules):
    """Self-hosted vLLM (http://host:8000/v1), with or without --reasoning-parser."""

    name = "vllm"

    def __init__(
        self, reasoning_parser: bool = True, template: str = "qwen3", max_model_len: int | None = None
    ) -> None:
        # vLLM reasoning-outputs docs: with --reasoning-parser the text is in `reasoning` (formerly
        # `reasoning_content`, PRs #27752, #33402). Without one, it stays in content: Qwen3 emits
        # <think>...</think>; Qwen3.5's template opens <think> in the prompt, so the reply has only the
        # closing tag (vLLM qwen3_reasoning_parser docs).
        self.reasoning_parser = reasoning_parser
        self.reasoning_style = (
            "reasoning" if reasoning_parser else ("close_only" if template == "qwen3.5" else "inline")
        )
        self.max_model_len = max_model_len

    def refuse(self, body: Mapping[str, Any]) -> Refusal | None:
        limit, asked = self.max_model_len, body.get("max_tokens")
        if limit is not None and isinstance(asked, int):
            prompt = 1000  # a fixed estimate keeps the text predictable
            if prompt + asked > limit:
                # vllm-project/vllm#42474: prompt + max_tokens over the context is a hard 400.
                return self.error(
                    400,
                    f"This model's maximum context length is {limit} tokens. However, you requested "
                    f"{prompt + asked} tokens ({prompt} in the messages, {asked} in the completion). "
                    "Please reduce the length of the messages or completion.",
                    etype="BadRequestError",
                )
        return None


ALL_RULES: dict[str, type[Rules]] = {
    r.name: r
    for r in (
        OpenAIReasoning,
        AnthropicCompat,
        GeminiCompat,
        OpenRouter,
        Moonshot,
        Zhipu,
        InlineThinkHost,
        VLLM,
    )
}


# --------------------------------------------------------------------------- server


class ProviderEmulator:
    """One rule set served on 127.0.0.1 under its path prefix, on its own event loop thread."""

    __test__ = False

    def __init__(
        self,
        rules: Rules,
        *,
        answers: Mapping[str, str] | None = None,
        default_reply: str = "I count the regions.\n<answer>0</answer>",
        reasoning: str | None = REASONING,
        reasoning_tokens: int = 48,
        script: list[str | None] | None = None,
        models: set[str] | None = None,
        finish_reasons: Mapping[str, str] | None = None,
    ) -> None:
        self.rules = rules
        self.answers = dict(answers or {})
        self.default_reply = default_reply
        self.reasoning = reasoning
        self.reasoning_tokens = reasoning_tokens
        self.models = models
        # image sha256 -> finish_reason ("length": the reply stopped at the output limit; OpenAI's chat
        # completion object documents "length" for a reply cut off by max_tokens / max_completion_tokens)
        self.finish_reasons = dict(finish_reasons or {})
        self._script: deque[str | None] = deque(script or [])
        self._lock = threading.Lock()
        self._records: list[dict[str, Any]] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._runner: web.AppRunner | None = None
        self._thread: threading.Thread | None = None
        self.port = 0

    # ----------------------------------------------------------------- addresses
    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def base_url(self) -> str:
        """The base URL a user pastes for this provider (its real layout, on loopback)."""
        return self.url + self.rules.prefix

    @property
    def chat_url(self) -> str:
        return f"{self.base_url}/chat/completions"

    # ----------------------------------------------------------------- state
    def requests(self) -> list[dict[str, Any]]:
        with self._lock:
            return copy.deepcopy(self._records)

    def set_script(self, script: list[str | None]) -> None:
        for name in script:
            if name is not None and name not in self.rules.faults:
                raise ValueError(f"{self.rules.name} has no fault {name!r}; known: {list(self.rules.faults)}")
        with self._lock:
            self._script = deque(script)

    def _next_fault(self) -> str | None:
        with self._lock:
            return self._script.popleft() if self._script else None

    def _record(self, **rec: Any) -> None:
        with self._lock:
            self._records.append({"n": len(self._records) + 1, "time": time.time(), **rec})

    # ----------------------------------------------------------------- handlers
    def _reply(self, body: Mapping[str, Any], image_sha: str | None, raw_len: int, n: int) -> dict[str, Any]:
        answer = self.answers.get(image_sha or "", self.default_reply)
        rules = self.rules
        reasoning = self.reasoning if rules.reasoning_style is not None else None
        hidden = self.reasoning_tokens if rules.reports_reasoning_tokens or reasoning else 0
        return {
            "id": f"chatcmpl-emu-{n}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": str(body.get("model", "")),
            "choices": [
                {
                    "index": 0,
                    "message": rules.reply_message(body, answer, self.reasoning),
                    "finish_reason": self.finish_reasons.get(image_sha or "", "stop"),
                }
            ],
            "usage": rules.usage(max(1, raw_len // 4), max(1, len(answer) // 4), hidden),
        }

    async def _chat(self, request: web.Request) -> web.Response:
        raw = await request.read()
        try:
            body = json.loads(raw)
            if not isinstance(body, dict):
                raise ValueError("not an object")
        except ValueError:
            self._record(path=request.path, body=None, status=400, headers=_header_record(request))
            return self._send(self.rules.error(400, "We could not parse the JSON body of your request."))
        redacted, images = _redacted_body(body)
        fault = self._next_fault()
        refusal = self.rules.fault(fault) if fault is not None else self.rules.refuse(body)
        if refusal is None and self.models is not None and body.get("model") not in self.models:
            refusal = self.rules.error(404, f"The model `{body.get('model')}` does not exist.")
        dropped = self.rules.unsupported(body) if isinstance(self.rules, OpenRouter) else []
        self._record(
            path=request.path,
            body=redacted,
            image_sha256=images[0] if images else None,
            headers=_header_record(request),
            fault=fault,
            status=refusal.status if refusal else 200,
            dropped=dropped,
        )
        if refusal is not None:
            return self._send(refusal)
        completion = self._reply(body, images[0] if images else None, len(raw), len(self._records))
        return web.json_response(completion, headers=self.rules.success_headers())

    def _send(self, refusal: Refusal) -> web.Response:
        return web.json_response(refusal.body, status=refusal.status, headers=refusal.headers)

    async def _models(self, _request: web.Request) -> web.Response:
        ids = sorted(self.models or {"emulated-model"})
        return web.json_response({"object": "list", "data": [{"id": i, "object": "model"} for i in ids]})

    async def _health(self, _request: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def _fallback(self, request: web.Request) -> web.Response:
        self._record(path=request.path, body=None, status=404, headers=_header_record(request))
        return self._send(self.rules.not_found(request.method, request.path))

    def _app(self) -> web.Application:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        prefix = self.rules.prefix
        app.router.add_post(f"{prefix}/chat/completions", self._chat)
        app.router.add_get(f"{prefix}/models", self._models)
        if isinstance(self.rules, VLLM):  # vLLM serves /health at the server root
            app.router.add_get("/health", self._health)
        app.router.add_route("*", "/{tail:.*}", self._fallback)
        return app

    # ----------------------------------------------------------------- lifecycle
    def start(self) -> ProviderEmulator:
        ready = threading.Event()
        errors: list[BaseException] = []
        loop = asyncio.new_event_loop()
        self._loop = loop

        async def setup() -> None:
            self._runner = web.AppRunner(self._app(), access_log=None, shutdown_timeout=0.5)
            await self._runner.setup()
            site = web.TCPSite(self._runner, "127.0.0.1", 0)
            await site.start()
            self.port = int(self._runner.addresses[0][1])

        def run() -> None:
            asyncio.set_event_loop(loop)
            try:
                loop.run_until_complete(setup())
            except BaseException as exc:  # noqa: BLE001 - reported to the starting thread
                errors.append(exc)
                ready.set()
                return
            ready.set()
            try:
                loop.run_forever()
            finally:
                if self._runner is not None:
                    loop.run_until_complete(self._runner.cleanup())
                loop.close()

        self._thread = threading.Thread(target=run, name=f"emulator-{self.rules.name}", daemon=True)
        self._thread.start()
        ready.wait()
        if errors:
            raise errors[0]
        return self

    def stop(self) -> None:
        if self._thread is not None and self._loop is not None and self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=10)
        self._thread = None

    def __enter__(self) -> ProviderEmulator:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
