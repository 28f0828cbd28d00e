"""OpenAI-compatible chat-completions test server with fault injection.

Used by loopback tests and benchmarks. Two ways to run it:

* in-process: ``with TestServer({"latency_s": 0.1}) as srv: ... srv.base_url ...``
  (own asyncio loop in a daemon thread);
* out-of-process: ``python tests/support/openai_test_server.py --port 0 --port-file F --config C.json``
  (prints the bound port as the first stdout line and writes it to ``--port-file``).

Endpoints: ``POST /v1/chat/completions``, ``GET /v1/models``, ``GET /health``, ``GET /version``,
and control endpoints ``GET /_requests``, ``POST /_config``, ``POST /_reset``. The ``/v1`` paths
are also served without the prefix.

Config keys (all optional; unknown keys are rejected):

``answers``          {image sha256 hex: reply text}
``default_reply``    reply when the image is not in ``answers``
``reasoning``        reasoning text attached to each normal answer
``reasoning_field``  ``"reasoning"`` (vLLM style, default) or ``"reasoning_content"``
``latency_s``        sleep before every response (default 0)
``served_model``     model id reported by /v1/models (default ``"test-model"``)
``strict_model``     404 when the request model differs from ``served_model``
``retry_after``      ``Retry-After`` value for the ``429`` fault (default 1)
``slow_s``           sleep of the ``slow`` fault (default 30)
``script``           {image sha256 hex or ``"*"``: [fault name or null, ...]} consumed in order
``fault_rate``       probability (0..1) of a random fault for unscripted requests
``faults``           fault names drawn uniformly when ``fault_rate`` fires
``seed``             seed of the server-owned ``random.Random``
``always_fault``     fault applied to every unscripted request
``keep_raw_bodies``  keep the raw request body (``raw_body``) in each request record
``usage_extra``      merged into every reply's ``usage`` (e.g. ``completion_tokens_details``)
``refuse_fields``    {request field: error message}: a request carrying that field gets a 400
                     ``invalid_request_error`` with that message (as providers refuse parameters)
``chat_paths``       paths answered as chat completions (default ``/v1/chat/completions`` and
                     ``/chat/completions``), or ``"*"`` for any path ending in ``/chat/completions``;
                     other POST paths get vLLM's (FastAPI's) 404 ``{"detail": "Not Found"}``
``seeded_replies``   list of reply texts; a request with an integer ``seed`` gets
                     ``seeded_replies[seed % len]`` (before ``answers``), like a sampler that a seed
                     makes repeatable; requests without a seed are answered as usual
``echo_key``         echo the request's Authorization header in every string a server sends: the
                     /v1/models ids and /version, and each answer's content, reasoning, id and
                     system_fingerprint (a hostile or debugging proxy)

Fault selection order: script entry for the request's image (``"*"`` is the fallback key for
requests whose image has no script entry; an explicit null answers normally), then
``always_fault``, then the seeded ``fault_rate`` draw. Changing the config resets script
progress and the random generator.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import copy
import hashlib
import json
import os
import random
import signal
import sys
import threading
import time
from collections import deque
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType
from typing import IO, Any

from aiohttp import web

__all__ = [
    "DEFAULT_CONFIG",
    "FAULTS",
    "ServerState",
    "TestServer",
    "build_app",
    "data_url",
    "image_sha256_of_body",
    "main",
    "sha256_hex",
    "write_config",
]

VERSION = "test-server-0"

DEFAULT_REPLY = "I count the regions.\n<answer>0</answer>"

DEFAULT_CONFIG: dict[str, Any] = {
    "answers": {},
    "default_reply": DEFAULT_REPLY,
    "reasoning": None,
    "reasoning_field": "reasoning",
    "latency_s": 0.0,
    "served_model": "test-model",
    "strict_model": False,
    "retry_after": 1,
    "slow_s": 30.0,
    "script": {},
    "fault_rate": 0.0,
    "faults": ["429", "500", "503"],
    "seed": 0,
    "always_fault": None,
    "keep_raw_bodies": False,
    "chat_paths": ["/v1/chat/completions", "/chat/completions"],
    "refuse_fields": {},
    "usage_extra": {},
    "seeded_replies": [],
    "echo_key": False,
}

# HTTP error faults: name -> (status, OpenAI error type).
_ERROR_FAULTS: dict[str, tuple[int, str]] = {
    "400": (400, "BadRequestError"),
    "401": (401, "AuthenticationError"),
    "404": (404, "NotFoundError"),
    "408": (408, "RequestTimeoutError"),
    "409": (409, "ConflictError"),
    "422": (422, "UnprocessableEntityError"),
    "425": (425, "TooEarlyError"),
    "429": (429, "RateLimitError"),
    "429_no_retry_after": (429, "RateLimitError"),
    "500": (500, "InternalServerError"),
    "502": (502, "BadGatewayError"),
    "503": (503, "ServiceUnavailableError"),
}

FAULTS: frozenset[str] = frozenset(
    set(_ERROR_FAULTS)
    | {
        "drop",
        "malformed_json",
        "empty_content",
        "null_content",
        "no_choices",
        "slow",
        "truncated",
        "echo_secret",
        "not_openai",
    }
)

_SENSITIVE_HEADERS = frozenset(
    {"authorization", "proxy-authorization", "cookie", "api-key", "x-api-key", "openai-api-key"}
)


# --------------------------------------------------------------------------- helpers


# Every retryable fault -> the (kind, HTTP status) that the evaluator's record shows in retry_errors.
RETRY_ERROR_OF_FAULT: dict[str, tuple[str, int | None]] = {
    "408": ("http_status", 408),
    "409": ("http_status", 409),
    "425": ("http_status", 425),
    "429": ("http_status", 429),
    "429_no_retry_after": ("http_status", 429),
    "500": ("http_status", 500),
    "502": ("http_status", 502),
    "503": ("http_status", 503),
    "drop": ("connection", None),
    "truncated": ("connection", None),
    "malformed_json": ("malformed_response", None),
    "no_choices": ("malformed_response", None),
    "empty_content": ("empty_content", None),
    "null_content": ("empty_content", None),
    "slow": ("timeout", None),
}


def sha256_hex(data: bytes | str) -> str:
    """Hex sha256 of bytes (str is UTF-8 encoded)."""
    if isinstance(data, str):
        data = data.encode("utf-8")
    return hashlib.sha256(data).hexdigest()


def data_url(data: bytes, mime: str = "image/png") -> str:
    """Build a base64 data URL, as a client would send an image."""
    return f"data:{mime};base64,{base64.b64encode(data).decode('ascii')}"


def _parse_data_url(url: str) -> dict[str, Any] | None:
    """Describe a base64 data URL as ``{"mime", "sha256", "len"}``; None if not one."""
    if not url.startswith("data:"):
        return None
    head, sep, payload = url.partition(",")
    if not sep or not head.endswith(";base64"):
        return None
    mime = head[len("data:") : -len(";base64")].split(";")[0] or None
    try:
        raw = base64.b64decode(payload, validate=False)
    except (ValueError, TypeError):
        return {"mime": mime, "sha256": None, "len": None, "error": "invalid base64"}
    return {"mime": mime, "sha256": sha256_hex(raw), "len": len(raw)}


def _redact_images(node: Any, found: list[str | None]) -> Any:
    """Copy ``node`` replacing every base64 data URL string by its descriptor."""
    if isinstance(node, dict):
        return {k: _redact_images(v, found) for k, v in node.items()}
    if isinstance(node, list):
        return [_redact_images(v, found) for v in node]
    if isinstance(node, str) and node.startswith("data:"):
        desc = _parse_data_url(node)
        if desc is not None:
            found.append(desc["sha256"])
            return desc
    return node


def _redacted_body(body: Any) -> tuple[Any, list[str | None]]:
    """Return the body with data URLs replaced, and the image sha256 list in document order."""
    found: list[str | None] = []
    return _redact_images(body, found), found


def image_sha256_of_body(body: Mapping[str, Any] | bytes | str) -> str | None:
    """sha256 (hex) of the decoded bytes of the first data-URL image of a chat request body."""
    if isinstance(body, (bytes, str)):
        body = json.loads(body)
    _, found = _redacted_body(body)
    return found[0] if found else None


def write_config(path: str | os.PathLike[str], **cfg: Any) -> Path:
    """Validate ``cfg`` and write it as a JSON config file for ``--config``; returns the path."""
    validate_config(cfg)
    p = Path(path)
    p.write_text(json.dumps(cfg, indent=2, sort_keys=True), encoding="utf-8")
    return p


def validate_config(cfg: Mapping[str, Any]) -> dict[str, Any]:
    """Check keys and fault names; return the full config merged over the defaults."""
    unknown = set(cfg) - set(DEFAULT_CONFIG)
    if unknown:
        raise ValueError(f"unknown config keys: {sorted(unknown)}")
    merged = copy.deepcopy(DEFAULT_CONFIG)
    merged.update(copy.deepcopy(dict(cfg)))
    names: list[Any] = list(merged["faults"] or [])
    if merged["always_fault"] is not None:
        names.append(merged["always_fault"])
    script = merged["script"] or {}
    if not isinstance(script, Mapping):
        raise ValueError("script must be a mapping image sha256 -> list of fault names")
    for seq in script.values():
        if not isinstance(seq, list):
            raise ValueError("script values must be lists of fault names or null")
        names.extend(n for n in seq if n is not None)
    bad = sorted({str(n) for n in names if n not in FAULTS})
    if bad:
        raise ValueError(f"unknown fault names: {bad}; known: {sorted(FAULTS)}")
    if not 0.0 <= float(merged["fault_rate"]) <= 1.0:
        raise ValueError("fault_rate must be within [0, 1]")
    if merged["fault_rate"] > 0 and not merged["faults"]:
        raise ValueError("fault_rate > 0 needs a non-empty faults list")
    if merged["reasoning_field"] not in ("reasoning", "reasoning_content"):
        raise ValueError("reasoning_field must be 'reasoning' or 'reasoning_content'")
    if not isinstance(merged["answers"] or {}, Mapping):
        raise ValueError("answers must be a mapping image sha256 -> text")
    return merged


# --------------------------------------------------------------------------- state


class ServerState:
    """Config, fault schedule and request log shared by the handlers (thread-safe)."""

    def __init__(
        self,
        config: Mapping[str, Any] | None = None,
        request_log: str | os.PathLike[str] | None = None,
    ) -> None:
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._records: list[dict[str, Any]] = []
        self.access: list[dict[str, Any]] = []  # every request's path and Authorization hash (api_key)
        self._seq = 0
        self._log: IO[str] | None = (
            open(request_log, "a", encoding="utf-8") if request_log is not None else None  # noqa: SIM115
        )
        self.config: dict[str, Any] = {}
        self._script: dict[str, deque[str | None]] = {}
        self._rng = random.Random(0)
        self.set_config(config or {})

    def set_config(self, cfg: Mapping[str, Any]) -> None:
        """Replace the config; resets script progress and the random generator."""
        merged = validate_config(cfg)
        with self._lock:
            self.config = merged
            self._script = {k: deque(v) for k, v in (merged["script"] or {}).items()}
            self._rng = random.Random(merged["seed"])

    def choose_fault(self, image_sha: str | None) -> str | None:
        """Pick the fault for one request (script, then always_fault, then fault_rate)."""
        with self._lock:
            cfg = self.config
            for key in (image_sha, "*"):
                if key is not None and self._script.get(key):
                    return self._script[key].popleft()
            if cfg["always_fault"] is not None:
                return str(cfg["always_fault"])
            rate = float(cfg["fault_rate"])
            if rate > 0 and self._rng.random() < rate:
                return str(self._rng.choice(list(cfg["faults"])))
            return None

    def add_record(self, record: dict[str, Any]) -> dict[str, Any]:
        """Number, store and log one request record."""
        with self._cond:
            self._seq += 1
            record = {"n": self._seq, **record}
            self._records.append(record)
            if self._log is not None:
                self._log.write(json.dumps(record, sort_keys=True) + "\n")
                self._log.flush()
            self._cond.notify_all()
        return record

    def requests(self) -> list[dict[str, Any]]:
        """Deep copy of the received request records."""
        with self._lock:
            return copy.deepcopy(self._records)

    def reset(self) -> None:
        """Forget received requests (sequence numbers keep counting)."""
        with self._lock:
            self._records.clear()

    def wait_for_requests(self, n: int, timeout: float = 10.0) -> list[dict[str, Any]]:
        """Block until at least ``n`` records exist; TimeoutError otherwise."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while len(self._records) < n:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"got {len(self._records)} requests, wanted {n}")
                self._cond.wait(left)
            return copy.deepcopy(self._records)

    def close(self) -> None:
        """Close the request log file."""
        with self._lock:
            if self._log is not None:
                self._log.close()
                self._log = None


