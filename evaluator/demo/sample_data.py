"""Deterministic synthetic document pages in the DocCount release schema.

Each page is rendered from scratch with Pillow: a running header, a title, paragraphs of
lorem-like text, and a mix of real photographs (the sample photos that ship inside
scikit-image), real matplotlib charts, drawn tables and drawn logo marks. Every page asks about
one target class; the answer is the number of regions of that class that the generator placed,
so pages that also contain other classes test that only the target class is counted.

The output is byte-identical for a given ``(n_pages, seed)`` on a given set of library versions
(fixed JPEG settings, no timestamps, one random generator per page derived from the seed, drawn from in
a fixed order: header, title, footer, the rows of the body and the paragraphs between them).

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
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from PIL import Image, ImageDraw

from evaluator.data.benchmarks.base import prompt_text
from evaluator.demo.page_elements import (
    TITLE_WORDS,
    brand_name,
    draw_logo,
    logo_size,
    sans,
    sans_bold,
    serif_bold,
)
from evaluator.demo.page_model import (
    BRAND_LOGO,
    CHART,
    CLASS_DEFINITIONS,
    CLASS_NOUNS,
    CLASSES,
    DATA_RELATIVE_PATH,
    HF_FEATURES,
    JPEG_QUALITY,
    PAGE_SIZE,
    PHOTOGRAPH,
    QUESTION_TEMPLATES,
    RELEASE_SCHEMA,
    TABLE,
    Instance,
    SamplePage,
)
from evaluator.demo.page_rows import (
    LINE_H,
    MARGIN,
    PARA_GAP,
    ROW_GAP,
    Counter,
    Row,
    draw_paragraph,
    lorem_words,
    plan_rows,
)

__all__ = [  # the sample set's face (tests and docs use these names through this module)
    "CLASS_DEFINITIONS",
    "CLASSES",
    "PAGE_SIZE",
    "QUESTION_TEMPLATES",
    "SamplePage",
    "compose_prompt",
    "generate_sample_set",
    "load_prompt_template",
    "main",
    "render_sample_pages",
]

# Prompt template


def load_prompt_template(path: Path | None = None) -> str:
    """The prompt template verbatim (the whole file, as the rest of the bundle does): `path`, else the
    package's counting_protocol.md (or DOCCOUNT_PROMPTS_DIR's)."""
    if path is not None:
        return Path(path).read_text(encoding="utf-8")
    return prompt_text("counting_protocol.md")


def compose_prompt(template: str, target_class: str, class_definition: str, question: str) -> str:
    """Fill the ``str.format`` placeholders of the counting-protocol template."""
    return template.format(target_class=target_class, class_definition=class_definition, question=question)


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
        question = template.format(noun=CLASS_NOUNS[target], target_class=target)
        answer = sum(1 for inst in instances if inst.target_class == target)
        jpeg = io.BytesIO()
        img.save(jpeg, format="JPEG", quality=JPEG_QUALITY, optimize=False, progressive=False, subsampling=2)
        pages.append(
            SamplePage(
                sample_id=f"demo-{i + 1:04d}",
                jpeg=jpeg.getvalue(),
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
    meta = {b"huggingface": json.dumps({"info": {"features": HF_FEATURES}}, sort_keys=True).encode()}
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
    print(f"wrote {args.pages} pages to {path} ({path.stat().st_size / 1e6:.2f} MB)")
    return 0


def _sample_counts(rng: np.random.Generator, target: str) -> dict[str, int]:
    """The target class gets 0..8 regions (mostly 1-6); other classes appear as distractors."""
    probs = np.array([0.04, 0.14, 0.17, 0.17, 0.15, 0.12, 0.1, 0.06, 0.05])
    counts = {target: int(rng.choice(len(probs), p=probs / probs.sum()))}
    for cls in CLASSES:
        if cls != target:
            counts[cls] = int(rng.integers(1, 3)) if rng.random() < 0.55 else 0
    return counts


def _draw_top(
    rng: np.random.Generator, page: Image.Image, counts: dict[str, int], instances: list[Instance]
) -> tuple[int, int]:
    """Running header (with a logo half the time when the page has logos), title and subtitle;
    (the y below them, the logos still to place)."""
    d = ImageDraw.Draw(page)
    content_w = PAGE_SIZE[0] - 2 * MARGIN
    n_logos = counts[BRAND_LOGO]
    header_logo = n_logos > 0 and rng.random() < 0.5
    y = MARGIN - 20
    series = f"{brand_name(rng)} · {' '.join(rng.choice(TITLE_WORDS, size=2))}"
    d.text((MARGIN, y + 6), series, font=sans(11), fill="#666666")
    header_h = 24
    if header_logo:
        lh = 38
        lw, name, wm = logo_size(rng, lh)
        box, tag = draw_logo(rng, page, MARGIN + content_w - lw, y - 6, lh, name, wm)
        instances.append(Instance(BRAND_LOGO, box, tag))
        n_logos -= 1
        header_h = lh + 2
    y += header_h
    d.line([(MARGIN, y), (MARGIN + content_w, y)], fill="#999999", width=1)
    y += 14

    # Title and subtitle.
    title = " ".join(str(w) for w in rng.choice(TITLE_WORDS, size=int(rng.integers(2, 5))))
    d.text((MARGIN, y), title, font=serif_bold(int(rng.integers(22, 29))), fill="#111111")
    y += 36
    if rng.random() < 0.7:
        sub = " ".join(lorem_words(rng, int(rng.integers(5, 10)))).capitalize()
        d.text((MARGIN, y), sub, font=sans(14), fill="#555555")
        y += 24
    return y + 8, n_logos


def _draw_footer(page: Image.Image, index: int) -> int:
    """The page number under a rule; the y the body must end above."""
    d = ImageDraw.Draw(page)
    width, height = PAGE_SIZE
    footer_y = height - MARGIN + 8
    d.line([(MARGIN, footer_y - 6), (MARGIN + width - 2 * MARGIN, footer_y - 6)], fill="#bbbbbb", width=1)
    d.text((width // 2, footer_y + 6), f"Page {index + 1}", font=sans(10), fill="#777777", anchor="mm")
    return footer_y - 16


def _fit_rows(
    rng: np.random.Generator, counts: dict[str, int], n_logos: int, available: int, index: int
) -> tuple[list[Row], int]:
    """The body's rows, planned more compactly until they fit; (rows, the spare height)."""
    content_w = PAGE_SIZE[0] - 2 * MARGIN
    figures = [PHOTOGRAPH] * counts[PHOTOGRAPH] + [CHART] * counts[CHART]
    figures = [figures[j] for j in rng.permutation(len(figures))]
    rows: list[Row] = []
    for level in range(4):
        rows = plan_rows(rng, figures, counts[TABLE], n_logos, content_w, level)
        needed = sum(r.height for r in rows) + ROW_GAP * (len(rows) + 1) + 2 * LINE_H
        if needed <= available or level == 3:
            break
    spare = available - sum(r.height for r in rows) - ROW_GAP * (len(rows) + 1)
    if spare < 0:
        raise RuntimeError(f"page {index}: layout does not fit ({counts})")
    return rows, spare


