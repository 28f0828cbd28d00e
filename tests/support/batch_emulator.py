"""A loopback emulator of OpenAI's Files and Batches APIs (the part `doccount-evaluate --batch` uses).

Each line of a batch is answered by an upstream OpenAI-compatible chat-completions server: by default an
in-process tests/openai_test_server.TestServer, so its answers, fault scripts and request log serve batch
runs as they serve online runs (``BatchEmulator(upstream=srv)`` to share one with an online run).

Sources (each rule below names the one it follows):
- [REF] OpenAI API reference, Batch and Files (the create-batch input_file_id text: a `.jsonl` file uploaded
  with purpose `batch`, at most 50,000 requests and 200 MB; completion_window only `24h`; the batch object
  and its statuses validating/failed/in_progress/finalizing/completed/expired/cancelling/cancelled), as
  mirrored by Azure's copy of it (learn.microsoft.com/en-us/azure/foundry/reference/rest/batches-create-batch)
  and by openai-python's generated `types/batch.py`.
- [OUT] openai-openapi `BatchRequestOutput`: per line `id`, `custom_id`, `response` {status_code,
  request_id, body} or null, `error` {code, message} or null; error codes `batch_expired` (not run before the
  window ended), `batch_cancelled` (cancelled before it ran), `request_timeout`.
- [FAQ] help.openai.com/en/articles/9197833 (Batch API FAQ): an expired batch cancels the remaining work and
  returns the work already done.
- [JSONL] BerriAI/litellm#37527: uploading a non-.jsonl file with purpose=batch gets HTTP 400
  "Invalid file format for Batch API. Must be .jsonl".
- [SIZE] bespokelabsai/curator#111 and #113: a batch input file above 200 MB gets HTTP 400
  "File is too large.".
- [PURPOSE] BerriAI/litellm#6582: an unknown purpose gets HTTP 400 "Invalid value for purpose.".
- [VALID] stdapi-ai/stdapi.ai#240: content errors are found after creation; the batch turns `failed` with
  `errors.data[]` items {code, line, message, param}; codes invalid_json_line, duplicate_custom_id,
  url_mismatch, model_mismatch, empty_file, too_many_tasks.
- [ERRFILE] ProjectTech4DevAI/kaapi-backend#723: requests that failed with an HTTP error go to the error
  file (`response.body.error.message`), counted in request_counts.failed; output_file_id is null when no
  request succeeded.
- [EXPIRE] BerriAI/litellm-docs#1571 and warmbly/warmbly#333: an expired batch keeps an output file with the
  lines finished in time; the unfinished ones are in the error file with code `batch_expired`.

Test hooks (not OpenAI's): config ``hold`` keeps every batch in_progress without answering until
``release()``; ``expire`` lists batch ordinals (1 = the first batch created) that expire after answering
``expire_after`` lines; ``error_lines`` maps a custom_id substring to an `error` object for that line;
``validation_error`` fails every batch's validation with that message; ``echo_key`` puts the request's
Authorization header into every error text (a hostile or debugging proxy); ``batch_fields`` is merged into
every batch object the API returns (create, retrieve, list, cancel), with ``{key}`` in any string replaced by
the caller's API key: a hostile server's wrong types, ids and escape sequences; ``status_suffix`` maps a
status to text appended to it in those objects (escape sequences in a live batch's status);
``duplicate_lines`` maps a custom_id substring to ``"error"`` (an error-file line for that request besides its
answer) or ``"answer"`` (a second, different 200 line in the output file): files a broken or hostile provider
writes. ``drip_polls`` makes GET /batches/{id} answer 200 and then drip its body a byte every 0.25 s for
minutes (a broken proxy or a hostile server).
"""

from __future__ import annotations

import asyncio
import copy
import itertools
import json
import sys
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

import aiohttp
from aiohttp import web

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/, for `support.*` when run as a script
from support.openai_test_server import TestServer  # noqa: E402

MAX_FILE_BYTES = 200 * 1000 * 1000  # [REF] 200 MB; [SIZE] checked at upload
MAX_LINES = 50_000  # [REF]
ENDPOINTS = ("/v1/chat/completions", "/v1/embeddings", "/v1/completions", "/v1/responses")  # [REF]
PURPOSES = ("assistants", "batch", "fine-tune", "vision", "user_data", "evals")  # [REF] files.create
TERMINAL = frozenset({"completed", "failed", "expired", "cancelled"})  # [REF]

