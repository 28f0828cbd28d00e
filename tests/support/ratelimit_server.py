"""A rate-limited OpenAI-compatible endpoint: tests/support/openai_test_server.py behind a token bucket.

The bucket allows `rps` requests per second with bursts of `burst`. What it sends follows the providers:

* ``headers: "openai"`` -- every answer carries ``x-ratelimit-limit-requests`` (per minute),
  ``x-ratelimit-remaining-requests`` and ``x-ratelimit-reset-requests`` (time until the bucket is full, a
  Go-style duration such as "0.25s" or "1m0s"), as OpenAI documents in its rate-limit guide (example headers:
  community.openai.com/t/1268905). A refusal is a 429 with an integer ``Retry-After`` (RFC 9110 delay-seconds)
  and OpenAI's message shape "Rate limit reached for M in organization O on requests per min (RPM): Limit L,
  Used U, Requested 1. Please try again in Xs." with type ``requests``, code ``rate_limit_exceeded``
  (FoundationAgents/MetaGPT#523, crewAIInc/crewAI#494).
* ``headers: "anthropic"`` -- ``anthropic-ratelimit-requests-limit`` / ``-remaining`` / ``-reset`` (an RFC 3339
  time), ``retry-after`` on a 429 (anthropics/anthropic-sdk-typescript#357).
* ``headers: "gemini"`` -- no rate headers and no Retry-After; the wait is in the body,
  ``error.details[]`` google.rpc.RetryInfo ``retryDelay`` "Ns", next to a google.rpc.QuotaFailure naming a
  per-minute ``quotaId`` (diegosouzapw/OmniRoute#9504; Gemini OpenAI-compatibility docs).
* ``headers: "none"`` -- a bare 429 with an integer Retry-After and nothing else.

Refusals that waiting does not fix, from ``fault`` (every request, or after ``fault_after`` answers):

* ``openai_quota`` -- 429, type and code ``insufficient_quota``, "You exceeded your current quota, please check
  your plan and billing details. ..." (chatanywhere/GPT_API_free#229; inspect_ai does not retry it).
* ``gemini_daily`` -- 429 RESOURCE_EXHAUSTED whose QuotaFailure ``quotaId`` is
  "GenerateRequestsPerDayPerProjectPerModel-FreeTier", with a RetryInfo delay that does not help
  (diegosouzapw/OmniRoute#9504, gke-labs/gemini-for-kubernetes-development#1215).
* ``too_large`` -- 429 "Request too large for M in organization O on tokens per min (TPM): Limit 30000,
  Requested 32868. The input or output tokens must be reduced in order to run successfully. ...", type
  ``tokens``, code ``rate_limit_exceeded`` (DrShushen/climb#13, Aider-AI/aider#1880, vanna-ai/vanna-flask#11).
* ``credits_402`` -- OpenRouter's 402 without Retry-After: the balance cannot pay (OpenRouter errors docs,
  ``metadata.limit_source`` "openrouter_credits").

And one that does clear: ``transient_402: N`` -- the first N requests get OpenRouter's transient 402 (in-flight
budget exhausted, ``metadata.limit_source`` "openrouter_in_flight_budget") with Retry-After (OpenRouter limits
docs). The message texts of the two 402s are ours: the docs give their codes and metadata, not a text.

Run in-process (``with LimitedServer({"rps": 4, "burst": 4}) as srv``) or as a script
(``python tests/support/ratelimit_server.py --port-file F --config C.json``), like openai_test_server.
``GET /_bucket`` returns the counters (answered, refused, per-request log of time and status).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import signal
import sys
import threading
import time
from collections.abc import Mapping
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from aiohttp import web

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/, for `support.*` when run as a script
from support.openai_test_server import ServerState, build_app  # noqa: E402

LIMITER_DEFAULTS: dict[str, Any] = {
    "rps": 4.0,
    "burst": 4.0,
    "headers": "openai",  # openai, anthropic, gemini, none
    "fault": None,  # openai_quota, gemini_daily, too_large, credits_402
    "fault_after": 0,  # answers before the fault starts
    "transient_402": 0,  # the first N requests get OpenRouter's transient 402 with Retry-After
    "transient_402_retry_after": 1,
}
MODEL = "test-model"


def go_duration(seconds: float) -> str:
    """OpenAI's reset format: "0.25s", "1m0s", "6m0s"."""
    seconds = max(0.0, seconds)
    minutes, rest = divmod(seconds, 60.0)
    text = f"{rest:.3f}".rstrip("0").rstrip(".") + "s"
    return f"{int(minutes)}m{text}" if minutes else text