def _spread_text(rng: np.random.Generator, slots: int, spare: int) -> tuple[list[int], list[bool], int]:
    """Spread the spare height as paragraphs (with the odd section heading) over the slots between rows;
    (lines per slot, heading per slot, the extra gap after each slot)."""
    text_lines = [0] * slots
    heading = [False] * slots
    # Leave some of the spare height blank (real pages breathe; it also keeps the JPEGs small).
    budget = int(spare * float(rng.uniform(0.55, 0.9)))
    order = list(rng.permutation(slots))
    while True:
        placed = False
        for s in order:
            cost = 3 * LINE_H + PARA_GAP
            if budget >= cost:
                n = int(rng.integers(3, 7))
                n = min(n, (budget - PARA_GAP) // LINE_H)
                text_lines[s] += n
                budget -= n * LINE_H + PARA_GAP
                placed = True
                if not heading[s] and budget >= 26 and rng.random() < 0.3:
                    heading[s] = True
                    budget -= 26
        if not placed:
            break
    used = sum(n * LINE_H for n in text_lines) + sum(26 for h in heading if h)
    used += sum(PARA_GAP * math.ceil(n / 3) for n in text_lines)
    return text_lines, heading, max(0, (spare - used) // (slots + 1))


def _draw_body(
    rng: np.random.Generator,
    page: Image.Image,
    y: int,
    rows: list[Row],
    text: tuple[list[int], list[bool], int],
    instances: list[Instance],
) -> int:
    """Paragraphs, headings and rows from `y` down; the y below the last one."""
    d = ImageDraw.Draw(page)
    content_w = PAGE_SIZE[0] - 2 * MARGIN
    text_lines, heading, extra_gap = text
    section = 1
    numbers = Counter()
    for s in range(len(rows) + 1):
        if heading[s]:
            title = f"{section}. {' '.join(lorem_words(rng, 2)).title()}"
            d.text((MARGIN, y), title, font=sans_bold(15), fill="#222")
            section += 1
            y += 26
        lines = text_lines[s]
        while lines > 0:
            n = min(lines, int(rng.integers(3, 7)))
            if lines - n < 2:
                n = lines
            draw_paragraph(rng, page, MARGIN, y, content_w, n)
            y += n * LINE_H + PARA_GAP
            lines -= n
        y += extra_gap
        if s < len(rows):
            y += ROW_GAP
            instances.extend(rows[s].draw(page, y, numbers))
            y += rows[s].height
    return y


def render_page(seed: int, index: int, target_class: str) -> tuple[Image.Image, list[Instance]]:
    """Render page ``index`` of the set with ``seed``; returns the page and the regions placed.

    One generator draws everything, in this order: counts, header and title, rows, text, body."""
    rng = np.random.default_rng([seed, index])
    counts = _sample_counts(rng, target_class)
    page = Image.new("RGB", PAGE_SIZE, "white")
    instances: list[Instance] = []
    body_top, n_logos = _draw_top(rng, page, counts, instances)
    body_bottom = _draw_footer(page, index)
    rows, spare = _fit_rows(rng, counts, n_logos, body_bottom - body_top, index)
    text = _spread_text(rng, len(rows) + 1, spare)
    y = _draw_body(rng, page, body_top, rows, text, instances)
    if y > body_bottom + 2:  # pragma: no cover - a generator bug
        raise RuntimeError(f"page {index}: body overflows ({y} > {body_bottom})")
    placed_counts = {c: sum(1 for i in instances if i.target_class == c) for c in CLASSES}
    if placed_counts != counts:  # pragma: no cover - a generator bug, never data dependent
        raise RuntimeError(f"page {index}: placed {placed_counts}, planned {counts}")
    return page, instances


if __name__ == "__main__":
    sys.exit(main())