DEFAULT_CONFIG: dict[str, Any] = {
    "api_key": None,
    "step_s": 0.05,
    "hold": False,
    "expire": [],
    "expire_after": 0,
    "error_lines": {},
    "validation_error": None,
    "echo_key": False,
    "max_file_bytes": MAX_FILE_BYTES,
    "max_lines": MAX_LINES,
    "line_concurrency": 8,
    "batch_fields": {},
    "status_suffix": {},
    "duplicate_lines": {},
    "drip_polls": False,
}


def hostile_obj(state: EmulatorState, obj: dict[str, Any], request: web.Request) -> dict[str, Any]:
    """A batch object with the test's `batch_fields` merged in, `{key}` replaced by the caller's key."""
    fields = state.config["batch_fields"]
    suffix = state.config["status_suffix"].get(obj.get("status"), "")
    obj = {**obj, "status": obj.get("status", "") + suffix} if suffix else obj
    if not fields:
        return obj
    key = request.headers.get("Authorization", "").removeprefix("Bearer ")
    text = json.dumps(fields).replace("{key}", json.dumps(key)[1:-1])
    return {**obj, **json.loads(text)}


def _error(status: int, message: str, param: str | None = None, code: str | None = None) -> web.Response:
    """OpenAI's error envelope ({"error": {message, type, param, code}})."""
    body = {"error": {"message": message, "type": "invalid_request_error", "param": param, "code": code}}
    return web.json_response(body, status=status)


def canonical(body: Any) -> bytes:
    """The JSON form the evaluator sends (sorted keys, no spaces, UTF-8), so the upstream sees those bytes."""
    return json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


@dataclass
class StoredFile:
    id: str
    filename: str
    purpose: str
    data: bytes
    created_at: int

    def obj(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "object": "file",
            "bytes": len(self.data),
            "created_at": self.created_at,
            "filename": self.filename,
            "purpose": self.purpose,
            "status": "processed",
            "expires_at": None,
            "status_details": None,
        }


@dataclass
class Batch:
    id: str
    ordinal: int
    input_file_id: str
    endpoint: str
    created_at: int
    auth: str
    status: str = "validating"
    times: dict[str, int] = field(default_factory=dict)
    errors: list[dict[str, Any]] | None = None
    output_file_id: str | None = None
    error_file_id: str | None = None
    total: int = 0
    results: dict[int, dict[str, Any]] = field(default_factory=dict)  # line index -> output line
    cancel: asyncio.Event = field(default_factory=asyncio.Event)

    def obj(self) -> dict[str, Any]:
        done = [r for r in self.results.values()]
        ok = sum(1 for r in done if _succeeded(r))
        return {
            "id": self.id,
            "object": "batch",
            "endpoint": self.endpoint,
            "errors": {"object": "list", "data": self.errors} if self.errors else None,
            "input_file_id": self.input_file_id,
            "completion_window": "24h",
            "status": self.status,
            "output_file_id": self.output_file_id,
            "error_file_id": self.error_file_id,
            "created_at": self.created_at,
            "expires_at": self.created_at + 24 * 3600,
            **{f"{k}_at": self.times.get(k) for k in _STAMPS},
            "request_counts": {"total": self.total, "completed": ok, "failed": len(done) - ok},
            "metadata": None,
        }


_STAMPS = ("in_progress", "finalizing", "completed", "failed", "expired", "cancelling", "cancelled")


def _succeeded(line: Mapping[str, Any]) -> bool:
    response = line.get("response")
    return line.get("error") is None and isinstance(response, dict) and response.get("status_code") == 200