class Bucket:
    def __init__(self, rps: float, burst: float) -> None:
        self.rps, self.burst = rps, burst
        self.tokens, self.t = burst, time.monotonic()

    def refill(self, now: float) -> None:
        self.tokens = min(self.burst, self.tokens + (now - self.t) * self.rps)
        self.t = now

    def take(self, now: float) -> bool:
        self.refill(now)
        if self.tokens >= 1.0:
            self.tokens -= 1.0
            return True
        return False

    def next_token_s(self) -> float:
        return max(0.0, (1.0 - self.tokens) / self.rps)

    def full_in_s(self) -> float:
        return max(0.0, (self.burst - self.tokens) / self.rps)


class Limiter:
    """The bucket, the fault schedule and the counters (one lock: handlers run on one event loop)."""

    def __init__(self, config: Mapping[str, Any]) -> None:
        unknown = set(config) - set(LIMITER_DEFAULTS)
        if unknown:
            raise ValueError(f"unknown limiter keys: {sorted(unknown)}")
        self.config = {**LIMITER_DEFAULTS, **config}
        self.bucket = Bucket(float(self.config["rps"]), float(self.config["burst"]))
        self.answered = 0
        self.seen = 0
        self.log: list[dict[str, Any]] = []

    def headers(self) -> dict[str, str]:
        style, b = self.config["headers"], self.bucket
        limit = str(int(round(b.rps * 60)))
        if style == "openai":
            return {
                "x-ratelimit-limit-requests": limit,
                "x-ratelimit-remaining-requests": str(int(math.floor(b.tokens))),
                "x-ratelimit-reset-requests": go_duration(b.full_in_s()),
            }
        if style == "anthropic":
            full = datetime.now(timezone.utc) + timedelta(seconds=b.full_in_s())
            return {
                "anthropic-ratelimit-requests-limit": limit,
                "anthropic-ratelimit-requests-remaining": str(int(math.floor(b.tokens))),
                "anthropic-ratelimit-requests-reset": full.isoformat(timespec="milliseconds").replace(
                    "+00:00", "Z"
                ),
            }
        return {}

    def refusal(self) -> web.Response:
        style, wait = self.config["headers"], self.bucket.next_token_s()
        limit = int(round(self.bucket.rps * 60))
        if style == "gemini":
            return web.json_response(
                _gemini_error("GenerateRequestsPerMinutePerProjectPerModel-FreeTier", wait), status=429
            )
        headers = {**self.headers(), "Retry-After": str(max(1, math.ceil(wait)))}
        message = (
            f"Rate limit reached for {MODEL} in organization org-test on requests per min (RPM): Limit {limit}, "
            f"Used {limit}, Requested 1. Please try again in {go_duration(wait)}. Visit "
            "https://platform.openai.com/account/rate-limits to learn more."
        )
        if style == "anthropic":
            body = {
                "type": "error",
                "error": {
                    "type": "rate_limit_error",
                    "message": "Number of requests has exceeded your rate limit.",
                },
            }
            return web.json_response(body, status=429, headers=headers)
        if style == "none":
            return web.json_response(
                {"error": {"message": "Too many requests", "code": 429}},
                status=429,
                headers={"Retry-After": headers["Retry-After"]},
            )
        err = {"message": message, "type": "requests", "param": None, "code": "rate_limit_exceeded"}
        return web.json_response({"error": err}, status=429, headers=headers)

    def fault(self) -> web.Response | None:
        cfg = self.config
        if self.seen <= int(cfg["transient_402"]):
            body = {
                "error": {
                    "code": 402,
                    "message": "In-flight budget exhausted (test).",
                    "metadata": {"limit_source": "openrouter_in_flight_budget"},
                }
            }
            return web.json_response(
                body, status=402, headers={"Retry-After": str(cfg["transient_402_retry_after"])}
            )
        name = cfg["fault"]
        if name is None or self.answered < int(cfg["fault_after"]):
            return None
        if name == "openai_quota":
            err = {
                "message": "You exceeded your current quota, please check your plan and billing details. For more "
                "information on this error, read the docs: https://platform.openai.com/docs/guides/error-codes/api-errors.",
                "type": "insufficient_quota",
                "param": None,
                "code": "insufficient_quota",
            }
            return web.json_response({"error": err}, status=429)
        if name == "gemini_daily":
            return web.json_response(
                _gemini_error("GenerateRequestsPerDayPerProjectPerModel-FreeTier", 36.0), status=429
            )
        if name == "too_large":
            err = {
                "message": f"Request too large for {MODEL} in organization org-test on tokens per min (TPM): Limit 30000, "
                "Requested 32868. The input or output tokens must be reduced in order to run successfully. Visit "
                "https://platform.openai.com/account/rate-limits to learn more.",
                "type": "tokens",
                "param": None,
                "code": "rate_limit_exceeded",
            }
            return web.json_response({"error": err}, status=429)
        if name == "credits_402":
            body = {
                "error": {
                    "code": 402,
                    "message": "Insufficient credits (test).",
                    "metadata": {"limit_source": "openrouter_credits"},
                }
            }
            return web.json_response(body, status=402)
        raise ValueError(f"unknown fault {name!r}")

    def middleware(self):
        @web.middleware
        async def limit(request: web.Request, handler: Any) -> web.StreamResponse:
            if not request.path.endswith("/chat/completions"):
                return await handler(request)
            now = time.monotonic()
            self.seen += 1
            resp = self.fault()
            if resp is None and not self.bucket.take(now):
                resp = self.refusal()
            if resp is not None:
                self.log.append({"t": now, "status": resp.status})
                return resp
            answer = await handler(request)
            self.bucket.refill(time.monotonic())
            answer.headers.update(self.headers())
            self.answered += 1
            self.log.append({"t": now, "status": answer.status})
            return answer

        return limit

    def counters(self) -> dict[str, Any]:
        refused = sum(1 for e in self.log if e["status"] != 200)
        return {"answered": self.answered, "refused": refused, "requests": len(self.log), "log": self.log}