# --------------------------------------------------------------------------- handlers


def _error(status: int, message: str, etype: str, headers: Mapping[str, str] | None = None) -> web.Response:
    """OpenAI-shaped error response."""
    body = {"error": {"message": message, "type": etype, "param": None, "code": status}}
    return web.json_response(body, status=status, headers=headers)


def _header_record(request: web.Request) -> dict[str, Any]:
    """Request headers without secrets; Authorization becomes a boolean plus sha256."""
    out: dict[str, Any] = {}
    for name, value in request.headers.items():
        low = name.lower()
        if low in _SENSITIVE_HEADERS:
            continue
        out[low] = value
    auth = request.headers.get("Authorization")
    out["has_authorization"] = auth is not None
    out["authorization_sha256"] = sha256_hex(auth) if auth is not None else None
    return out


def _usage(raw_len: int, text: str | None) -> dict[str, int]:
    """Rough token counts (4 bytes per token)."""
    prompt = max(1, raw_len // 4)
    completion = max(1, len(text or "") // 4) if text else 0
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


def _completion(
    n: int, model: str, content: str | None, raw_len: int, cfg: Mapping[str, Any], choices: bool = True
) -> dict[str, Any]:
    """Build a chat.completion object."""
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if cfg["reasoning"] is not None:
        message[cfg["reasoning_field"]] = cfg["reasoning"]
    return {
        "id": f"chatcmpl-{n}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "system_fingerprint": "test-fp",
        "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": "stop"}]
        if choices
        else [],
        "usage": {**_usage(raw_len, content), **copy.deepcopy(cfg["usage_extra"] or {})},
    }


