"""Small parquet files in the release schemas, written by the tests (never the real data), and an
independent reader for the records the evaluator writes."""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
from collections.abc import Set as AbstractSet
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from PIL import Image

PROMPT_TEMPLATE = (Path(__file__).resolve().parents[2] / "prompts" / "counting_protocol.md").read_text()
CLASSES = ("Brand Logo", "Photograph", "Table", "Chart / Graph")
IMAGE_TYPE = pa.struct([("bytes", pa.binary()), ("path", pa.string())])


def image_bytes(i: int, fmt: str = "JPEG", size: tuple[int, int] = (32, 24)) -> bytes:
    """A small distinct image per index (colour and a pixel pattern derived from i)."""
    img = Image.new("RGB", size, ((i * 37) % 256, (i * 91) % 256, (i * 53) % 256))
    img.putpixel((i % size[0], (i // size[0]) % size[1]), (255, 255, 255))
    buf = io.BytesIO()
    img.save(buf, format=fmt, quality=90) if fmt == "JPEG" else img.save(buf, format=fmt)
    return buf.getvalue()


def sha(b: bytes) -> str:
    return hashlib.sha256(b).hexdigest()


def doccount_row(i: int, img: bytes, id_digits: int = 4) -> dict[str, Any]:
    """Row i of a DocCount-schema test set with the given image bytes (answers 1..9, the four classes)."""
    cls = CLASSES[i % 4]
    question = f"How many {cls} regions are on this page? (variant {i % 3})"
    definition = f"Definition of {cls} for the test set."
    sid = f"doc-{i:0{id_digits}d}"
    return {
        "sample_id": sid,
        "image": {"bytes": img, "path": f"{sid}.jpg"},
        "image_sha256": sha(img),
        "target_class": cls,
        "class_definition": definition,
        "question": question,
        "prompt": PROMPT_TEMPLATE.format(target_class=cls, class_definition=definition, question=question),
        "answer": (i * 7) % 9 + 1,
    }


def doccount_rows(n: int, start: int = 0) -> list[dict[str, Any]]:
    return [doccount_row(i, image_bytes(i)) for i in range(start, start + n)]


DOCCOUNT_SCHEMA = pa.schema(
    [
        ("sample_id", pa.string()),
        ("image", IMAGE_TYPE),
        ("image_sha256", pa.string()),
        ("target_class", pa.string()),
        ("class_definition", pa.string()),
        ("question", pa.string()),
        ("prompt", pa.string()),
        ("answer", pa.int64()),
    ]
)


def write_doccount(path: Path, rows: list[dict[str, Any]], schema: pa.Schema | None = None) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    table = pa.Table.from_pylist(rows, schema=schema or DOCCOUNT_SCHEMA)
    pq.write_table(table, path)
    return path


def countqa_rows(n_images: int) -> list[dict[str, Any]]:
    rows = []
    for i in range(n_images):
        img = image_bytes(1000 + i, fmt="PNG" if i % 2 else "JPEG")
        nq = 1 + i % 3
        rows.append(
            {
                "image": {"bytes": img, "path": f"cqa-{i}.png"},
                "questions": [f"How many objects of kind {q} are there?" for q in range(nq)],
                "answers": [str(10 * i + q) if q % 2 else 10 * i + q for q in range(nq)],
                "objects": [f"kind-{q}" for q in range(nq)],
                "categories": ["kitchen", "tools"][: 1 + i % 2],
                "is_focused": bool(i % 2),
            }
        )
    return rows


COUNTQA_SCHEMA = pa.schema(
    [
        ("image", IMAGE_TYPE),
        ("questions", pa.list_(pa.string())),
        ("answers", pa.list_(pa.string())),
        ("objects", pa.list_(pa.string())),
        ("categories", pa.list_(pa.string())),
        ("is_focused", pa.bool_()),
    ]
)


def write_countqa(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fixed = [{**r, "answers": [str(a) for a in r["answers"]]} for r in rows]
    pq.write_table(pa.Table.from_pylist(fixed, schema=COUNTQA_SCHEMA), path)
    return path


def doccount_reply(rows: list[dict[str, Any]], wrong: AbstractSet[str] = frozenset()) -> dict[str, str]:
    """Test-server answer map: image sha256 -> a reply that is right unless the id is in `wrong`."""
    out = {}
    for r in rows:
        n = r["answer"] + (1 if r["sample_id"] in wrong else 0)
        out[r["image_sha256"]] = f"I see {n} regions of the class.\n<answer>{n}</answer>"
    return out


def complete_records(run: Path) -> list[dict[str, Any]]:
    """The records on complete lines of a run folder's responses.partial.jsonl, in file order.

    Parsed here with json.loads, independently of the evaluator's own reader; a torn or bad line is
    left out, and a folder without the file has none.
    """
    path = run / "responses.partial.jsonl"
    if not path.exists():
        return []
    out = []
    for line in path.read_bytes().split(b"\n"):
        with contextlib.suppress(ValueError):
            obj = json.loads(line)
            if isinstance(obj, dict):
                out.append(obj)
    return out