def _gemini_error(quota_id: str, wait_s: float) -> dict[str, Any]:
    return {
        "error": {
            "code": 429,
            "message": "You exceeded your current quota, please check your plan and billing details. (test)",
            "status": "RESOURCE_EXHAUSTED",
            "details": [
                {
                    "@type": "type.googleapis.com/google.rpc.QuotaFailure",
                    "violations": [
                        {
                            "quotaMetric": "generativelanguage.googleapis.com/generate_content_free_tier_requests",
                            "quotaId": quota_id,
                        }
                    ],
                },
                {
                    "@type": "type.googleapis.com/google.rpc.RetryInfo",
                    "retryDelay": f"{max(1, math.ceil(wait_s))}s",
                },
            ],
        }
    }


def build_limited_app(limiter: Limiter, state: ServerState) -> web.Application:
    app = build_app(state)
    app.middlewares.append(limiter.middleware())

    async def bucket(_request: web.Request) -> web.Response:
        return web.json_response(limiter.counters())

    app.router.add_get("/_bucket", bucket)
    return app


async def _start(limiter: Limiter, state: ServerState, host: str, port: int) -> tuple[web.AppRunner, int]:
    runner = web.AppRunner(
        build_limited_app(limiter, state), handler_cancellation=True, shutdown_timeout=0.5, access_log=None
    )
    await runner.setup()
    site = web.TCPSite(runner, host, port, backlog=1024)
    await site.start()
    return runner, int(runner.addresses[0][1])


class LimitedServer:
    """In-process, on its own event loop in a daemon thread: ``with LimitedServer({...}) as srv: srv.base_url``."""

    def __init__(
        self, limits: Mapping[str, Any] | None = None, server: Mapping[str, Any] | None = None
    ) -> None:
        self.limiter = Limiter(limits or {})
        self.state = ServerState(server or {})
        self.port = 0
        self._loop = asyncio.new_event_loop()
        self._thread: threading.Thread | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def __enter__(self) -> LimitedServer:
        ready = threading.Event()

        def run() -> None:
            asyncio.set_event_loop(self._loop)
            runner, self.port = self._loop.run_until_complete(
                _start(self.limiter, self.state, "127.0.0.1", 0)
            )
            ready.set()
            try:
                self._loop.run_forever()
            finally:
                self._loop.run_until_complete(runner.cleanup())
                self._loop.close()

        self._thread = threading.Thread(target=run, name="ratelimit-test-server", daemon=True)
        self._thread.start()
        ready.wait(10)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._thread is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)
        self.state.close()

    def configure(self, **limits: Any) -> None:
        """Replace the limiter's settings (a fresh, full bucket; counters start again)."""
        new = Limiter(limits)
        self._loop.call_soon_threadsafe(self.limiter.__dict__.update, new.__dict__)
        time.sleep(0.05)

    def counters(self) -> dict[str, Any]:
        return self.limiter.counters()


async def _serve(args: argparse.Namespace) -> None:
    config = json.loads(Path(args.config).read_text(encoding="utf-8")) if args.config else {}
    limiter = Limiter(config.get("limits") or {})
    state = ServerState(config.get("server") or {})
    runner, port = await _start(limiter, state, "127.0.0.1", args.port)
    if args.port_file:
        tmp = Path(f"{args.port_file}.tmp")
        tmp.write_text(f"{port}\n", encoding="utf-8")
        os.replace(tmp, args.port_file)
    print(port, flush=True)
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        asyncio.get_running_loop().add_signal_handler(sig, stop.set)
    try:
        await stop.wait()
    finally:
        await runner.cleanup()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="token-bucket OpenAI-compatible test endpoint")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--port-file")
    parser.add_argument("--config", help='JSON: {"limits": {...}, "server": {openai_test_server config}}')
    asyncio.run(_serve(parser.parse_args(argv)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
