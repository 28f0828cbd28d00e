"""The body of a sample page as horizontal rows (figures, tables, logos) and the text between them."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import numpy as np
from PIL import Image, ImageDraw

from evaluator.demo.page_elements import (
    LOREM,
    draw_logo,
    fit_text,
    logo_size,
    logo_width,
    render_chart,
    render_photo,
    render_table,
    sans,
    sans_bold,
)
from evaluator.demo.page_model import BRAND_LOGO, PHOTOGRAPH, TABLE, Instance

# Layout

MARGIN = 56
ROW_GAP = 14
LINE_H = 17
PARA_GAP = 9
_CAPTION_H = 18
_COL_GAP = 18


@dataclass
class Row:
    """A horizontal band of the body: a drawing callback that returns the instances it placed."""

    height: int
    draw: Callable[[Image.Image, int, Counter], list[Instance]]


def lorem_words(rng: np.random.Generator, n: int) -> list[str]:
    return [str(w) for w in rng.choice(LOREM, size=n)]


def draw_paragraph(
    rng: np.random.Generator, page: Image.Image, x: int, y: int, width: int, n_lines: int
) -> None:
    d = ImageDraw.Draw(page)
    font = sans(13)
    for i in range(n_lines):
        last = i == n_lines - 1
        target = width * (float(rng.uniform(0.35, 0.85)) if last else 1.0)
        words: list[str] = []
        while True:
            w = lorem_words(rng, 1)[0]
            cand = " ".join([*words, w])
            if d.textlength(cand, font=font) > target:
                break
            words.append(w)
        if i == 0 and words:
            words[0] = words[0].capitalize()
        text = " ".join(words) + ("." if last else "")
        d.text((x, y + i * LINE_H), text, font=font, fill="#1a1a1a")


def _caption(rng: np.random.Generator) -> str:
    return " ".join(lorem_words(rng, int(rng.integers(3, 7)))).capitalize()


def _draw_caption(page: Image.Image, x: int, y: int, width: int, text: str) -> None:
    d = ImageDraw.Draw(page)
    font = sans(11)
    d.text((x, y + 2), fit_text(d, text, font, width), font=font, fill="#444444")


@dataclass
class Counter:
    """The running figure and table numbers of a page's captions."""

    figures: Iterator[int] = field(default_factory=lambda: itertools.count(1))
    tables: Iterator[int] = field(default_factory=lambda: itertools.count(1))


def plan_rows(
    rng: np.random.Generator, figures: list[str], n_tables: int, n_logos: int, content_w: int, level: int
) -> list[Row]:
    """Plan body rows for the given elements; higher ``level`` packs them more tightly."""
    # figures, tables, logos in this order: each draws from `rng`, so the order fixes the pages
    rows = _figure_rows(rng, figures, content_w, level)
    rows += _table_rows(rng, n_tables, content_w, level)
    rows += _logo_rows(rng, n_logos, content_w, level)
    order = rng.permutation(len(rows))
    return [rows[j] for j in order]


def _figure_rows(rng: np.random.Generator, figures: list[str], content_w: int, level: int) -> list[Row]:
    """Figures (photographs and charts) in rows of 1-3, sometimes one figure beside text."""
    rows: list[Row] = []
    scale = (1.0, 0.85, 0.7, 0.55)[level]
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
    return rows


def _table_rows(rng: np.random.Generator, n_tables: int, content_w: int, level: int) -> list[Row]:
    """Tables: one per row (full width or beside text), or 2-3 side by side when tight."""
    rows: list[Row] = []
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
    return rows


def _logo_rows(rng: np.random.Generator, n_logos: int, content_w: int, level: int) -> list[Row]:
    """Logo strips of up to five marks."""
    rows: list[Row] = []
    left = n_logos
    while left > 0:
        k = min(left, 5 if level >= 2 else int(rng.integers(2, 6)))
        left -= k
        rows.append(_logo_row(rng, k, content_w))
    return rows