class EmulatorState:
    """Files, batches and counters, shared by the handlers (one event loop)."""

    def __init__(self, config: Mapping[str, Any] | None, upstream_url: str) -> None:
        self.config = self._merged(config or {})
        self.upstream_url = upstream_url
        self.files: dict[str, StoredFile] = {}
        self.batches: dict[str, Batch] = {}
        self.counts = {
            "files_uploaded": 0,
            "batches_created": 0,
            "cancels": 0,
            "downloads": 0,
            "lists": 0,
            "max_live": 0,  # the most batches not yet terminal at one time
        }
        self.ids = itertools.count(1)
        self.release = asyncio.Event()
        self.tasks: set[asyncio.Task[None]] = set()

    @staticmethod
    def _merged(cfg: Mapping[str, Any]) -> dict[str, Any]:
        unknown = set(cfg) - set(DEFAULT_CONFIG)
        if unknown:
            raise ValueError(f"unknown config keys: {sorted(unknown)}")
        return {**copy.deepcopy(DEFAULT_CONFIG), **copy.deepcopy(dict(cfg))}

    def set_config(self, cfg: Mapping[str, Any]) -> None:
        self.config = self._merged({**{k: v for k, v in self.config.items()}, **cfg})
        if not self.config["hold"]:
            self.release.set()
        else:
            self.release.clear()

    def new_id(self, prefix: str) -> str:
        return f"{prefix}-{next(self.ids):06d}"

    def store(self, filename: str, purpose: str, data: bytes) -> StoredFile:
        f = StoredFile(self.new_id("file"), filename, purpose, data, int(time.time()))
        self.files[f.id] = f
        return f

    def snapshot(self) -> dict[str, Any]:
        return {
            "counts": dict(self.counts),
            "batches": [b.obj() for b in self.batches.values()],
            "files": [f.obj() for f in self.files.values()],
        }


def validate_lines(data: bytes, endpoint: str, max_lines: int) -> tuple[list[dict[str, Any]], list[dict]]:
    """[VALID] The input file's lines, and the errors that fail the batch (code, line, message, param)."""
    errors: list[dict[str, Any]] = []
    lines: list[dict[str, Any]] = []
    raw = [ln for ln in data.split(b"\n") if ln.strip()]
    if not raw:
        return [], [_batch_error("empty_file", None, "The input file is empty.")]
    if len(raw) > max_lines:  # [REF] at most 50,000 requests per file
        return [], [
            _batch_error("too_many_tasks", None, f"The input file has more than {max_lines} requests.")
        ]
    seen: set[str] = set()
    models: set[str] = set()
    for n, line in enumerate(raw, start=1):
        try:
            obj = json.loads(line)
            assert isinstance(obj, dict)
        except (ValueError, AssertionError):
            errors.append(_batch_error("invalid_json_line", n, "This line is not parseable as valid JSON."))
            continue
        cid = obj.get("custom_id")
        if cid in seen:  # [REF] custom_id must be unique within the batch
            errors.append(_batch_error("duplicate_custom_id", n, f"The custom_id {cid!r} is not unique."))
        seen.add(cid)
        if obj.get("url") != endpoint:
            errors.append(_batch_error("url_mismatch", n, "The url does not match the batch's endpoint."))
        models.add(str((obj.get("body") or {}).get("model")))
        if len(models) > 1:  # one model per input file
            errors.append(_batch_error("model_mismatch", n, "Every request of a batch must use one model."))
        lines.append(obj)
    return lines, errors


def _batch_error(code: str, line: int | None, message: str) -> dict[str, Any]:
    return {"code": code, "line": line, "message": message, "param": None}


def _jsonl(lines: list[dict[str, Any]]) -> bytes:
    return b"".join(json.dumps(x, ensure_ascii=False).encode("utf-8") + b"\n" for x in lines)


async def _answer(
    state: EmulatorState, session: aiohttp.ClientSession, batch: Batch, n: int, line: dict[str, Any]
) -> dict[str, Any]:
    """One line's output object [OUT]: the upstream's answer, or an error object."""
    cid = line.get("custom_id")
    out: dict[str, Any] = {
        "id": f"batch_req_{batch.id}_{n}",
        "custom_id": cid,
        "response": None,
        "error": None,
    }
    echo = f" {batch.auth}" if state.config["echo_key"] else ""
    for needle, error in (state.config["error_lines"] or {}).items():
        if needle in str(cid):
            out["error"] = {**error, "message": f"{error.get('message', '')}{echo}"}
            return out
    try:
        async with session.post(
            state.upstream_url + "/chat/completions",
            data=canonical(line.get("body")),
            headers={"Content-Type": "application/json"},
        ) as resp:
            status, raw = resp.status, await resp.read()
    except aiohttp.ClientError as exc:  # [OUT] request_timeout: the call to the model failed
        out["error"] = {"code": "request_timeout", "message": f"upstream failed: {type(exc).__name__}{echo}"}
        return out
    try:
        body = json.loads(raw)
    except ValueError:
        body = {"error": {"message": raw[:200].decode("utf-8", "replace")}}
    if status != 200 and echo and isinstance(body.get("error"), dict):
        body["error"]["message"] = f"{body['error'].get('message')}{echo}"
    out["response"] = {"status_code": status, "request_id": f"req_{batch.id}_{n}", "body": body}
    return out


