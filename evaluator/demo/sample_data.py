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
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from PIL import Image

from evaluator.data.benchmarks.base import prompt_text
from evaluator.demo.page_layout import render_page
from evaluator.demo.page_model import (
    CLASS_DEFINITIONS,
    CLASS_NOUNS,
    CLASSES,
    DATA_RELATIVE_PATH,
    HF_FEATURES,
    JPEG_QUALITY,
    PAGE_SIZE,
    QUESTION_TEMPLATES,
    RELEASE_SCHEMA,
    SamplePage,
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

# --------------------------------------------------------------------------------------------
# Prompt template
# --------------------------------------------------------------------------------------------


def load_prompt_template(path: Path | None = None) -> str:
    """The prompt template verbatim (the whole file, as the rest of the bundle does): `path`, else the
    package's counting_protocol.md (or DOCCOUNT_PROMPTS_DIR's)."""
    if path is not None:
        return Path(path).read_text(encoding="utf-8")
    return prompt_text("counting_protocol.md")


def compose_prompt(template: str, target_class: str, class_definition: str, question: str) -> str:
    """Fill the ``str.format`` placeholders of the counting-protocol template."""
    return template.format(target_class=target_class, class_definition=class_definition, question=question)


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
        question = template.format(noun=CLASS_NOUNS[target], target_class=target)
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
    size = path.stat().st_size
    print(f"wrote {args.pages} pages to {path} ({size / 1e6:.2f} MB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
