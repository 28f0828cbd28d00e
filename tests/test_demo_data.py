"""The demo sample pages: exact DocCount release schema, integrity, prompts, determinism."""

from __future__ import annotations

import hashlib
import io
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from PIL import Image

from evaluator.demo import sample_data

REPO = Path(__file__).resolve().parents[1]
TEMPLATE = (REPO / "prompts" / "counting_protocol.md").read_text(encoding="utf-8")
CLASSES = {"Brand Logo", "Photograph", "Table", "Chart / Graph"}
N_PAGES = 4  # page i asks about class i % 4, so four pages cover every class

# Written out here rather than imported, so a drift of the generator's own schema is caught.
EXPECTED_TYPES = {
    "sample_id": pa.string(),
    "image": pa.struct([pa.field("bytes", pa.binary()), pa.field("path", pa.string())]),
    "image_sha256": pa.string(),
    "target_class": pa.string(),
    "class_definition": pa.string(),
    "question": pa.string(),
    "prompt": pa.string(),
    "answer": pa.int64(),
}


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return sample_data.generate_sample_set(tmp_path_factory.mktemp("demo"), n_pages=N_PAGES, seed=0)


@pytest.fixture(scope="module")
def rows(generated: Path) -> list[dict]:
    return pq.read_table(generated).to_pylist()


def test_location_and_schema(generated: Path) -> None:
    assert generated.name == "test-00000-of-00001.parquet"
    assert generated.parent.name == "data"
    schema = pq.read_schema(generated)
    assert schema.names == list(EXPECTED_TYPES)
    for name, typ in EXPECTED_TYPES.items():
        assert schema.field(name).type == typ, name
    # The Hugging Face feature metadata marks the image column as an Image feature.
    assert b'"image": {"_type": "Image"}' in schema.metadata[b"huggingface"]
    assert pq.ParquetFile(generated).metadata.num_rows == N_PAGES


def test_ids_images_and_hashes(rows: list[dict]) -> None:
    ids = [r["sample_id"] for r in rows]
    assert len(set(ids)) == len(ids) == N_PAGES
    for r in rows:
        data = r["image"]["bytes"]
        assert data[:2] == b"\xff\xd8" and data[-2:] == b"\xff\xd9"
        assert r["image"]["path"] == f"{r['sample_id']}.jpg"
        assert len(r["image_sha256"]) == 64 and r["image_sha256"] == r["image_sha256"].lower()
        assert hashlib.sha256(data).hexdigest() == r["image_sha256"]
        with Image.open(io.BytesIO(data)) as im:
            assert im.format == "JPEG" and im.size == sample_data.PAGE_SIZE


def test_prompts_classes_questions_answers(rows: list[dict]) -> None:
    assert {r["target_class"] for r in rows} == CLASSES
    definitions: dict[str, set[str]] = {}
    for r in rows:
        expected = TEMPLATE.format(
            target_class=r["target_class"], class_definition=r["class_definition"], question=r["question"]
        )
        assert r["prompt"] == expected
        assert f"Target class: {r['target_class']}\n" in r["prompt"]
        assert isinstance(r["answer"], int) and 0 <= r["answer"] <= 12
        definitions.setdefault(r["target_class"], set()).add(r["class_definition"])
    assert all(len(d) == 1 for d in definitions.values())  # one definition per class
    assert len(sample_data.QUESTION_TEMPLATES) >= 5 and len({r["question"] for r in rows}) >= 2


def test_answers_are_the_generated_region_counts(rows: list[dict]) -> None:
    pages = sample_data.render_sample_pages(N_PAGES, seed=0)
    assert [p.jpeg for p in pages] == [r["image"]["bytes"] for r in rows]
    assert [p.answer for p in pages] == [r["answer"] for r in rows]
    counts = []
    for p in pages:
        assert p.answer == sum(1 for i in p.instances if i.target_class == p.target_class)
        counts.append(p.answer)
        w, h = sample_data.PAGE_SIZE
        for inst in p.instances:
            x0, y0, x1, y1 = inst.box
            assert 0 <= x0 < x1 <= w and 0 <= y0 < y1 <= h
    assert len(set(counts)) >= 2  # counts vary


def test_deterministic_bytes(generated: Path, tmp_path: Path) -> None:
    again = sample_data.generate_sample_set(tmp_path, n_pages=N_PAGES, seed=0)
    assert again.read_bytes() == generated.read_bytes()
    other = sample_data.render_sample_pages(1, seed=1)
    assert other[0].jpeg != pq.read_table(generated).column("image")[0]["bytes"].as_py()


def test_pages_do_not_depend_on_set_size(rows: list[dict]) -> None:
    short = sample_data.render_sample_pages(1, seed=0)
    assert short[0].jpeg == rows[0]["image"]["bytes"]


def test_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert sample_data.main(["--output", str(tmp_path), "--pages", "1", "--seed", "3"]) == 0
    path = tmp_path / "data" / "test-00000-of-00001.parquet"
    assert pq.ParquetFile(path).metadata.num_rows == 1
    assert "wrote 1 pages" in capsys.readouterr().out


def test_evaluator_dry_run_accepts_the_demo_data(generated: Path, tmp_path: Path) -> None:
    from support.cli import run_cli

    res = run_cli(
        "evaluate",
        "--model",
        "reference-layout-cdla",
        "--data-files",
        str(generated.parent / "test-*.parquet"),
        "--run-root",
        str(tmp_path / "run"),
        "--dry-run",
    )
    assert res.returncode == 0, res.stdout + res.stderr