async def run_batch(state: EmulatorState, batch: Batch) -> None:
    """The status sequence [REF]: validating -> (failed | in_progress -> finalizing -> completed), with
    expired and cancelling -> cancelled on the way."""
    cfg = state.config
    await asyncio.sleep(cfg["step_s"])
    lines, errors = validate_lines(state.files[batch.input_file_id].data, batch.endpoint, cfg["max_lines"])
    if cfg["validation_error"] and not errors:
        errors = [_batch_error("invalid_request", None, str(cfg["validation_error"]))]
    if errors:
        batch.status, batch.errors = "failed", errors
        batch.times["failed"] = int(time.time())
        return
    batch.total = len(lines)
    batch.status = "in_progress"
    batch.times["in_progress"] = int(time.time())
    await asyncio.sleep(cfg["step_s"])
    if cfg["hold"]:
        await _wait_or_cancel(state.release, batch)
    expiring = batch.ordinal in (cfg["expire"] or [])
    todo = lines[: cfg["expire_after"]] if expiring else lines
    await _answer_lines(state, batch, todo)
    if batch.cancel.is_set():
        await _finish(state, batch, lines, "cancelled", "batch_cancelled", "The batch was cancelled first.")
    elif expiring:  # [FAQ] [EXPIRE]
        await _finish(state, batch, lines, "expired", "batch_expired", "The completion window ended first.")
    else:
        batch.status = "finalizing"
        batch.times["finalizing"] = int(time.time())
        await asyncio.sleep(cfg["step_s"])
        await _finish(state, batch, lines, "completed", "", "")


async def _wait_or_cancel(release: asyncio.Event, batch: Batch) -> None:
    waiters = [asyncio.ensure_future(release.wait()), asyncio.ensure_future(batch.cancel.wait())]
    await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
    for w in waiters:
        w.cancel()


async def _answer_lines(state: EmulatorState, batch: Batch, lines: list[dict[str, Any]]) -> None:
    sem = asyncio.Semaphore(state.config["line_concurrency"])
    async with aiohttp.ClientSession() as session:

        async def one(n: int, line: dict[str, Any]) -> None:
            async with sem:
                if not batch.cancel.is_set():
                    batch.results[n] = await _answer(state, session, batch, n, line)

        await asyncio.gather(*(one(n, line) for n, line in enumerate(lines)))


async def _finish(
    state: EmulatorState, batch: Batch, lines: list[dict[str, Any]], status: str, code: str, message: str
) -> None:
    """Write the output file (successes) and the error file (failures, and the lines never run) [ERRFILE]."""
    for n, line in enumerate(lines):
        if n not in batch.results and code:
            err = {"code": code, "message": message}
            out = {"id": f"batch_req_{batch.id}_{n}", "custom_id": line.get("custom_id"), "response": None}
            batch.results[n] = {**out, "error": err}
    ordered = [batch.results[n] for n in sorted(batch.results)]
    ok = [r for r in ordered if _succeeded(r)]
    failed = [r for r in ordered if not _succeeded(r)]
    ok, failed = _with_duplicates(state, ok, failed)
    if ok:
        batch.output_file_id = state.store(f"{batch.id}_output.jsonl", "batch_output", _jsonl(ok)).id
    if failed:
        batch.error_file_id = state.store(f"{batch.id}_error.jsonl", "batch_output", _jsonl(failed)).id
    batch.status = status
    batch.times[status] = int(time.time())


