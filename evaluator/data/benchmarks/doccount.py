"""DocCount: one question per document page, answer in a final <answer>N</answer> tag."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import TYPE_CHECKING

from evaluator.core.jsonl import JSONObject
from evaluator.core.records import Sampling
from evaluator.data.benchmarks.base import (
    Benchmark,
    ChatMessage,
    Sample,
    check_answer,
    image_bytes_of,
    sha256_hex,
    sniff_image_mime,
)
from evaluator.data.parsing import ParseResult, parse_answer_tag

if TYPE_CHECKING:  # annotations only: pyarrow costs ~0.15 s at start-up
    import pyarrow as pa

CLASSES = ("Brand Logo", "Photograph", "Table", "Chart / Graph")
_SHA256 = re.compile(r"[0-9a-f]{64}")


class DocCount(Benchmark):
    name = "doccount"
    title = "DocCount"
    hub_id = "adopd/DocCount"
    hub_files = "data/test-*.parquet"
    # The assumed release schema (the dataset card does not list it): rename here only.
    columns = {
        "sample_id": "string, unique",
        "image": "Image struct {bytes, path}, the original JPEG",
        "image_sha256": "string, SHA-256 of the image bytes (64 lowercase hex)",
        "target_class": "string, one of " + ", ".join(CLASSES),
        "class_definition": "string",
        "question": "string",
        "prompt": "string, the complete prompt sent verbatim",
        "answer": "integer >= 0",
    }
    group_fields = ("target_class",)
    default_sampling = Sampling(temperature=1.0, top_p=0.95, max_tokens=32768)
    # A few hundred tokens of protocol, question and class definition, and one page image: at about
    # 28 x 28 px per token (Qwen-VL-style processors) a 1700 x 2200 page is ~4,800 tokens, and other
    # processors tile more finely. 8,192 holds both with room (docs/serving.md, "Checks before starting").
    prompt_budget = 8192
    prompt_files = ("counting_protocol.md",)
    expected_groups = {"target_class": CLASSES}

    def samples(self, batch: pa.RecordBatch, first_row_index: int, with_images: bool) -> Iterator[Sample]:
        for i, row in enumerate(batch.to_pylist()):
            yield self._sample(row, first_row_index + i, with_images)

    def _sample(self, row: JSONObject, row_index: int, with_images: bool) -> Sample:
        errors: list[str] = []
        sample_id = row.get("sample_id")
        if not isinstance(sample_id, str) or not sample_id:
            errors.append(f"sample_id is {sample_id!r}")
            sample_id = f"row-{row_index}"
        truth, answer_error = check_answer(row.get("answer"))
        if answer_error:
            errors.append(answer_error)
        released = row.get("image_sha256")
        if not isinstance(released, str) or not _SHA256.fullmatch(released):
            errors.append(f"image_sha256 {released!r} is not 64 lowercase hex digits")
            released = None
        image = None
        if with_images:
            image = image_bytes_of(row.get("image"))
            if image is None:
                errors.append("image bytes are missing")
            elif released is not None and sha256_hex(image) != released:
                errors.append(f"image SHA-256 {sha256_hex(image)} does not match the released {released}")
            elif sniff_image_mime(image) is None:  # caught by --dry-run, not first at request time
                errors.append("image bytes are not JPEG, PNG, GIF or WebP")
        prompt = row.get("prompt")
        if not isinstance(prompt, str) or not prompt.strip():
            errors.append("prompt is empty")
            prompt = ""
        return Sample(
            sample_id=sample_id,
            row_index=row_index,
            image=image,
            image_sha256=released,
            ground_truth=truth,
            groups={"target_class": row.get("target_class")},
            text=prompt,
            data_error="; ".join(errors) or None,
        )

    def messages(self, sample: Sample, image_data_url: str) -> list[ChatMessage]:
        # Exactly one user message: the image, then the released prompt verbatim. No system message.
        return [
            {
                "role": "user",
                "content": [
                    {"type": "image_url", "image_url": {"url": image_data_url}},
                    {"type": "text", "text": sample.text},
                ],
            }
        ]

    def parse(self, text: str | None) -> ParseResult:
        return parse_answer_tag(text)
