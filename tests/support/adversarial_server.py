"""A hostile OpenAI-compatible endpoint: it puts the caller's API key into a field of its choosing.

Each request's image picks a `Placement`: which field carries the key, how (verbatim, JSON \\u escapes,
URL-encoded, base64 of `user:key` as a Basic auth header has it), whether the whole key or a piece of it,
and where: after `clip + shift` filler characters, so that the key straddles a clip length the evaluator
uses (120, 300, 400, 500, 1500, 2000 characters) when `shift` is a little under zero. Error-type fields are
served on a row's first attempt only, so the run goes on and its retries are recorded; reply fields are
served on every attempt. /v1/models and /version always carry the key too.

    with AdversarialServer() as srv:
        srv.place({image_sha256: Placement("usage.total_tokens", 500, -20)})
        ... evaluate against srv.base_url ...
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import json
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import quote

from aiohttp import web

MARK = "HOSTILE-VALUE-MARK"  # replaced in the serialised JSON by the encoded hostile text
CLIPS = (120, 300, 400, 500, 1500, 2000)
REPLY = "I count.\n<answer>1</answer>"

# reply fields: where in a 200 chat.completion the hostile value goes (MARK is a JSON string there)
REPLY_FIELDS = {
    "usage.prompt_tokens": lambda c: c["usage"].update(prompt_tokens=MARK),
    "usage.completion_tokens": lambda c: c["usage"].update(completion_tokens=MARK),
    "usage.total_tokens": lambda c: c["usage"].update(total_tokens=MARK),
    "usage.reasoning_tokens": lambda c: c["usage"].update(
        completion_tokens_details={"reasoning_tokens": MARK}
    ),
    "usage.cached_tokens": lambda c: c["usage"].update(prompt_tokens_details={"cached_tokens": MARK}),
    "usage.details_str": lambda c: c["usage"].update(completion_tokens_details=MARK),
    "usage.list": lambda c: c.update(usage=[MARK]),
    "finish_reason.str": lambda c: c["choices"][0].update(finish_reason=MARK),
    "finish_reason.list": lambda c: c["choices"][0].update(finish_reason=[MARK, "stop"]),
    "finish_reason.dict": lambda c: c["choices"][0].update(finish_reason={MARK: {"why": MARK}}),
    "id.str": lambda c: c.update(id=MARK),
    "id.dict": lambda c: c.update(id={"value": MARK, "n": [1, MARK]}),
    "model": lambda c: c.update(model=MARK),
    "system_fingerprint": lambda c: c.update(system_fingerprint=MARK),
    "system_fingerprint.list": lambda c: c.update(system_fingerprint=[MARK]),
    "logprobs": lambda c: c["choices"][0].update(logprobs={"content": [{"token": MARK, "logprob": -0.1}]}),
    "content": lambda c: c["choices"][0]["message"].update(content=f"{MARK} {REPLY}"),
    "content.parts": lambda c: c["choices"][0]["message"].update(
        content=[{"type": "text", "text": MARK}, {"type": "text", "text": f" {REPLY}"}]
    ),
    "reasoning": lambda c: c["choices"][0]["message"].update(reasoning=MARK),
    "reasoning.dict": lambda c: c["choices"][0]["message"].update(reasoning_content={"text": MARK}),
    "header": None,  # a normal reply with the key in its headers (handled in the app)
}
# first-attempt faults: the key in an error of each kind a server can send
ERROR_FIELDS = (
    "error.text_400",
    "error.html_500",
    "error.json_503",
    "error.message_dict_500",
    "error.usage_500",
    "error.nonjson_200",
    "error.empty_200",
    "error.rate_429",
    "error.retry_after_header_429",
    "error.quota_429",
    "error.billing_402",
)
FIELDS = tuple(REPLY_FIELDS) + ERROR_FIELDS
ENCODINGS = ("plain", "json_u", "url", "basic", "u_all", "uu_all", "pct_all")


@dataclass(frozen=True)
class Placement:
    field: str
    clip: int = 500
    shift: int = -10
    encoding: str = "plain"
    piece: tuple[int, int] | None = None  # a slice of the key instead of the whole key


def hostile_text(key: str, p: Placement) -> str:
    """The text that carries the key (not yet JSON-escaped), `clip + shift` characters in."""
    secret = key[p.piece[0] : p.piece[1]] if p.piece else key
    if p.encoding == "url":
        secret = quote(secret, safe="")
    elif p.encoding == "u_all":  # \u escapes as text: in a JSON string they are escaped twice
        secret = "".join(f"\\u{ord(ch):04x}" for ch in secret)
    elif p.encoding == "uu_all":
        secret = "".join(f"\\\\u{ord(ch):04x}" for ch in secret)
    elif p.encoding == "pct_all":  # every character percent-encoded, not only the reserved ones
        secret = "".join(f"%{b:02X}" for b in secret.encode())
    elif p.encoding == "basic":
        secret = "Basic " + base64.b64encode(f"user:{secret}".encode()).decode()
    return "p" * max(0, p.clip + p.shift) + secret + " (end)"


def json_with(obj: Any, key: str, p: Placement) -> str:
    """obj as JSON text with every MARK replaced by the hostile text (as \\u escapes for json_u)."""
    text = hostile_text(key, p)
    if p.encoding == "json_u":
        escaped = "".join(f"\\u{ord(ch):04x}" for ch in text)
    else:
        escaped = json.dumps(text)[1:-1]
    return json.dumps(obj).replace(MARK, escaped)


def completion(model: str) -> dict[str, Any]:
    message = {"role": "assistant", "content": REPLY}
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "model": model,
        "system_fingerprint": "fp",
        "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
    }


def _image_sha(body: Any) -> str | None:
    """The sha256 of the first data-URL image in a chat request."""
    for m in body.get("messages", []) if isinstance(body, dict) else []:
        for part in m.get("content") or [] if isinstance(m.get("content"), list) else []:
            url = (part.get("image_url") or {}).get("url", "") if isinstance(part, dict) else ""
            if url.startswith("data:") and "," in url:
                return hashlib.sha256(base64.b64decode(url.split(",", 1)[1])).hexdigest()
    return None


def _error_response(field: str, key: str, p: Placement) -> web.Response:
    plain = hostile_text(key, p)  # non-JSON bodies carry it as it is

    def js(obj: Any, status: int, headers: dict[str, str] | None = None) -> web.Response:
        return web.Response(
            text=json_with(obj, key, p), status=status, content_type="application/json", headers=headers
        )

    if field == "error.text_400":
        return web.Response(text=plain, status=400, content_type="text/plain")
    if field == "error.html_500":
        return web.Response(
            text=f"<html><body><h1>Error</h1>{plain}</body></html>", status=500, content_type="text/html"
        )
    if field == "error.json_503":
        return js({"error": {"message": MARK, "type": "server_error", "code": MARK}}, 503)
    if field == "error.message_dict_500":
        return js({"error": {"message": {"detail": MARK}}}, 500)
    if field == "error.usage_500":
        return js(
            {"error": {"message": "busy"}, "usage": {"total_tokens": MARK, "prompt_tokens": [MARK]}}, 500
        )
    if field == "error.nonjson_200":
        return web.Response(text=plain, status=200, content_type="text/plain")
    if field == "error.empty_200":
        c = completion("m")
        c["choices"][0]["message"]["content"] = ""
        c["choices"][0]["finish_reason"] = [MARK]
        return js(c, 200)
    if field == "error.rate_429":
        return js({"error": {"message": MARK, "type": "requests"}}, 429, {"Retry-After": "0"})
    if field == "error.retry_after_header_429":
        return js({"error": {"message": "slow down"}}, 429, {"Retry-After": plain[-300:]})
    if field == "error.quota_429":
        return js(
            {"error": {"message": MARK, "type": "insufficient_quota", "code": "insufficient_quota"}}, 429
        )
    if field == "error.billing_402":
        return js({"error": {"message": MARK, "code": 402}}, 402)
    raise AssertionError(field)


class AdversarialServer:
    """In-process hostile endpoint on its own event loop thread."""

    def __init__(self) -> None:
        self.placements: dict[str, Placement] = {}
        self.default: Placement | None = None
        self.models_encoding = "plain"
        self.served: dict[str, int] = {}
        self.auth_seen: set[str] = set()
        self._first: set[str] = set()
        self._loop = asyncio.new_event_loop()
        self._runner: web.AppRunner | None = None
        self.port = 0

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def place(
        self,
        placements: dict[str, Placement],
        default: Placement | None = None,
        models_encoding: str = "plain",
    ) -> None:
        """Which field each image's request carries the key in (the others: `default`, or none), and how
        /v1/models carries it."""
        self.placements, self.default, self.models_encoding = dict(placements), default, models_encoding
        self.served, self.auth_seen, self._first = {}, set(), set()

    def _key(self, request: web.Request) -> str:
        auth = request.headers.get("Authorization", "")
        self.auth_seen.add(hashlib.sha256(auth.encode()).hexdigest())
        return auth.removeprefix("Bearer ")

    async def chat(self, request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        key = self._key(request)
        body = json.loads(raw)
        sha = _image_sha(body)
        p = self.placements.get(sha or "", self.default)
        model = str(body.get("model", "m"))
        if p is None:
            return web.json_response(completion(model))
        first = sha not in self._first
        self._first.add(sha or "")
        if p.field in ERROR_FIELDS:
            if not first:
                return web.json_response(completion(model))
            self.served[p.field] = self.served.get(p.field, 0) + 1
            return _error_response(p.field, key, p)
        self.served[p.field] = self.served.get(p.field, 0) + 1
        c = completion(model)
        if p.field == "header":
            hostile = hostile_text(key, p)[-500:]
            headers = {
                "x-request-id": hostile,
                "x-ratelimit-limit-requests": hostile,
                "openai-model": hostile,
            }
            return web.Response(text=json.dumps(c), content_type="application/json", headers=headers)
        REPLY_FIELDS[p.field](c)
        return web.Response(text=json_with(c, key, p), content_type="application/json")

    async def models(self, request: web.Request) -> web.Response:
        key = self._key(request)
        p = Placement("models", 300, -12, self.models_encoding)
        data = [{"id": "test-model"}, {"id": MARK}, {"id": {"x": MARK}}]
        return web.Response(
            text=json_with({"object": "list", "data": data}, key, p), content_type="application/json"
        )

    async def version(self, request: web.Request) -> web.Response:
        key = self._key(request)
        p = Placement("version", 120, -8)
        return web.Response(
            text=json_with({"version": MARK, "build": [MARK]}, key, p), content_type="application/json"
        )

    async def _start(self) -> None:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_post("/v1/chat/completions", self.chat)
        app.router.add_get("/v1/models", self.models)
        app.router.add_get("/version", self.version)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.5)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = int(self._runner.addresses[0][1])

    def __enter__(self) -> AdversarialServer:
        ready = threading.Event()

        def run() -> None:
            asyncio.set_event_loop(self._loop)
            self._loop.run_until_complete(self._start())
            ready.set()
            self._loop.run_forever()

        self._thread = threading.Thread(target=run, name="adversarial-server", daemon=True)
        self._thread.start()
        ready.wait(10)
        return self

    def __exit__(self, *exc: object) -> None:
        async def stop() -> None:
            if self._runner is not None:
                await self._runner.cleanup()

        asyncio.run_coroutine_threadsafe(stop(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)


# --- Routes that drip or never end (trust3 #5) --------------------------------------------------------
# A plain threaded HTTP server whose routes each answer in one of these ways: "ok" (a normal answer),
# "drip" (200 and headers, then a byte every DRIP_EVERY_S for minutes), "drip_headers" (the status line
# and headers a byte at a time), or "huge" (a body of huge_bytes, generated as it is written, never built).
DRIP_EVERY_S = 0.25
OK_BODIES = {
    "/v1/models": {"object": "list", "data": [{"id": "m", "object": "model"}]},
    "/version": {"version": "0.0-test"},
    "/health": {},
}


class _RouteHandler(BaseHTTPRequestHandler):
    server: RouteServer  # type: ignore[assignment]

    def log_message(self, *args: object) -> None:
        pass

    def do_GET(self) -> None:  # noqa: N802 - the http.server name
        self._answer()

    def do_POST(self) -> None:  # noqa: N802
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self._answer()

    def _answer(self) -> None:
        path = self.path.split("?")[0]
        self.server.hits.append(path)
        how = self.server.routes.get(path, "ok")
        with contextlib.suppress(OSError):  # the client gave up: the point of these routes
            getattr(self, f"_{how}")(path)

    def _ok(self, path: str) -> None:
        if path == "/v1/chat/completions":
            body = json.dumps(completion("m")).encode()
        else:
            body = json.dumps(OK_BODIES.get(path, {})).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _drip(self, path: str) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", "100000")
        self.end_headers()
        self.wfile.flush()
        for _ in range(int(300 / DRIP_EVERY_S)):
            self.wfile.write(b" ")
            self.wfile.flush()
            time.sleep(DRIP_EVERY_S)

    def _drip_headers(self, path: str) -> None:
        for byte in b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nX-Slow: " + b"a" * 2000:
            self.wfile.write(bytes([byte]))
            self.wfile.flush()
            time.sleep(DRIP_EVERY_S)

    def _huge(self, path: str) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(self.server.huge_bytes))
        self.end_headers()
        self.wfile.write(b'{"object": "list", "data": [{"id": "')
        chunk = b"m" * 2**20
        for _ in range(self.server.huge_bytes // len(chunk)):
            self.wfile.write(chunk)


class RouteServer(ThreadingHTTPServer):
    """`with RouteServer({"/v1/models": "drip"}) as srv:` ... srv.base_url (ends in /v1), srv.hits."""

    daemon_threads = True

    def __init__(self, routes: dict[str, str], huge_bytes: int = 2 * 2**30) -> None:
        super().__init__(("127.0.0.1", 0), _RouteHandler)
        self.routes, self.huge_bytes = routes, huge_bytes
        self.hits: list[str] = []

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/v1"

    def __enter__(self) -> RouteServer:
        threading.Thread(target=self.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()
        self.server_close()