def _with_duplicates(
    state: EmulatorState, ok: list[dict[str, Any]], failed: list[dict[str, Any]]
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The test hook `duplicate_lines`: a second line for a request that was answered."""
    for needle, kind in (state.config["duplicate_lines"] or {}).items():
        for line in [x for x in ok if needle in str(x.get("custom_id"))]:
            if kind == "error":
                err = {"code": "server_error", "message": "duplicate failure"}
                failed.append(
                    {
                        "id": line["id"] + "_dup",
                        "custom_id": line["custom_id"],
                        "response": None,
                        "error": err,
                    }
                )
            else:
                twin = copy.deepcopy(line)
                twin["response"]["body"]["choices"][0]["message"]["content"] = (
                    "a second answer <answer>99</answer>"
                )
                ok.append(twin)
    return ok, failed


def build_app(state: EmulatorState) -> web.Application:
    app = web.Application(client_max_size=1024 * 1024 * 1024, middlewares=[_auth_middleware(state)])
    for prefix in ("/v1", ""):
        app.router.add_post(f"{prefix}/files", _upload(state))
        app.router.add_get(f"{prefix}/files/{{id}}", _file_obj(state))
        app.router.add_get(f"{prefix}/files/{{id}}/content", _file_content(state))
        app.router.add_post(f"{prefix}/batches", _create(state))
        app.router.add_get(f"{prefix}/batches", _list(state))
        app.router.add_get(f"{prefix}/batches/{{id}}", _retrieve(state))
        app.router.add_post(f"{prefix}/batches/{{id}}/cancel", _cancel(state))
    return app


def _auth_middleware(state: EmulatorState) -> Any:
    @web.middleware
    async def auth(request: web.Request, handler: Any) -> web.StreamResponse:
        key = state.config["api_key"]
        if key and request.headers.get("Authorization") != f"Bearer {key}":
            return _error(401, "Incorrect API key provided.", code="invalid_api_key")
        return await handler(request)

    return auth


def _upload(state: EmulatorState) -> Any:
    async def handler(request: web.Request) -> web.Response:
        form = await request.post()
        purpose, upload = form.get("purpose"), form.get("file")
        if purpose not in PURPOSES:  # [PURPOSE]
            return _error(400, "Invalid value for purpose.", param="purpose")
        if not isinstance(upload, web.FileField):
            return _error(400, "Missing file.", param="file")
        data = upload.file.read()
        if purpose == "batch" and not str(upload.filename).endswith(".jsonl"):  # [JSONL]
            return _error(400, "Invalid file format for Batch API. Must be .jsonl")
        if purpose == "batch" and len(data) > state.config["max_file_bytes"]:  # [SIZE]
            return _error(400, "File is too large.")
        state.counts["files_uploaded"] += 1
        return web.json_response(state.store(str(upload.filename), str(purpose), data).obj())

    return handler


def _file_obj(state: EmulatorState) -> Any:
    async def handler(request: web.Request) -> web.Response:
        f = state.files.get(request.match_info["id"])
        if f is None:
            return _error(404, f"No such File object: {request.match_info['id']}", param="id")
        return web.json_response(f.obj())

    return handler


def _file_content(state: EmulatorState) -> Any:
    async def handler(request: web.Request) -> web.Response:
        f = state.files.get(request.match_info["id"])
        if f is None:
            return _error(404, f"No such File object: {request.match_info['id']}", param="id")
        state.counts["downloads"] += 1
        return web.Response(body=f.data, content_type="application/octet-stream")

    return handler


def _create(state: EmulatorState) -> Any:
    async def handler(request: web.Request) -> web.Response:
        body = await request.json()
        file_id = body.get("input_file_id")
        if body.get("completion_window") != "24h":  # [REF] only 24h
            return _error(400, "Invalid completion_window: only '24h' is supported.", "completion_window")
        if body.get("endpoint") not in ENDPOINTS:
            return _error(400, f"Invalid endpoint {body.get('endpoint')!r}.", param="endpoint")
        f = state.files.get(file_id)
        if f is None:
            return _error(404, f"No such File object: {file_id}", param="input_file_id")
        if f.purpose != "batch":  # [REF] the input file must be uploaded with purpose batch
            return _error(400, "The input file must be uploaded with purpose 'batch'.", "input_file_id")
        state.counts["batches_created"] += 1
        batch = Batch(
            id=state.new_id("batch"),
            ordinal=state.counts["batches_created"],
            input_file_id=file_id,
            endpoint=body["endpoint"],
            created_at=int(time.time()),
            auth=request.headers.get("Authorization", ""),
        )
        state.batches[batch.id] = batch
        live = sum(1 for b in state.batches.values() if b.status not in TERMINAL)
        state.counts["max_live"] = max(state.counts["max_live"], live)
        task = asyncio.create_task(run_batch(state, batch))
        state.tasks.add(task)
        task.add_done_callback(state.tasks.discard)
        return web.json_response(hostile_obj(state, batch.obj(), request))

    return handler


def _list(state: EmulatorState) -> Any:
    async def handler(request: web.Request) -> web.Response:
        state.counts["lists"] += 1
        data = [
            hostile_obj(state, b.obj(), request) for b in reversed(state.batches.values())
        ]  # newest first, as OpenAI lists
        return web.json_response({"object": "list", "data": data, "has_more": False})

    return handler


def _retrieve(state: EmulatorState) -> Any:
    async def handler(request: web.Request) -> web.Response:
        batch = state.batches.get(request.match_info["id"])
        if batch is None:
            return _error(404, f"No batch found with id '{request.match_info['id']}'.", param="id")
        if state.config["drip_polls"]:
            return await _drip(request)
        return web.json_response(hostile_obj(state, batch.obj(), request))

    return handler


async def _drip(request: web.Request) -> web.StreamResponse:
    resp = web.StreamResponse(
        status=200, headers={"Content-Type": "application/json", "Content-Length": "9999"}
    )
    await resp.prepare(request)
    for _ in range(1200):
        await resp.write(b" ")
        await asyncio.sleep(0.25)
    return resp


def _cancel(state: EmulatorState) -> Any:
    async def handler(request: web.Request) -> web.Response:
        batch = state.batches.get(request.match_info["id"])
        if batch is None:
            return _error(404, f"No batch found with id '{request.match_info['id']}'.", param="id")
        state.counts["cancels"] += 1
        if batch.status not in TERMINAL:  # [REF] cancelling, then cancelled once the running lines stop
            batch.status = "cancelling"
            batch.times["cancelling"] = int(time.time())
            batch.cancel.set()
        return web.json_response(hostile_obj(state, batch.obj(), request))

    return handler


class BatchEmulator:
    """In-process emulator on its own event loop in a daemon thread.

    ``with BatchEmulator({"step_s": 0.01}) as emu: ... emu.base_url ...``; ``emu.upstream`` is the chat server
    that answers the lines (its ``requests()`` log shows every body it received).
    """

    def __init__(self, config: Mapping[str, Any] | None = None, upstream: TestServer | None = None) -> None:
        self._own_upstream = upstream is None
        self.upstream = upstream or TestServer()
        self._config = dict(config or {})
        self.state: EmulatorState | None = None
        self.port = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._runner: web.AppRunner | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self) -> BatchEmulator:
        if self._own_upstream:
            self.upstream.start()
        ready = threading.Event()
        self._loop = loop = asyncio.new_event_loop()

        async def boot() -> None:
            self.state = EmulatorState(self._config, self.upstream.base_url)
            self.state.set_config({})
            self._runner = web.AppRunner(build_app(self.state), access_log=None)
            await self._runner.setup()
            site = web.TCPSite(self._runner, "127.0.0.1", 0)
            await site.start()
            self.port = int(self._runner.addresses[0][1])

        def run() -> None:
            asyncio.set_event_loop(loop)
            loop.run_until_complete(boot())
            ready.set()
            loop.run_forever()
            assert self._runner is not None
            loop.run_until_complete(self._runner.cleanup())
            loop.close()

        self._thread = threading.Thread(target=run, name="batch-emulator", daemon=True)
        self._thread.start()
        ready.wait(10)
        return self

    def _call(self, fn: Any) -> Any:
        """Run fn() on the emulator's loop and return its result (state is only touched there)."""
        assert self._loop is not None

        async def wrapped() -> Any:
            return fn()

        return asyncio.run_coroutine_threadsafe(wrapped(), self._loop).result(10)

    def update_config(self, **changes: Any) -> None:
        self._call(lambda: self.state.set_config(changes))  # type: ignore[union-attr]

    def release(self) -> None:
        """Let held batches run (config hold=False)."""
        self.update_config(hold=False)

    def snapshot(self) -> dict[str, Any]:
        """Counters (files_uploaded, batches_created, cancels, downloads, lists), every batch and file object."""
        return self._call(lambda: self.state.snapshot())  # type: ignore[union-attr]

    def file_bytes(self, file_id: str) -> bytes:
        return self._call(lambda: self.state.files[file_id].data)  # type: ignore[union-attr]

    def wait_until(self, predicate: Any, timeout: float = 30.0) -> dict[str, Any]:
        """Poll the snapshot until predicate(snapshot) holds; TimeoutError otherwise."""
        deadline = time.monotonic() + timeout
        while True:
            snap = self.snapshot()
            if predicate(snap):
                return snap
            if time.monotonic() > deadline:
                raise TimeoutError(f"emulator state never matched: {snap['counts']}")
            time.sleep(0.02)

    def stop(self) -> None:
        if self._loop is not None and self._thread is not None and self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)
        if self._own_upstream:
            self.upstream.stop()

    def __enter__(self) -> BatchEmulator:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
