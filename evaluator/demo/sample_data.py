"""Deterministic synthetic document pages in the DocCount release schema.

Each page is rendered from scratch with Pillow: a running header, a title, paragraphs of
lorem-like text, and a mix of real photographs (the sample photos that ship inside
scikit-image), real matplotlib charts, drawn tables and drawn logo marks. Every page asks about
one target class; the answer is the number of regions of that class that the generator placed,
so pages that also contain other classes test that only the target class is counted.

The output is byte-identical for a given ``(n_pages, seed)`` on a given set of library versions
(fixed JPEG settings, no timestamps, per-page random generators derived from the seed).

CLI::

    python -m evaluator.demo.sample_data --output DIR [--pages N] [--seed S]
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import math
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from PIL import Image, ImageDraw, ImageFont

# --------------------------------------------------------------------------------------------
# Public constants
# --------------------------------------------------------------------------------------------

BRAND_LOGO = "Brand Logo"
PHOTOGRAPH = "Photograph"
TABLE = "Table"
CHART = "Chart / Graph"
CLASSES: tuple[str, ...] = (BRAND_LOGO, PHOTOGRAPH, TABLE, CHART)

#: Short class definitions written for the demo, in line with the DocCount paper (section 4.3).
CLASS_DEFINITIONS: dict[str, str] = {
    BRAND_LOGO: (
        "A graphic identity mark of a company, organization, product, service, certification, "
        "award or official programme. Count every separate mark once; a symbol together with the "
        "name lettering that belongs to it is a single logo, and ordinary text that only mentions "
        "a name is not a logo."
    ),
    PHOTOGRAPH: (
        "A camera-made or photorealistic picture of real people, animals, objects, places, "
        "products, scenes or textures, whether it sits in the page as a figure or fills a "
        "background. Count every separate picture once; charts, drawings, logos and tables are "
        "not photographs."
    ),
    TABLE: (
        "Information laid out as a grid of rows and columns (or cells) meant for lookup or "
        "comparison. Count every table once, header row included; its caption and the text "
        "around it are not separate tables."
    ),
    CHART: (
        "A self-contained picture of quantitative or categorical data that encodes values "
        "through position, length, area, angle, colour, points, lines, bars or slices, such as "
        "bar, line, pie and scatter plots. Count every plot panel once; tables and photographs "
        "are not charts."
    ),
}

_CLASS_NOUNS: dict[str, str] = {
    BRAND_LOGO: "brand logos",
    PHOTOGRAPH: "photographs",
    TABLE: "tables",
    CHART: "charts or graphs",
}

#: Question phrasings, rotated over the pages. ``{noun}`` is a plural noun phrase for the class,
#: ``{target_class}`` the class name as written in the release.
QUESTION_TEMPLATES: tuple[str, ...] = (
    "How many {noun} appear on this document page?",
    "Count the {noun} in this document image. How many are there?",
    "What is the total number of {target_class} regions on this page?",
    "How many distinct {target_class} instances does this page contain?",
    "Looking at the whole page, how many {noun} can you find?",
    "Determine how many regions of the class {target_class} are present in this document.",
    "How many separate {noun} are shown on the page?",
    "Give the number of {target_class} regions visible in this document page.",
)

PAGE_SIZE = (850, 1100)  # width, height in pixels (US-letter shape, ~100 dpi)
JPEG_QUALITY = 75
DATA_RELATIVE_PATH = Path("data") / "test-00000-of-00001.parquet"

#: The DocCount release schema (see the bundle contract). The image column is the Hugging Face
#: ``Image`` feature as stored in parquet.
IMAGE_STRUCT = pa.struct([pa.field("bytes", pa.binary()), pa.field("path", pa.string())])
RELEASE_SCHEMA = pa.schema(
    [
        pa.field("sample_id", pa.string()),
        pa.field("image", IMAGE_STRUCT),
        pa.field("image_sha256", pa.string()),
        pa.field("target_class", pa.string()),
        pa.field("class_definition", pa.string()),
        pa.field("question", pa.string()),
        pa.field("prompt", pa.string()),
        pa.field("answer", pa.int64()),
    ]
)
_HF_FEATURES = {
    "sample_id": {"dtype": "string", "_type": "Value"},
    "image": {"_type": "Image"},
    "image_sha256": {"dtype": "string", "_type": "Value"},
    "target_class": {"dtype": "string", "_type": "Value"},
    "class_definition": {"dtype": "string", "_type": "Value"},
    "question": {"dtype": "string", "_type": "Value"},
    "prompt": {"dtype": "string", "_type": "Value"},
    "answer": {"dtype": "int64", "_type": "Value"},
}

# --------------------------------------------------------------------------------------------
# Prompt template
# --------------------------------------------------------------------------------------------


def default_prompt_template_path() -> Path:
    """``prompts/counting_protocol.md`` at the repository root (next to the ``evaluator`` package)."""
    return Path(__file__).resolve().parents[2] / "prompts" / "counting_protocol.md"


def load_prompt_template(path: Path | None = None) -> str:
    """Read the prompt template verbatim (the whole file, as the rest of the bundle does)."""
    return Path(path or default_prompt_template_path()).read_text(encoding="utf-8")


def compose_prompt(template: str, target_class: str, class_definition: str, question: str) -> str:
    """Fill the ``str.format`` placeholders of the counting-protocol template."""
    return template.format(target_class=target_class, class_definition=class_definition, question=question)


# --------------------------------------------------------------------------------------------
# Page model
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Instance:
    """One counted region the generator placed: its class, box ``(x0, y0, x1, y1)`` and kind."""

    target_class: str
    box: tuple[int, int, int, int]
    kind: str


@dataclass(frozen=True)
class SamplePage:
    sample_id: str
    jpeg: bytes
    target_class: str
    question: str
    answer: int
    instances: tuple[Instance, ...] = field(default=())

    @property
    def image_path(self) -> str:
        return f"{self.sample_id}.jpg"


# --------------------------------------------------------------------------------------------
# Assets: fonts, words, photos
# --------------------------------------------------------------------------------------------

_LOREM_TEXT = (
    "lorem ipsum dolor sit amet consectetur adipiscing elit sed do eiusmod tempor incididunt ut "
    "labore et dolore magna aliqua enim ad minim veniam quis nostrud exercitation ullamco laboris "
    "nisi aliquip ex ea commodo consequat duis aute irure in reprehenderit voluptate velit esse "
    "cillum eu fugiat nulla pariatur excepteur sint occaecat cupidatat non proident sunt culpa qui "
    "officia deserunt mollit anim id est laborum curabitur pretium tincidunt lacus nulla gravida orci "
    "a odio nullam varius turpis et commodo pharetra est eros bibendum elit nec luctus magna felis "
    "sollicitudin mauris integer in mauris eu nibh euismod gravida duis ac tellus et risus vulputate "
    "vehicula donec lobortis risus a elit etiam tempor ut ullamcorper ligula eu tempor congue eros "
    "est euismod turpis id tincidunt sapien risus a quam maecenas fermentum consequat mi"
)
_LOREM = _LOREM_TEXT.split()
_TITLE_WORDS_TEXT = (
    "Annual Review Regional Outlook Market Survey Field Notes Quarterly Update Product Catalogue "
    "Research Brief Operations Summary Community Report Technical Bulletin Partner Newsletter "
    "Sustainability Progress Visitor Guide Program Overview"
)
_TITLE_WORDS = _TITLE_WORDS_TEXT.split()
_BRAND_SYLLABLES_TEXT = "nor vex ta lum ora qui bel den sa ri mo kan tel ver ax io zen pra lo cor"
_BRAND_SYLLABLES = _BRAND_SYLLABLES_TEXT.split()
_BRAND_SUFFIXES = ("Labs", "Group", "Systems", "Foundation", "Partners", "Institute", "Co.", "Works")
_TABLE_HEADERS = (
    ("Region", "Q1", "Q2", "Q3", "Q4", "Total"),
    ("Item", "Units", "Price", "Share", "Change", "Notes"),
    ("Site", "Visitors", "Staff", "Budget", "Score", "Rank"),
    ("Metric", "2021", "2022", "2023", "2024", "Target"),
    ("Sample", "Mean", "SD", "Min", "Max", "n"),
)
_ROW_LABELS_TEXT = (
    "North South East West Central Coastal Urban Rural Alpha Beta Gamma Delta Omega Harbor Valley"
)
_ROW_LABELS = _ROW_LABELS_TEXT.split()
_PALETTES = (
    ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b"),
    ("#264653", "#2a9d8f", "#e9c46a", "#f4a261", "#e76f51", "#8ab17d"),
    ("#003f5c", "#58508d", "#bc5090", "#ff6361", "#ffa600", "#7a5195"),
    ("#4c72b0", "#55a868", "#c44e52", "#8172b2", "#ccb974", "#64b5cd"),
)
_LOGO_COLORS = ("#c0392b", "#2471a3", "#1e8449", "#b9770e", "#7d3c98", "#117a65", "#283747", "#d35400")


@cache
def _font(name: str, size: int) -> ImageFont.FreeTypeFont:
    import matplotlib

    path = Path(matplotlib.get_data_path()) / "fonts" / "ttf" / name
    return ImageFont.truetype(str(path), size)


def _sans(size: int) -> ImageFont.FreeTypeFont:
    return _font("DejaVuSans.ttf", size)


def _sans_bold(size: int) -> ImageFont.FreeTypeFont:
    return _font("DejaVuSans-Bold.ttf", size)


def _serif_bold(size: int) -> ImageFont.FreeTypeFont:
    return _font("DejaVuSerif-Bold.ttf", size)


_PHOTO_NAMES = (
    "astronaut",
    "coffee",
    "chelsea",
    "rocket",
    "hubble_deep_field",
    "immunohistochemistry",
    "retina",
    "camera",
    "coins",
    "moon",
)


@cache
def _photo(name: str) -> np.ndarray:
    """A real photograph bundled inside scikit-image (no download needed), as an RGB array."""
    import skimage.data

    arr = np.asarray(getattr(skimage.data, name)())
    if arr.ndim == 2:
        arr = np.stack([arr] * 3, axis=-1)
    return np.ascontiguousarray(arr[..., :3].astype(np.uint8))


# --------------------------------------------------------------------------------------------
# Element renderers (each returns an RGB PIL image of exactly the requested size)
# --------------------------------------------------------------------------------------------


def _render_photo(rng: np.random.Generator, w: int, h: int) -> tuple[Image.Image, str]:
    name = _PHOTO_NAMES[int(rng.integers(len(_PHOTO_NAMES)))]
    arr = _photo(name)
    ph, pw = arr.shape[:2]
    aspect = h / w
    # Largest crop of the wanted aspect, then a random 65-100 % of it at a random position.
    cw = min(pw, ph / aspect)
    frac = float(rng.uniform(0.65, 1.0))
    cw = max(8, int(cw * frac))
    ch = max(8, int(cw * aspect))
    x0 = int(rng.integers(0, max(1, pw - cw + 1)))
    y0 = int(rng.integers(0, max(1, ph - ch + 1)))
    crop = Image.fromarray(arr[y0 : y0 + ch, x0 : x0 + cw])
    if rng.random() < 0.5:
        crop = crop.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
    return crop.resize((w, h), Image.Resampling.LANCZOS), f"photo:{name}"


def _render_chart(rng: np.random.Generator, w: int, h: int) -> tuple[Image.Image, str]:
    from matplotlib import rc_context
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    kinds = ("bar", "line", "pie", "scatter", "barh", "area", "grouped", "hist")
    kind = kinds[int(rng.integers(len(kinds)))]
    colors = _PALETTES[int(rng.integers(len(_PALETTES)))]
    title = " ".join(w_.capitalize() for w_ in rng.choice(_LOREM, size=int(rng.integers(2, 4))))
    with rc_context({"font.size": 7, "font.family": "DejaVu Sans", "axes.titlesize": 8}):
        fig = Figure(figsize=(w / 100, h / 100), dpi=100)
        canvas = FigureCanvasAgg(fig)
        ax = fig.add_subplot()
        n = int(rng.integers(4, 8))
        cats = [str(c)[:5].capitalize() for c in rng.choice(_ROW_LABELS, size=n, replace=False)]
        vals = rng.uniform(5, 100, size=n).round(1)
        if kind == "bar":
            ax.bar(cats, vals, color=colors[0])
        elif kind == "barh":
            ax.barh(cats, vals, color=colors[1])
        elif kind == "grouped":
            x = np.arange(n)
            for k in range(2):
                ax.bar(x + k * 0.4 - 0.2, rng.uniform(5, 100, size=n), width=0.4, color=colors[k])
            ax.set_xticks(x, cats)
        elif kind == "line":
            x = np.arange(2015, 2015 + n + 4)
            for k in range(int(rng.integers(1, 4))):
                y = np.cumsum(rng.normal(1.0, 3.0, size=x.size)) + 20
                ax.plot(x, y, color=colors[k], marker="o" if k == 0 else None, markersize=3)
        elif kind == "area":
            x = np.arange(12)
            ys = rng.uniform(1, 5, size=(3, 12)).cumsum(axis=1)
            ax.stackplot(x, ys, colors=colors[:3])
        elif kind == "scatter":
            m = int(rng.integers(25, 70))
            xs = rng.normal(0, 1, size=m)
            ys = 0.8 * xs + rng.normal(0, 0.6, size=m)
            ax.scatter(xs, ys, s=8, color=colors[2])
        elif kind == "hist":
            ax.hist(rng.normal(50, 12, size=300), bins=12, color=colors[3], edgecolor="white")
        else:  # pie
            ax.pie(vals[:5], labels=cats[:5], colors=colors[:5], startangle=90, textprops={"fontsize": 6})
            ax.set_aspect("equal")
        if kind != "pie":
            ax.grid(axis="y", linewidth=0.4, alpha=0.5)
            for side in ("top", "right"):
                ax.spines[side].set_visible(False)
            ax.tick_params(labelsize=6)
        ax.set_title(title)
        fig.tight_layout(pad=0.4)
        canvas.draw()
        arr = np.asarray(canvas.buffer_rgba())[..., :3].copy()
    img = Image.fromarray(arr)
    if img.size != (w, h):
        img = img.resize((w, h), Image.Resampling.LANCZOS)
    return img, f"chart:{kind}"


def _fit_text(draw: ImageDraw.ImageDraw, text: str, font: ImageFont.FreeTypeFont, width: float) -> str:
    if draw.textlength(text, font=font) <= width:
        return text
    while text and draw.textlength(text + "…", font=font) > width:
        text = text[:-1]
    return text + "…" if text else ""


def _render_table(rng: np.random.Generator, w: int, n_rows: int, n_cols: int) -> tuple[Image.Image, str]:
    row_h = int(rng.integers(19, 24))
    h = row_h * (n_rows + 1)
    img = Image.new("RGB", (w, h), "white")
    d = ImageDraw.Draw(img)
    style = ("grid", "rules", "zebra")[int(rng.integers(3))]
    header = _TABLE_HEADERS[int(rng.integers(len(_TABLE_HEADERS)))][:n_cols]
    head_fill = ("#dfe6ee", "#e8e8e8", "#d9ead3", "#fbe5d6")[int(rng.integers(4))]
    font, bold = _sans(11), _sans_bold(11)
    col_w = w / n_cols
    labels = list(rng.choice(_ROW_LABELS, size=n_rows, replace=n_rows > len(_ROW_LABELS)))
    d.rectangle([0, 0, w - 1, row_h - 1], fill=head_fill)
    for r in range(n_rows):
        if style == "zebra" and r % 2 == 1:
            d.rectangle([0, (r + 1) * row_h, w - 1, (r + 2) * row_h - 1], fill="#f2f4f7")
    for c in range(n_cols):
        x = c * col_w + 5
        d.text((x, (row_h - 12) / 2), _fit_text(d, header[c], bold, col_w - 8), font=bold, fill="#111111")
        for r in range(n_rows):
            if c == 0:
                cell = str(labels[r])
            elif rng.random() < 0.5:
                cell = f"{rng.uniform(0, 1000):,.1f}"
            else:
                cell = f"{int(rng.integers(0, 100))}%"
            y = (r + 1) * row_h + (row_h - 12) / 2
            d.text((x, y), _fit_text(d, cell, font, col_w - 8), font=font, fill="#222222")
    line = "#555555"
    if style == "grid":
        for r in range(n_rows + 2):
            y = min(r * row_h, h - 1)
            d.line([(0, y), (w - 1, y)], fill=line, width=1)
        for c in range(n_cols + 1):
            x = min(int(c * col_w), w - 1)
            d.line([(x, 0), (x, h - 1)], fill=line, width=1)
    else:
        d.line([(0, 0), (w - 1, 0)], fill="#222222", width=2)
        d.line([(0, row_h), (w - 1, row_h)], fill=line, width=1)
        d.line([(0, h - 2), (w - 1, h - 2)], fill="#222222", width=2)
        if style == "rules":
            for r in range(2, n_rows + 1):
                d.line([(0, r * row_h), (w - 1, r * row_h)], fill="#bbbbbb", width=1)
    return img, f"table:{style}"


def _brand_name(rng: np.random.Generator) -> str:
    n = int(rng.integers(2, 4))
    word = "".join(str(s) for s in rng.choice(_BRAND_SYLLABLES, size=n)).capitalize()
    if rng.random() < 0.5:
        word += " " + _BRAND_SUFFIXES[int(rng.integers(len(_BRAND_SUFFIXES)))]
    return word


def _logo_size(rng: np.random.Generator, h: int) -> tuple[int, str, bool]:
    """Width of a logo of height ``h`` (decided before drawing), its brand name and wordmark flag."""
    name = _brand_name(rng)
    wordmark = bool(rng.random() < 0.6)
    w = h
    if wordmark:
        font = _sans_bold(max(10, int(h * 0.34)))
        w += 6 + int(math.ceil(font.getlength(name)))
    return w, name, wordmark


def _draw_logo(
    rng: np.random.Generator, page: Image.Image, x: int, y: int, h: int, name: str, wordmark: bool
) -> tuple[tuple[int, int, int, int], str]:
    d = ImageDraw.Draw(page)
    color = _LOGO_COLORS[int(rng.integers(len(_LOGO_COLORS)))]
    shape = ("circle", "square", "hexagon", "diamond", "ring", "shield")[int(rng.integers(6))]
    box = [x, y, x + h - 1, y + h - 1]
    cx, cy, r = x + h / 2, y + h / 2, h / 2 - 1
    text_fill = "white"
    if shape == "circle":
        d.ellipse(box, fill=color)
    elif shape == "square":
        d.rounded_rectangle(box, radius=max(3, h // 6), fill=color)
    elif shape == "hexagon":
        d.regular_polygon((cx, cy, r), 6, fill=color)
    elif shape == "diamond":
        d.regular_polygon((cx, cy, r), 4, rotation=0, fill=color)
    elif shape == "ring":
        d.ellipse(box, outline=color, width=max(3, h // 9))
        text_fill = color
    else:  # shield
        d.polygon(
            [(x, y), (x + h - 1, y), (x + h - 1, y + h * 0.55), (cx, y + h - 1), (x, y + h * 0.55)],
            fill=color,
        )
    initials = "".join(p[0] for p in name.replace(".", "").split()[:2]).upper()
    if len(initials) == 1:
        initials = name[:2].upper()
    font = _sans_bold(max(9, int(h * (0.36 if shape != "diamond" else 0.28))))
    d.text(
        (cx, cy - (h * 0.04 if shape == "shield" else 0)), initials, font=font, fill=text_fill, anchor="mm"
    )
    x1 = x + h
    if wordmark:
        wfont = _sans_bold(max(10, int(h * 0.34)))
        d.text((x + h + 6, cy), name, font=wfont, fill=color, anchor="lm")
        x1 = x + h + 6 + int(math.ceil(wfont.getlength(name)))
    return (x, y, x1, y + h), f"logo:{shape}"


# --------------------------------------------------------------------------------------------
# Layout
# --------------------------------------------------------------------------------------------

_MARGIN = 56
_ROW_GAP = 14
_LINE_H = 17
_PARA_GAP = 9
_CAPTION_H = 18
_COL_GAP = 18


@dataclass
class _Row:
    """A horizontal band of the body: a drawing callback that returns the instances it placed."""

    height: int
    draw: Callable[[Image.Image, int, _Counter], list[Instance]]


def _words(rng: np.random.Generator, n: int) -> list[str]:
    return [str(w) for w in rng.choice(_LOREM, size=n)]


def _draw_paragraph(
    rng: np.random.Generator, page: Image.Image, x: int, y: int, width: int, n_lines: int
) -> None:
    d = ImageDraw.Draw(page)
    font = _sans(13)
    for i in range(n_lines):
        last = i == n_lines - 1
        target = width * (float(rng.uniform(0.35, 0.85)) if last else 1.0)
        words: list[str] = []
        while True:
            w = _words(rng, 1)[0]
            cand = " ".join([*words, w])
            if d.textlength(cand, font=font) > target:
                break
            words.append(w)
        if i == 0 and words:
            words[0] = words[0].capitalize()
        text = " ".join(words) + ("." if last else "")
        d.text((x, y + i * _LINE_H), text, font=font, fill="#1a1a1a")


def _caption(rng: np.random.Generator) -> str:
    return " ".join(_words(rng, int(rng.integers(3, 7)))).capitalize()


def _draw_caption(page: Image.Image, x: int, y: int, width: int, text: str) -> None:
    d = ImageDraw.Draw(page)
    font = _sans(11)
    d.text((x, y + 2), _fit_text(d, text, font, width), font=font, fill="#444444")


class _Counter:
    def __init__(self) -> None:
        self.figure = 0
        self.table = 0

    def next_figure(self) -> int:
        self.figure += 1
        return self.figure

    def next_table(self) -> int:
        self.table += 1
        return self.table


def _plan_rows(
    rng: np.random.Generator,
    figures: list[str],
    n_tables: int,
    n_logos: int,
    content_w: int,
    level: int,
) -> list[_Row]:
    """Plan body rows for the given elements; higher ``level`` packs them more tightly."""
    rows: list[_Row] = []
    scale = (1.0, 0.85, 0.7, 0.55)[level]

    # Figures (photographs and charts) in rows of 1-3, sometimes one figure beside text.
    i = 0
    while i < len(figures):
        remaining = len(figures) - i
        if level >= 2:
            k = min(3, remaining)
        else:
            k = min(remaining, int(rng.choice([1, 2, 2, 3, 3]) if level == 0 else rng.choice([2, 3])))
        group = figures[i : i + k]
        i += k
        wrap = k == 1 and level < 3 and rng.random() < 0.5
        if wrap:
            item_w = int(content_w * float(rng.uniform(0.42, 0.55)))
        elif k == 1:
            item_w = int(content_w * float(rng.uniform(0.5, 0.75)))
        else:
            item_w = (content_w - (k - 1) * _COL_GAP) // k
        aspects = [float(rng.uniform(0.55, 0.8)) for _ in group]
        item_h = max(90, min(250, int(item_w * max(aspects) * scale)))
        rows.append(_figure_row(rng, group, item_w, item_h, content_w, wrap))

    # Tables: one per row (full width or beside text), or 2-3 side by side when tight.
    t = 0
    while t < n_tables:
        remaining = n_tables - t
        if level >= 2:
            k = min(3 if remaining >= 3 and level == 3 else 2, remaining)
        else:
            k = min(remaining, int(rng.choice([1, 1, 2])))
        t += k
        max_rows = (8, 7, 5, 3)[level]
        n_rows = [int(rng.integers(3, max_rows + 1)) for _ in range(k)]
        wrap = k == 1 and level < 2 and rng.random() < 0.4
        if k == 1:
            tw = int(content_w * (float(rng.uniform(0.5, 0.6)) if wrap else float(rng.uniform(0.7, 1.0))))
        else:
            tw = (content_w - (k - 1) * _COL_GAP) // k
        n_cols = [int(rng.integers(3, 5 if tw < 400 else 7)) for _ in range(k)]
        rows.append(_table_row(rng, n_rows, n_cols, tw, content_w, wrap))

    # Logo strips of up to five marks.
    left = n_logos
    while left > 0:
        k = min(left, 5 if level >= 2 else int(rng.integers(2, 6)))
        left -= k
        rows.append(_logo_row(rng, k, content_w))

    order = rng.permutation(len(rows))
    return [rows[j] for j in order]


def _figure_row(
    rng: np.random.Generator,
    group: list[str],
    item_w: int,
    item_h: int,
    content_w: int,
    wrap: bool,
) -> _Row:
    image_left = bool(rng.random() < 0.5)
    height = item_h + _CAPTION_H

    def draw(page: Image.Image, y: int, numbers: _Counter) -> list[Instance]:
        # Rendering happens only for the accepted layout (charts are the slow part).
        renders = []
        for kind in group:
            if kind == PHOTOGRAPH:
                img, tag = _render_photo(rng, item_w, item_h)
            else:
                img, tag = _render_chart(rng, item_w, item_h)
            renders.append((kind, img, tag, _caption(rng)))
        out = []
        if wrap:
            x0 = _MARGIN if image_left else _MARGIN + content_w - item_w
            tx = _MARGIN + item_w + _COL_GAP if image_left else _MARGIN
            tw = content_w - item_w - _COL_GAP
            _draw_paragraph(rng, page, tx, y, tw, max(2, height // _LINE_H))
            xs = [x0]
        else:
            total = len(renders) * item_w + (len(renders) - 1) * _COL_GAP
            start = _MARGIN + (content_w - total) // 2
            xs = [start + j * (item_w + _COL_GAP) for j in range(len(renders))]
        for x, (kind, img, tag, cap) in zip(xs, renders, strict=True):
            page.paste(img, (x, y))
            out.append(Instance(kind, (x, y, x + item_w, y + item_h), tag))
            _draw_caption(page, x, y + item_h, item_w, f"Figure {numbers.next_figure()}. {cap}")
        return out

    return _Row(height, draw)


def _table_row(
    rng: np.random.Generator,
    n_rows: list[int],
    n_cols: list[int],
    tw: int,
    content_w: int,
    wrap: bool,
) -> _Row:
    renders = []
    for r, c in zip(n_rows, n_cols, strict=True):
        img, tag = _render_table(rng, tw, r, c)
        renders.append((img, tag, _caption(rng)))
    height = _CAPTION_H + max(img.size[1] for img, _, _ in renders)
    table_left = bool(rng.random() < 0.5)

    def draw(page: Image.Image, y: int, numbers: _Counter) -> list[Instance]:
        out = []
        if wrap:
            x0 = _MARGIN if table_left else _MARGIN + content_w - tw
            tx = _MARGIN + tw + _COL_GAP if table_left else _MARGIN
            _draw_paragraph(rng, page, tx, y, content_w - tw - _COL_GAP, max(2, height // _LINE_H))
            xs = [x0]
        else:
            total = len(renders) * tw + (len(renders) - 1) * _COL_GAP
            start = _MARGIN + (content_w - total) // 2
            xs = [start + j * (tw + _COL_GAP) for j in range(len(renders))]
        for x, (img, tag, cap) in zip(xs, renders, strict=True):
            _draw_caption(page, x, y, tw, f"Table {numbers.next_table()}. {cap}")
            page.paste(img, (x, y + _CAPTION_H))
            out.append(Instance(TABLE, (x, y + _CAPTION_H, x + tw, y + _CAPTION_H + img.size[1]), tag))
        return out

    return _Row(height, draw)


def _logo_row(rng: np.random.Generator, k: int, content_w: int) -> _Row:
    label = ("Supported by", "In partnership with", "Our members", "Certified by", "Sponsors")[
        int(rng.integers(5))
    ]
    h = int(rng.integers(40, 58))
    specs = [_logo_size(rng, h) for _ in range(k)]
    # Shrink until the marks fit on one line with a reasonable gap.
    while sum(s[0] for s in specs) + (k - 1) * 24 > content_w and h > 26:
        h -= 4
        specs = [(_logo_size_for(name, wm, h), name, wm) for _, name, wm in specs]
    height = _CAPTION_H + 6 + h

    def draw(page: Image.Image, y: int, numbers: _Counter) -> list[Instance]:
        d = ImageDraw.Draw(page)
        d.text((_MARGIN, y + 1), label, font=_sans_bold(12), fill="#555555")
        widths = [s[0] for s in specs]
        gap = max(24, (content_w - sum(widths)) // max(1, k + 1)) if k > 1 else 0
        total = sum(widths) + gap * (k - 1)
        x = _MARGIN + (content_w - total) // 2
        out = []
        for w, name, wordmark in specs:
            box, tag = _draw_logo(rng, page, x, y + _CAPTION_H + 6, h, name, wordmark)
            out.append(Instance(BRAND_LOGO, box, tag))
            x += w + gap
        return out

    return _Row(height, draw)


def _logo_size_for(name: str, wordmark: bool, h: int) -> int:
    if not wordmark:
        return h
    return h + 6 + int(math.ceil(_sans_bold(max(10, int(h * 0.34))).getlength(name)))


def _sample_counts(rng: np.random.Generator, target: str) -> dict[str, int]:
    """The target class gets 0..8 regions (mostly 1-6); other classes appear as distractors."""
    probs = np.array([0.04, 0.14, 0.17, 0.17, 0.15, 0.12, 0.1, 0.06, 0.05])
    counts = {target: int(rng.choice(len(probs), p=probs / probs.sum()))}
    for cls in CLASSES:
        if cls != target:
            counts[cls] = int(rng.integers(1, 3)) if rng.random() < 0.55 else 0
    return counts


def render_page(seed: int, index: int, target_class: str) -> tuple[Image.Image, list[Instance]]:
    """Render page ``index`` of the set with ``seed``; returns the page and the regions placed."""
    rng = np.random.default_rng([seed, index])
    counts = _sample_counts(rng, target_class)
    width, height = PAGE_SIZE
    content_w = width - 2 * _MARGIN
    page = Image.new("RGB", PAGE_SIZE, "white")
    d = ImageDraw.Draw(page)
    instances: list[Instance] = []

    # Header: running title on the left, optionally one logo on the right.
    n_logos = counts[BRAND_LOGO]
    header_logo = n_logos > 0 and rng.random() < 0.5
    y = _MARGIN - 20
    series = f"{_brand_name(rng)} · {' '.join(rng.choice(_TITLE_WORDS, size=2))}"
    d.text((_MARGIN, y + 6), series, font=_sans(11), fill="#666666")
    header_h = 24
    if header_logo:
        lh = 38
        lw, name, wm = _logo_size(rng, lh)
        box, tag = _draw_logo(rng, page, _MARGIN + content_w - lw, y - 6, lh, name, wm)
        instances.append(Instance(BRAND_LOGO, box, tag))
        n_logos -= 1
        header_h = lh + 2
    y += header_h
    d.line([(_MARGIN, y), (_MARGIN + content_w, y)], fill="#999999", width=1)
    y += 14

    # Title and subtitle.
    title = " ".join(str(w) for w in rng.choice(_TITLE_WORDS, size=int(rng.integers(2, 5))))
    d.text((_MARGIN, y), title, font=_serif_bold(int(rng.integers(22, 29))), fill="#111111")
    y += 36
    if rng.random() < 0.7:
        sub = " ".join(_words(rng, int(rng.integers(5, 10)))).capitalize()
        d.text((_MARGIN, y), sub, font=_sans(14), fill="#555555")
        y += 24
    y += 8

    # Footer.
    footer_y = height - _MARGIN + 8
    d.line([(_MARGIN, footer_y - 6), (_MARGIN + content_w, footer_y - 6)], fill="#bbbbbb", width=1)
    d.text((width // 2, footer_y + 6), f"Page {index + 1}", font=_sans(10), fill="#777777", anchor="mm")
    body_top, body_bottom = y, footer_y - 16

    figures = [PHOTOGRAPH] * counts[PHOTOGRAPH] + [CHART] * counts[CHART]
    figures = [figures[j] for j in rng.permutation(len(figures))]
    available = body_bottom - body_top
    rows: list[_Row] = []
    for level in range(4):
        rows = _plan_rows(rng, figures, counts[TABLE], n_logos, content_w, level)
        needed = sum(r.height for r in rows) + _ROW_GAP * (len(rows) + 1) + 2 * _LINE_H
        if needed <= available or level == 3:
            break
    spare = available - sum(r.height for r in rows) - _ROW_GAP * (len(rows) + 1)
    if spare < 0:
        raise RuntimeError(f"page {index}: layout does not fit ({counts})")

    # Spread the spare height as paragraphs (with the odd section heading) between the rows.
    slots = len(rows) + 1
    text_lines = [0] * slots
    heading = [False] * slots
    # Leave some of the spare height blank (real pages breathe; it also keeps the JPEGs small).
    budget = int(spare * float(rng.uniform(0.55, 0.9)))
    order = list(rng.permutation(slots))
    while True:
        placed = False
        for s in order:
            cost = 3 * _LINE_H + _PARA_GAP
            if budget >= cost:
                n = int(rng.integers(3, 7))
                n = min(n, (budget - _PARA_GAP) // _LINE_H)
                text_lines[s] += n
                budget -= n * _LINE_H + _PARA_GAP
                placed = True
                if not heading[s] and budget >= 26 and rng.random() < 0.3:
                    heading[s] = True
                    budget -= 26
        if not placed:
            break
    used = sum(n * _LINE_H for n in text_lines) + sum(26 for h in heading if h)
    used += sum(_PARA_GAP * math.ceil(n / 3) for n in text_lines)
    extra_gap = max(0, (spare - used) // (slots + 1))

    y = body_top
    section = 1
    numbers = _Counter()
    for s in range(slots):
        if heading[s]:
            d.text(
                (_MARGIN, y),
                f"{section}. {' '.join(_words(rng, 2)).title()}",
                font=_sans_bold(15),
                fill="#222",
            )
            section += 1
            y += 26
        lines = text_lines[s]
        while lines > 0:
            n = min(lines, int(rng.integers(3, 7)))
            if lines - n < 2:
                n = lines
            _draw_paragraph(rng, page, _MARGIN, y, content_w, n)
            y += n * _LINE_H + _PARA_GAP
            lines -= n
        y += extra_gap
        if s < len(rows):
            y += _ROW_GAP
            instances.extend(rows[s].draw(page, y, numbers))
            y += rows[s].height
    if y > body_bottom + 2:  # pragma: no cover - a generator bug
        raise RuntimeError(f"page {index}: body overflows ({y} > {body_bottom})")
    placed_counts = {c: sum(1 for i in instances if i.target_class == c) for c in CLASSES}
    if placed_counts != counts:  # pragma: no cover - a generator bug, never data dependent
        raise RuntimeError(f"page {index}: placed {placed_counts}, planned {counts}")
    return page, instances


def encode_jpeg(img: Image.Image, quality: int = JPEG_QUALITY) -> bytes:
    buf = io.BytesIO()
    img.save(buf, format="JPEG", quality=quality, optimize=False, progressive=False, subsampling=2)
    return buf.getvalue()


def render_sample_pages(n_pages: int = 40, seed: int = 0) -> list[SamplePage]:
    """Render ``n_pages`` pages; page ``i`` asks about ``CLASSES[i % 4]``."""
    if n_pages < 1:
        raise ValueError("n_pages must be >= 1")
    pages = []
    for i in range(n_pages):
        target = CLASSES[i % len(CLASSES)]
        img, instances = render_page(seed, i, target)
        qrng = np.random.default_rng([seed, i, 1])
        template = QUESTION_TEMPLATES[int(qrng.integers(len(QUESTION_TEMPLATES)))]
        question = template.format(noun=_CLASS_NOUNS[target], target_class=target)
        answer = sum(1 for inst in instances if inst.target_class == target)
        pages.append(
            SamplePage(
                sample_id=f"demo-{i + 1:04d}",
                jpeg=encode_jpeg(img),
                target_class=target,
                question=question,
                answer=answer,
                instances=tuple(instances),
            )
        )
    return pages


def pages_to_table(pages: Sequence[SamplePage], template: str) -> pa.Table:
    """Build the release-schema table (with Hugging Face feature metadata) for ``pages``."""
    columns = {
        "sample_id": [p.sample_id for p in pages],
        "image": [{"bytes": p.jpeg, "path": p.image_path} for p in pages],
        "image_sha256": [hashlib.sha256(p.jpeg).hexdigest() for p in pages],
        "target_class": [p.target_class for p in pages],
        "class_definition": [CLASS_DEFINITIONS[p.target_class] for p in pages],
        "question": [p.question for p in pages],
        "prompt": [
            compose_prompt(template, p.target_class, CLASS_DEFINITIONS[p.target_class], p.question)
            for p in pages
        ],
        "answer": [p.answer for p in pages],
    }
    meta = {b"huggingface": json.dumps({"info": {"features": _HF_FEATURES}}, sort_keys=True).encode()}
    return pa.Table.from_pydict(columns, schema=RELEASE_SCHEMA.with_metadata(meta))


def generate_sample_set(
    output_dir: Path, n_pages: int = 40, seed: int = 0, prompt_template: Path | None = None
) -> Path:
    """Write ``output_dir/data/test-00000-of-00001.parquet`` and return its path."""
    template = load_prompt_template(prompt_template)
    table = pages_to_table(render_sample_pages(n_pages, seed), template)
    path = Path(output_dir) / DATA_RELATIVE_PATH
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".parquet.tmp")
    pq.write_table(table, tmp, compression="snappy", row_group_size=len(table))
    tmp.replace(path)
    return path


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m evaluator.demo.sample_data",
        description="Write deterministic DocCount-style sample pages as data/test-00000-of-00001.parquet.",
    )
    parser.add_argument("--output", required=True, type=Path, help="output folder (data/ is created inside)")
    parser.add_argument("--pages", type=int, default=40, help="number of pages (default 40)")
    parser.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    parser.add_argument(
        "--prompt-template", type=Path, default=None, help="override prompts/counting_protocol.md"
    )
    args = parser.parse_args(argv)
    path = generate_sample_set(
        args.output, n_pages=args.pages, seed=args.seed, prompt_template=args.prompt_template
    )
    size = path.stat().st_size
    print(f"wrote {args.pages} pages to {path} ({size / 1e6:.2f} MB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
