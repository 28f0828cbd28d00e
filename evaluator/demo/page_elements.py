"""What a sample page is drawn from: fonts, words, the scikit-image sample photos, and the element
renderers (photo, chart, table, logo), each returning an RGB image of exactly the requested size."""

from __future__ import annotations

import math
from functools import cache
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw, ImageFont

# Assets: fonts, words, photos

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
LOREM = _LOREM_TEXT.split()
_TITLE_WORDS_TEXT = (
    "Annual Review Regional Outlook Market Survey Field Notes Quarterly Update Product Catalogue "
    "Research Brief Operations Summary Community Report Technical Bulletin Partner Newsletter "
    "Sustainability Progress Visitor Guide Program Overview"
)
TITLE_WORDS = _TITLE_WORDS_TEXT.split()
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


def sans(size: int) -> ImageFont.FreeTypeFont:
    return _font("DejaVuSans.ttf", size)


def sans_bold(size: int) -> ImageFont.FreeTypeFont:
    return _font("DejaVuSans-Bold.ttf", size)


def serif_bold(size: int) -> ImageFont.FreeTypeFont:
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


# Element renderers (each returns an RGB PIL image of exactly the requested size)


def render_photo(rng: np.random.Generator, w: int, h: int) -> tuple[Image.Image, str]:
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


def render_chart(rng: np.random.Generator, w: int, h: int) -> tuple[Image.Image, str]:
    from matplotlib import rc_context
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    kinds = ("bar", "line", "pie", "scatter", "barh", "area", "grouped", "hist")
    kind = kinds[int(rng.integers(len(kinds)))]
    colors = _PALETTES[int(rng.integers(len(_PALETTES)))]
    title = " ".join(w_.capitalize() for w_ in rng.choice(LOREM, size=int(rng.integers(2, 4))))
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


def fit_text(draw: ImageDraw.ImageDraw, text: str, font: ImageFont.FreeTypeFont, width: float) -> str:
    if draw.textlength(text, font=font) <= width:
        return text
    while text and draw.textlength(text + "…", font=font) > width:
        text = text[:-1]
    return text + "…" if text else ""


def render_table(rng: np.random.Generator, w: int, n_rows: int, n_cols: int) -> tuple[Image.Image, str]:
    row_h = int(rng.integers(19, 24))
    h = row_h * (n_rows + 1)
    img = Image.new("RGB", (w, h), "white")
    d = ImageDraw.Draw(img)
    style = ("grid", "rules", "zebra")[int(rng.integers(3))]
    header = _TABLE_HEADERS[int(rng.integers(len(_TABLE_HEADERS)))][:n_cols]
    head_fill = ("#dfe6ee", "#e8e8e8", "#d9ead3", "#fbe5d6")[int(rng.integers(4))]
    font, bold = sans(11), sans_bold(11)
    col_w = w / n_cols
    labels = list(rng.choice(_ROW_LABELS, size=n_rows, replace=n_rows > len(_ROW_LABELS)))
    d.rectangle([0, 0, w - 1, row_h - 1], fill=head_fill)
    for r in range(n_rows):
        if style == "zebra" and r % 2 == 1:
            d.rectangle([0, (r + 1) * row_h, w - 1, (r + 2) * row_h - 1], fill="#f2f4f7")
    for c in range(n_cols):
        x = c * col_w + 5
        d.text((x, (row_h - 12) / 2), fit_text(d, header[c], bold, col_w - 8), font=bold, fill="#111111")
        for r in range(n_rows):
            if c == 0:
                cell = str(labels[r])
            elif rng.random() < 0.5:
                cell = f"{rng.uniform(0, 1000):,.1f}"
            else:
                cell = f"{int(rng.integers(0, 100))}%"
            y = (r + 1) * row_h + (row_h - 12) / 2
            d.text((x, y), fit_text(d, cell, font, col_w - 8), font=font, fill="#222222")
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


def brand_name(rng: np.random.Generator) -> str:
    n = int(rng.integers(2, 4))
    word = "".join(str(s) for s in rng.choice(_BRAND_SYLLABLES, size=n)).capitalize()
    if rng.random() < 0.5:
        word += " " + _BRAND_SUFFIXES[int(rng.integers(len(_BRAND_SUFFIXES)))]
    return word


def logo_width(name: str, wordmark: bool, h: int) -> int:
    """A logo's width at height ``h``: the mark, and the brand name beside it for a wordmark."""
    if not wordmark:
        return h
    return h + 6 + int(math.ceil(sans_bold(max(10, int(h * 0.34))).getlength(name)))


def logo_size(rng: np.random.Generator, h: int) -> tuple[int, str, bool]:
    """Width of a logo of height ``h`` (decided before drawing), its brand name and wordmark flag."""
    name = brand_name(rng)
    wordmark = bool(rng.random() < 0.6)
    return logo_width(name, wordmark, h), name, wordmark


def draw_logo(
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
    font = sans_bold(max(9, int(h * (0.36 if shape != "diamond" else 0.28))))
    d.text(
        (cx, cy - (h * 0.04 if shape == "shield" else 0)), initials, font=font, fill=text_fill, anchor="mm"
    )
    if wordmark:
        d.text((x + h + 6, cy), name, font=sans_bold(max(10, int(h * 0.34))), fill=color, anchor="lm")
    return (x, y, x + logo_width(name, wordmark, h), y + h), f"logo:{shape}"
