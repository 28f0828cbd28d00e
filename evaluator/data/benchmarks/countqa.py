"""CountQA: cluttered everyday photos, several questions per image, a bare-integer reply."""

from __future__ import annotations

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
    prompt_text,
    sha256_hex,
    sniff_image_mime,
)
from evaluator.data.parsing import ParseResult, parse_countqa
from evaluator.data.reasoning import strip_think_block

if TYPE_CHECKING:  # annotations only: pyarrow costs ~0.15 s at start-up
    import pyarrow as pa

RELAXED_TOLERANCE = 0.05


class CountQA(Benchmark):
    name = "countqa"
    title = "CountQA"
    zero_counts = True
    hub_id = "Jayant-Sravan/CountQA"
    hub_files = "data/test-*.parquet"
    columns = {
        "image": "Image struct {bytes, path}, JPEG or PNG",
        "questions": "list<string>",
        "answers": "list<int or numeric string>, aligned with questions",
        "objects": "list",
        "categories": "list<string>",
        "is_focused": "bool",
    }
    group_fields = ("is_focused", "categories")
    # What the reference adapter sends by default (EvalScope's count_qa over an OpenAI-compatible API):
    # temperature 0.0 and nothing else; top_p and max_tokens are left out (None: not sent). See README.
    default_sampling = Sampling(temperature=0.0, top_p=None, max_tokens=None)
    # A short system prompt and question, and one everyday photo (a phone photo scaled by a Qwen-VL-style
    # processor is a few thousand tokens): the same 8,192 as DocCount (docs/serving.md).
    prompt_budget = 8192
    prompt_files = ("countqa_system.txt",)
    manifest_reads_images = True  # the release has no hash column: hash the bytes

    def __init__(self) -> None:
        self._system_prompt: str | None = None

    @property
    def system_prompt(self) -> str:
        if self._system_prompt is None:
            self._system_prompt = prompt_text("countqa_system.txt")
        return self._system_prompt

    @staticmethod
    def sample_id(row_index: int, question_index: int) -> str:
        return f"countqa-{row_index:05d}-q{question_index}"

    def samples(self, batch: pa.RecordBatch, first_row_index: int, with_images: bool) -> Iterator[Sample]:
        for i, row in enumerate(batch.to_pylist()):
            yield from self._row_samples(row, first_row_index + i, with_images)

    def _row_samples(self, row: JSONObject, row_index: int, with_images: bool) -> Iterator[Sample]:
        questions = row.get("questions") or []
        answers = row.get("answers") or []
        image = image_bytes_of(row.get("image")) if with_images else None
        digest = sha256_hex(image) if image is not None else None
        row_errors: list[str] = []
        if with_images and image is None:
            row_errors.append("image bytes are missing")
        elif (
            image is not None and sniff_image_mime(image) is None
        ):  # caught by --dry-run, not at request time
            row_errors.append("image bytes are not JPEG, PNG, GIF or WebP")
        if len(questions) != len(answers):
            row_errors.append(f"{len(questions)} questions but {len(answers)} answers")
        categories = row.get("categories") or []
        groups = {"is_focused": row.get("is_focused"), "categories": list(categories)}
        if not questions:
            # A row with no question still must not vanish from the denominator silently.
            yield Sample(
                sample_id=self.sample_id(row_index, 0),
                row_index=row_index,
                image=image,
                image_sha256=digest,
                ground_truth=None,
                groups=groups,
                text="",
                data_error="; ".join(row_errors + ["row has no questions"]),
            )
            return
        for q_index, question in enumerate(questions):
            errors = list(row_errors)
            truth, answer_error = check_answer(answers[q_index] if q_index < len(answers) else None)
            if answer_error:
                errors.append(answer_error)
            if not isinstance(question, str) or not question.strip():
                errors.append("question is empty")
            yield Sample(
                sample_id=self.sample_id(row_index, q_index),
                row_index=row_index,
                image=image,
                image_sha256=digest,
                ground_truth=truth,
                groups=groups,
                text=question if isinstance(question, str) else "",
                data_error="; ".join(errors) or None,
            )

    def messages(self, sample: Sample, image_data_url: str) -> list[ChatMessage]:
        return [
            {"role": "system", "content": self.system_prompt},
            {
                "role": "user",
                "content": [
                    {"type": "image_url", "image_url": {"url": image_data_url}},
                    {"type": "text", "text": sample.text},
                ],
            },
        ]

    def parse(self, text: str | None) -> ParseResult:
        # the reference adapter drops the reply's first <think> block before parsing (think.py)
        return parse_countqa(strip_think_block(text))

    def extra_metrics(self, answers: list[int | None], truths: list[int | None]) -> dict[str, float]:
        n = len(truths)
        # within 5% of the truth (|pred - truth| <= 0.05 * truth); with truth 0 this is exact
        pairs = zip(answers, truths, strict=True)
        hits = sum(a is not None and t is not None and abs(a - t) <= RELAXED_TOLERANCE * t for a, t in pairs)
        return {"relaxed_accuracy": hits / n if n else 0.0}