def _figure_row(
    rng: np.random.Generator, group: list[str], item_w: int, item_h: int, content_w: int, wrap: bool
) -> Row:
    image_left = bool(rng.random() < 0.5)
    height = item_h + _CAPTION_H

    def draw(page: Image.Image, y: int, numbers: Counter) -> list[Instance]:
        # Rendering happens only for the accepted layout (charts are the slow part).
        renders = []
        for kind in group:
            if kind == PHOTOGRAPH:
                img, tag = render_photo(rng, item_w, item_h)
            else:
                img, tag = render_chart(rng, item_w, item_h)
            renders.append((kind, img, tag, _caption(rng)))
        out = []
        if wrap:
            x0 = MARGIN if image_left else MARGIN + content_w - item_w
            tx = MARGIN + item_w + _COL_GAP if image_left else MARGIN
            tw = content_w - item_w - _COL_GAP
            draw_paragraph(rng, page, tx, y, tw, max(2, height // LINE_H))
            xs = [x0]
        else:
            total = len(renders) * item_w + (len(renders) - 1) * _COL_GAP
            start = MARGIN + (content_w - total) // 2
            xs = [start + j * (item_w + _COL_GAP) for j in range(len(renders))]
        for x, (kind, img, tag, cap) in zip(xs, renders, strict=True):
            page.paste(img, (x, y))
            out.append(Instance(kind, (x, y, x + item_w, y + item_h), tag))
            _draw_caption(page, x, y + item_h, item_w, f"Figure {next(numbers.figures)}. {cap}")
        return out

    return Row(height, draw)


def _table_row(
    rng: np.random.Generator, n_rows: list[int], n_cols: list[int], tw: int, content_w: int, wrap: bool
) -> Row:
    renders = []
    for r, c in zip(n_rows, n_cols, strict=True):
        img, tag = render_table(rng, tw, r, c)
        renders.append((img, tag, _caption(rng)))
    height = _CAPTION_H + max(img.size[1] for img, _, _ in renders)
    table_left = bool(rng.random() < 0.5)

    def draw(page: Image.Image, y: int, numbers: Counter) -> list[Instance]:
        out = []
        if wrap:
            x0 = MARGIN if table_left else MARGIN + content_w - tw
            tx = MARGIN + tw + _COL_GAP if table_left else MARGIN
            draw_paragraph(rng, page, tx, y, content_w - tw - _COL_GAP, max(2, height // LINE_H))
            xs = [x0]
        else:
            total = len(renders) * tw + (len(renders) - 1) * _COL_GAP
            start = MARGIN + (content_w - total) // 2
            xs = [start + j * (tw + _COL_GAP) for j in range(len(renders))]
        for x, (img, tag, cap) in zip(xs, renders, strict=True):
            _draw_caption(page, x, y, tw, f"Table {next(numbers.tables)}. {cap}")
            page.paste(img, (x, y + _CAPTION_H))
            out.append(Instance(TABLE, (x, y + _CAPTION_H, x + tw, y + _CAPTION_H + img.size[1]), tag))
        return out

    return Row(height, draw)


def _logo_row(rng: np.random.Generator, k: int, content_w: int) -> Row:
    label = ("Supported by", "In partnership with", "Our members", "Certified by", "Sponsors")[
        int(rng.integers(5))
    ]
    h = int(rng.integers(40, 58))
    specs = [logo_size(rng, h) for _ in range(k)]
    # Shrink until the marks fit on one line with a reasonable gap.
    while sum(s[0] for s in specs) + (k - 1) * 24 > content_w and h > 26:
        h -= 4
        specs = [(logo_width(name, wm, h), name, wm) for _, name, wm in specs]
    height = _CAPTION_H + 6 + h

    def draw(page: Image.Image, y: int, numbers: Counter) -> list[Instance]:
        d = ImageDraw.Draw(page)
        d.text((MARGIN, y + 1), label, font=sans_bold(12), fill="#555555")
        widths = [s[0] for s in specs]
        gap = max(24, (content_w - sum(widths)) // max(1, k + 1)) if k > 1 else 0
        total = sum(widths) + gap * (k - 1)
        x = MARGIN + (content_w - total) // 2
        out = []
        for w, name, wordmark in specs:
            box, tag = draw_logo(rng, page, x, y + _CAPTION_H + 6, h, name, wordmark)
            out.append(Instance(BRAND_LOGO, box, tag))
            x += w + gap
        return out

    return Row(height, draw)