def _echo_key(completion: dict[str, Any], auth: str) -> None:
    """The ``echo_key`` config: the Authorization header in every string of an answer."""
    message = completion["choices"][0]["message"]
    message["content"] = f"{auth} {message['content']}"
    for field in ("reasoning", "reasoning_content"):
        if message.get(field) is not None:
            message[field] = f"{message[field]} {auth}"
    completion["id"] = f"{completion['id']} {auth}"
    completion["system_fingerprint"] = auth


async def _stream(
    request: web.Request, body: Mapping[str, Any], completion: dict[str, Any]
) -> web.StreamResponse:
    """Send a completion as server-sent events (``stream: true`` requests)."""
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
    await resp.prepare(request)
    base = {k: completion[k] for k in ("id", "created", "model", "system_fingerprint")}
    base["object"] = "chat.completion.chunk"
    chunks: list[dict[str, Any]] = []
    for choice in completion["choices"]:
        delta = dict(choice["message"])
        chunks.append({**base, "choices": [{"index": 0, "delta": delta, "finish_reason": None}]})
        chunks.append({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
    if (body.get("stream_options") or {}).get("include_usage"):
        chunks.append({**base, "choices": [], "usage": completion["usage"]})
    for chunk in chunks:
        await resp.write(f"data: {json.dumps(chunk)}\n\n".encode())
    await resp.write(b"data: [DONE]\n\n")
    await resp.write_eof()
    return resp


async def _hang_up(request: web.Request) -> web.StreamResponse:
    """Close the connection and wait to be cancelled, so aiohttp writes nothing."""
    transport = request.transport
    if transport is not None:
        transport.close()
    await asyncio.sleep(3600)
    raise web.HTTPServiceUnavailable()  # pragma: no cover - cancelled long before


def _key_guard(state: ServerState, api_key: str) -> Any:
    """vLLM's token check (see tests/standin_server.py for where vLLM does it): a request to a model route
    without `Authorization: Bearer <api_key>` gets 401; /health and /version stay open. Every request's
    path and Authorization hash are kept in `state.access`."""

    @web.middleware
    async def guard(request: web.Request, handler: Any) -> web.StreamResponse:
        auth = request.headers.get("Authorization")
        scheme, _, given = (auth or "").partition(" ")
        open_path = request.path in ("/health", "/version") or request.path.startswith("/_")
        allowed = open_path or (scheme.lower() == "bearer" and given == api_key)
        with state._lock:
            state.access.append(
                {
                    "path": request.path,
                    "authorization_sha256": sha256_hex(auth) if auth else None,
                    "allowed": allowed,
                }
            )
        if not allowed:
            return web.json_response({"error": "Unauthorized"}, status=401)
        return await handler(request)

    return guard


def build_app(
    state: ServerState, client_max_size: int = 256 * 1024 * 1024, api_key: str | None = None
) -> web.Application:
    """aiohttp application serving the OpenAI-compatible and control endpoints (with `api_key`, its model
    routes answer only requests that carry it, as vLLM with VLLM_API_KEY)."""
    app = web.Application(
        client_max_size=client_max_size, middlewares=[_key_guard(state, api_key)] if api_key else []
    )

    async def chat(request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        received = time.time()
        cfg = state.config
        try:
            body: Any = json.loads(raw)
            if not isinstance(body, dict):
                raise ValueError("body is not a JSON object")
        except ValueError as exc:
            record: dict[str, Any] = {
                "time": received,
                "path": request.path,
                "headers": _header_record(request),
                "body": None,
                "body_sha256": sha256_hex(raw),
                "image_sha256": None,
                "fault": None,
                "error": f"invalid JSON body: {exc}",
            }
            if cfg["keep_raw_bodies"]:
                record["raw_body"] = raw.decode("utf-8", errors="replace")
            state.add_record(record)
            return _error(400, f"invalid JSON body: {exc}", "BadRequestError")
        redacted, images = _redacted_body(body)
        image_sha = images[0] if images else None
        fault = state.choose_fault(image_sha)
        record = {
            "time": received,
            "path": request.path,
            "query": dict(request.query),
            "headers": _header_record(request),
            "body": redacted,
            "body_sha256": sha256_hex(raw),
            "image_sha256": image_sha,
            "fault": fault,
        }
        if cfg["keep_raw_bodies"]:
            record["raw_body"] = raw.decode("utf-8", errors="replace")
        n = state.add_record(record)["n"]
        model = str(body.get("model", ""))

        if cfg["latency_s"]:
            await asyncio.sleep(float(cfg["latency_s"]))

        refused = sorted(set(cfg["refuse_fields"] or {}) & set(body))
        if refused:
            return _error(400, str(cfg["refuse_fields"][refused[0]]), "invalid_request_error")
        if fault is not None:
            resp = await _fault_response(request, fault, cfg, n, model, len(raw))
            if resp is not None:
                return resp

        if cfg["strict_model"] and model != cfg["served_model"]:
            return _error(404, f"The model `{model}` does not exist.", "NotFoundError")
        text = (cfg["answers"] or {}).get(image_sha) if image_sha else None
        seed = body.get("seed")
        if cfg["seeded_replies"] and isinstance(seed, int) and not isinstance(seed, bool):
            text = cfg["seeded_replies"][seed % len(cfg["seeded_replies"])]
        if text is None:
            text = cfg["default_reply"]
        completion = _completion(n, model, str(text), len(raw), cfg)
        if cfg["echo_key"]:
            _echo_key(completion, request.headers.get("Authorization", ""))
        if body.get("stream"):
            return await _stream(request, body, completion)
        return web.json_response(completion)

    async def models(request: web.Request) -> web.Response:
        ids = [state.config["served_model"]]
        if state.config["echo_key"]:
            ids.append(f"echo {request.headers.get('Authorization', '')}")
        data = [{"id": i, "object": "model", "created": 0, "owned_by": "test"} for i in ids]
        return web.json_response({"object": "list", "data": data})

    async def health(_request: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def version(request: web.Request) -> web.Response:
        if state.config["echo_key"]:
            return web.json_response({"version": VERSION, "auth": request.headers.get("Authorization", "")})
        return web.json_response({"version": VERSION})

    async def get_requests(_request: web.Request) -> web.Response:
        return web.json_response(state.requests())

    async def post_config(request: web.Request) -> web.Response:
        try:
            cfg = await request.json()
            if not isinstance(cfg, dict):
                raise ValueError("config must be a JSON object")
            state.set_config(cfg)
        except ValueError as exc:
            return _error(400, str(exc), "BadRequestError")
        return web.json_response({"ok": True, "config": state.config})

    async def post_reset(_request: web.Request) -> web.Response:
        state.reset()
        return web.json_response({"ok": True})

    async def any_post(request: web.Request) -> web.StreamResponse:
        paths = state.config["chat_paths"]
        if request.path in paths or (paths == "*" and request.path.endswith("/chat/completions")):
            return await chat(request)
        return web.json_response({"detail": "Not Found"}, status=404)

    for prefix in ("/v1", ""):
        app.router.add_get(f"{prefix}/models", models)
    app.router.add_get("/health", health)
    app.router.add_get("/version", version)
    app.router.add_get("/_requests", get_requests)
    app.router.add_post("/_config", post_config)
    app.router.add_post("/_reset", post_reset)
    app.router.add_post("/{tail:.*}", any_post)
    return app


async def _fault_response(
    request: web.Request, fault: str, cfg: Mapping[str, Any], n: int, model: str, raw_len: int
) -> web.StreamResponse | None:
    """Response for an injected fault; None means answer normally (after ``slow``)."""
    if fault == "429":
        return _error(
            429, "Rate limit reached (injected).", "RateLimitError", {"Retry-After": str(cfg["retry_after"])}
        )
    if fault == "echo_secret":
        auth = request.headers.get("Authorization", "")
        return _error(401, f"Incorrect API key provided: {auth}", "AuthenticationError")
    if fault in _ERROR_FAULTS:
        status, etype = _ERROR_FAULTS[fault]
        return _error(status, f"Injected fault {fault}.", etype)
    if fault == "drop":
        return await _hang_up(request)
    if fault == "malformed_json":
        return web.Response(
            body=b'{"id": "chatcmpl-broken", "choices": [{"message": {"content": "<answ',
            content_type="application/json",
        )
    if fault == "empty_content":
        return web.json_response(_completion(n, model, "", raw_len, cfg))
    if fault == "null_content":
        return web.json_response(_completion(n, model, None, raw_len, cfg))
    if fault == "no_choices":
        return web.json_response(_completion(n, model, None, raw_len, cfg, choices=False))
    if fault == "not_openai":
        return web.Response(
            text="<!DOCTYPE html><html><head><title>Welcome</title></head><body>Gateway page</body></html>",
            content_type="text/html",
        )
    if fault == "truncated":
        transport = request.transport
        if transport is not None:
            body = json.dumps(_completion(n, model, cfg["default_reply"], raw_len, cfg)).encode()
            head = (
                "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(body) + 1000}\r\nConnection: close\r\n\r\n"
            ).encode()
            transport.write(head + body[: len(body) // 2])
        return await _hang_up(request)
    if fault == "slow":
        await asyncio.sleep(float(cfg["slow_s"]))
        return None
    raise AssertionError(f"unhandled fault {fault}")  # pragma: no cover - validated earlier


# --------------------------------------------------------------------------- runners


async def _start_site(
    state: ServerState, host: str, port: int, shutdown_timeout: float, api_key: str | None = None
) -> tuple[web.AppRunner, int]:
    """Start the app on host:port; returns the runner and the bound port."""
    runner = web.AppRunner(
        build_app(state, api_key=api_key),
        handler_cancellation=True,
        shutdown_timeout=shutdown_timeout,
        access_log=None,
    )
    await runner.setup()
    site = web.TCPSite(runner, host, port, backlog=1024)
    await site.start()
    bound = int(runner.addresses[0][1])
    return runner, bound


def _url_host(host: str) -> str:
    """Host to put in URLs for a bind address."""
    if host in ("0.0.0.0", "", "::"):
        return "127.0.0.1"
    return f"[{host}]" if ":" in host else host


class TestServer:
    """In-process server on its own event loop in a daemon thread.

    ``with TestServer({"answers": {...}}) as srv: OpenAI(base_url=srv.base_url, ...)``.
    """

    __test__ = False  # not a pytest test class

    def __init__(
        self,
        config: Mapping[str, Any] | None = None,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        request_log: str | os.PathLike[str] | None = None,
        shutdown_timeout: float = 0.5,
        api_key: str | None = None,
    ) -> None:
        self.state = ServerState(config, request_log=request_log)
        self.api_key = api_key
        self.host = host
        self.port = port
        self._shutdown_timeout = shutdown_timeout
        self._loop: asyncio.AbstractEventLoop | None = None
        self._runner: web.AppRunner | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        """``http://host:port`` (no /v1)."""
        return f"http://{_url_host(self.host)}:{self.port}"

    @property
    def base_url(self) -> str:
        """OpenAI client base URL, ``http://host:port/v1``."""
        return f"{self.url}/v1"

    def start(self) -> TestServer:
        """Start serving; returns self once the port is bound."""
        if self._thread is not None:
            return self
        ready = threading.Event()
        error: list[BaseException] = []
        loop = asyncio.new_event_loop()
        self._loop = loop

        def run() -> None:
            asyncio.set_event_loop(loop)
            try:
                self._runner, self.port = loop.run_until_complete(
                    _start_site(self.state, self.host, self.port, self._shutdown_timeout, self.api_key)
                )
            except BaseException as exc:  # noqa: BLE001 - reported to the starting thread
                error.append(exc)
                ready.set()
                loop.close()
                return
            ready.set()
            try:
                loop.run_forever()
            finally:
                if self._runner is not None:
                    loop.run_until_complete(self._runner.cleanup())
                loop.run_until_complete(loop.shutdown_asyncgens())
                loop.close()

        self._thread = threading.Thread(target=run, name=f"openai-test-server-{id(self):x}", daemon=True)
        self._thread.start()
        ready.wait()
        if error:
            self._thread = None
            raise error[0]
        return self

    def stop(self) -> None:
        """Stop serving and close the request log (idempotent)."""
        thread, loop = self._thread, self._loop
        if thread is not None and loop is not None and thread.is_alive():
            loop.call_soon_threadsafe(loop.stop)
            thread.join(timeout=self._shutdown_timeout + 10)
        self._thread = None
        self.state.close()

    def set_config(self, config: Mapping[str, Any] | None = None, **overrides: Any) -> None:
        """Replace the whole config (``config`` updated by ``overrides``)."""
        self.state.set_config({**dict(config or {}), **overrides})

    def update_config(self, **changes: Any) -> None:
        """Change some config keys, keeping the others (resets script progress and rng)."""
        current = {k: v for k, v in self.state.config.items() if v != DEFAULT_CONFIG[k]}
        self.state.set_config({**current, **changes})

    @property
    def config(self) -> dict[str, Any]:
        """Current full config (copy)."""
        return copy.deepcopy(self.state.config)

    def requests(self) -> list[dict[str, Any]]:
        """Received chat request records."""
        return self.state.requests()

    def wait_for_requests(self, n: int, timeout: float = 10.0) -> list[dict[str, Any]]:
        """Block until ``n`` chat requests were received."""
        return self.state.wait_for_requests(n, timeout)

    def reset(self) -> None:
        """Clear the request records."""
        self.state.reset()

    def __enter__(self) -> TestServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


# --------------------------------------------------------------------------- CLI


async def _serve(args: argparse.Namespace) -> None:
    """Run until SIGINT/SIGTERM."""
    config: dict[str, Any] = {}
    if args.config:
        config = json.loads(Path(args.config).read_text(encoding="utf-8"))
    state = ServerState(config, request_log=args.request_log)
    runner, port = await _start_site(state, args.host, args.port, shutdown_timeout=1.0)
    print(port, flush=True)
    if args.port_file:
        tmp = Path(f"{args.port_file}.tmp")
        tmp.write_text(f"{port}\n", encoding="utf-8")
        os.replace(tmp, args.port_file)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        await stop.wait()
    finally:
        await runner.cleanup()
        state.close()


def main(argv: list[str] | None = None) -> int:
    """CLI entry point."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--host", default="127.0.0.1", help="bind address (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=0, help="port; 0 = ephemeral (default)")
    parser.add_argument("--port-file", help="write the bound port to this file (atomically)")
    parser.add_argument("--config", help="JSON config file (see module docstring)")
    parser.add_argument("--request-log", help="append one JSON line per received chat request")
    args = parser.parse_args(argv)
    asyncio.run(_serve(args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
