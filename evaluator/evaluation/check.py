"""`doccount check-endpoint`: send one real row, exactly as a run would, and show everything that came back.

One attempt, no retries, and nothing written: no run folder is created or touched. The request body
is the run's (same bytes, same SHA-256), so what the check shows is what the run will meet.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
from typing import Any

import openai

from evaluator.core.boundary import KeyFilter, ShapeError, body_text, clip, json_text, parse_json
from evaluator.core.errors import ExitCode
from evaluator.core.output import answer, say
from evaluator.core.records import derive_seed
from evaluator.core.secrets import Redactor
from evaluator.data.benchmarks.base import ManifestEntry, Sample
from evaluator.data.parquet import DataSource, iter_samples
from evaluator.data.parsing import strip_tokens
from evaluator.data.reasoning import has_inline_think
from evaluator.evaluation.reachability import answering_base_urls
from evaluator.evaluation.runner import EvalSettings
from evaluator.request.body import request_bytes, sampling_fields
from evaluator.request.bounds import ReplyTooLarge, total_timeout
from evaluator.request.breaker import shape_hint, wrong_path
from evaluator.request.client import make_client
from evaluator.request.endpoint import chat_url
from evaluator.request.replies import ResponseShapeError, completion_from_json, error_message

REASONING_FIELDS = ("reasoning", "reasoning_content")  # the order completion_from_json reads them in


async def _exchange(settings: EvalSettings, body: bytes, keys: KeyFilter) -> tuple[int, Any, float]:
    """(HTTP status, parsed JSON body or error text, latency) of one attempt, through the boundary."""
    client = make_client(settings.base_url, settings.api_key, settings.timeout_s, 1)
    t0 = time.perf_counter()
    try:
        async with asyncio.timeout(total_timeout(client)):  # from connect to the last byte, as a run's
            raw = await client.post(
                "/chat/completions",
                cast_to=bytes,
                content=body,
                options={"headers": {"Content-Type": "application/json"}},
            )
    except TimeoutError:
        late = f"request timed out (no whole reply in --timeout {settings.timeout_s:g} s)"
        return 0, late, time.perf_counter() - t0
    except ReplyTooLarge as exc:
        return 0, str(exc), time.perf_counter() - t0
    except openai.APIStatusError as exc:
        return exc.status_code, error_message(exc, keys), time.perf_counter() - t0
    except openai.APIConnectionError as exc:  # includes timeouts
        cause = exc.__cause__
        return 0, clip(keys(f"{type(exc).__name__}: {cause or exc}"), 500), time.perf_counter() - t0
    finally:
        await client.close()
    latency = time.perf_counter() - t0
    try:
        return 200, parse_json(raw, keys), latency
    except ShapeError:
        return 200, clip(body_text(raw, keys), 300), latency


def _shown(text: str | None, limit: int = 1500) -> str:
    """A redacted text, clipped, as a JSON string."""
    if text is None:
        return "(none)"
    return json.dumps(clip(text, limit), ensure_ascii=False)


def report_lines(
    settings: EvalSettings,
    sample: Sample,
    body: bytes,
    status: int,
    reply: Any,
    latency: float,
    keys: KeyFilter,
    answering: list[str] | None = None,
) -> list[str]:
    """What came back, one fact per line (`answering`: base URLs checked to answer, for a 404). Pure."""
    lines = [
        f"endpoint: {chat_url(settings.base_url)}",
        f"sample: {sample.sample_id} (ground truth {sample.ground_truth})",
        f"request: model {settings.model}, {json.dumps(sampling_fields(settings.sampling), sort_keys=True)}"
        + (
            f", extra body {json.dumps(settings.sampling.extra_body, sort_keys=True)}"
            if settings.sampling.extra_body
            else ""
        )
        + f", {len(body)} bytes, sha256 {hashlib.sha256(body).hexdigest()}",
    ]
    if status != 200:
        message = str(reply)
        lines.append(
            f"status: {'no response' if status == 0 else f'HTTP {status}'} after {latency:.2f} s: {message}"
        )
        if 400 <= status < 500:
            hint = shape_hint(status, message, settings.sampling, settings.base_url, answering)
            lines.append(f"hint: {hint}")
        return lines
    lines.append(f"status: HTTP 200 after {latency:.2f} s")
    try:
        c = completion_from_json(reply, latency, keys)
    except ResponseShapeError as exc:
        shown = reply if isinstance(reply, str) else json_text(reply, keys, 300)
        return [*lines, f"response: not a chat completion ({exc}): {_shown(shown, 300)}"]
    message = reply["choices"][0]["message"]
    field = next((f for f in REASONING_FIELDS if isinstance(message.get(f), str)), None)
    if c.anomalies:
        lines.append(f"protocol anomalies: {'; '.join(c.anomalies)}")
    parsed = settings.benchmark.parse(strip_tokens(c.response_text, settings.strip_tokens))
    u = c.usage
    lines += [
        f"finish reason: {c.finish_reason}",
        f"visible text: {_shown(c.response_text)}",
        f"reasoning: {'none returned' if field is None or c.reasoning_text is None else f'field {field!r}, {len(c.reasoning_text)} chars: {_shown(c.reasoning_text, 300)}'}",
        f"inline <think> in the visible text: {'yes (serve with a reasoning parser)' if has_inline_think(c.response_text) else 'no'}",
        f"parsed answer: {parsed.answer} (parse status {parsed.status}); correct: "
        f"{settings.benchmark.is_correct(parsed.answer, sample.ground_truth)}",
        f"usage: prompt {u.prompt_tokens}, completion {u.completion_tokens}, total {u.total_tokens}, "
        f"reasoning {u.reasoning_tokens if u.reasoning_tokens is not None else 'not reported'}, "
        f"cached {u.cached_tokens if u.cached_tokens is not None else 'not reported'}",
        f"response id: {c.response_id}; system fingerprint: {c.system_fingerprint}",
    ]
    return lines


def check_endpoint(settings: EvalSettings, source: DataSource, selection: list[ManifestEntry]) -> int:
    """Send the first valid selected row once; print the exchange. 0: a parsed answer came back; 3: not."""
    wanted = {e.sample_id for e in selection if not e.data_error}
    samples = iter_samples(settings.benchmark, source, with_images=True)
    sample = next((s for s in samples if s.sample_id in wanted and not s.data_error), None)
    if sample is None:
        say("error: no selected row has valid data to send; run --dry-run for the details")
        return ExitCode.USAGE
    # the run's exact bytes: with --seed, the seed of this question's first repeat
    seed = None if settings.seed is None else derive_seed(settings.seed, sample.sample_id, 0)
    body = request_bytes(settings.benchmark, sample, settings.model, settings.sampling, seed)
    redact = Redactor(settings.api_key)
    status, reply, latency = asyncio.run(_exchange(settings, body, redact))
    answering = None
    if wrong_path(status, str(reply)):
        answering = answering_base_urls(settings.base_url, settings.api_key)
    for line in report_lines(settings, sample, body, status, reply, latency, redact, answering):
        answer(redact(line))
    answer("nothing was written (no run folder is created by check-endpoint)")
    if status != 200:
        return ExitCode.INCOMPLETE
    try:
        text = completion_from_json(reply, latency, redact).response_text
    except ResponseShapeError:
        return ExitCode.INCOMPLETE
    parsed = settings.benchmark.parse(strip_tokens(text, settings.strip_tokens))
    return ExitCode.OK if parsed.ok else ExitCode.INCOMPLETE
