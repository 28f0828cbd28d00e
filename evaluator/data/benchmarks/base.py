"""What a benchmark declares. One module per benchmark implements `Benchmark`.

Data flow: parquet row batch -> Sample(s) -> chat messages -> response text -> ParseResult -> correct.
Everything here is pure (no HTTP, no files) except reading prompt files at import time. The prompt
files are shipped inside the package (evaluator/data/prompts/, package data read with
importlib.resources), or read from the folder named by DOCCOUNT_PROMPTS_DIR (the container image, a
`doccount reproduce` of an archive). The repository's top-level prompts/ is where people read and edit
them; tests/test_wheel.py fails when the package copy differs from it (copy them over after an edit).
"""

from __future__ import annotations

import hashlib
import os
from abc import ABC, abstractmethod
from collections.abc import Iterator
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict

from evaluator.core.errors import UserError
from evaluator.core.jsonl import JSONObject
from evaluator.core.records import Sampling
from evaluator.data.parsing import ParseResult, last_integer_fallback

if TYPE_CHECKING:  # annotations only: pyarrow costs ~0.15 s at start-up
    from importlib.resources.abc import Traversable

    import pyarrow as pa


@dataclass
class Sample:
    """One question. `image` is None when only the manifest (no pixels) was read."""

    sample_id: str
    row_index: int
    image: bytes | None
    image_sha256: str | None  # the released hash (DocCount) or the hash of the bytes (CountQA)
    ground_truth: int | None
    groups: JSONObject
    text: str  # the user text part, sent verbatim
    data_error: str | None = None


class ImageURL(TypedDict):
    url: str  # a data: URL (or the placeholder data.parquet hashes in its place)


class ContentPart(TypedDict, total=False):
    """One part of a user message: {"type": "image_url", "image_url": ...} or {"type": "text", "text": ...}."""

    type: str
    text: str
    image_url: ImageURL


class ChatMessage(TypedDict):
    """A chat-completions message as a benchmark builds it (the request sends it as it is)."""

    role: str
    content: str | list[ContentPart]


class ManifestLine(TypedDict, total=False):
    """One line of manifest.jsonl (ManifestEntry.to_dict); messages_sha256 only when known."""

    sample_id: str
    image_sha256: str | None
    ground_truth: int | None
    groups: JSONObject  # the benchmark's subgroup fields, as the data has them
    data_error: str | None
    messages_sha256: str


@dataclass(frozen=True)
class ManifestEntry:
    sample_id: str
    image_sha256: str | None
    ground_truth: int | None
    groups: JSONObject = field(default_factory=dict)
    data_error: str | None = None
    # SHA-256 of the chat messages sent for this question with the image left out (request.messages_sha256):
    # a changed prompt, question or class definition changes it. None in folders made before it existed.
    messages_sha256: str | None = None

    def to_dict(self) -> ManifestLine:
        d: ManifestLine = {
            "sample_id": self.sample_id,
            "image_sha256": self.image_sha256,
            "ground_truth": self.ground_truth,
            "groups": self.groups,
            "data_error": self.data_error,
        }
        if self.messages_sha256 is not None:
            d["messages_sha256"] = self.messages_sha256
        return d


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sniff_image_mime(data: bytes) -> str | None:
    """MIME type from the magic bytes; None when it is not an image type we send."""
    if data.startswith(b"\xff\xd8\xff"):
        return "image/jpeg"
    if data.startswith(b"\x89PNG\r\n\x1a\n"):
        return "image/png"
    if data[:6] in (b"GIF87a", b"GIF89a"):
        return "image/gif"
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    return None


def check_answer(value: Any) -> tuple[int | None, str | None]:
    """A ground truth must be a non-negative integer (an integral numeric string is accepted)."""
    if isinstance(value, bool) or value is None:
        return None, f"answer is {value!r}, expected a non-negative integer"
    if isinstance(value, float):
        if not value.is_integer():
            return None, f"answer {value!r} is not an integer"
        value = int(value)
    if isinstance(value, str):
        s = value.strip()
        if not s.isdigit() or not s.isascii():
            return None, f"answer {value!r} is not a non-negative integer"
        value = int(s)
    if not isinstance(value, int):
        return None, f"answer {value!r} has type {type(value).__name__}, expected an integer"
    if value < 0:
        return None, f"answer {value} is negative"
    return value, None


def image_bytes_of(cell: Any) -> bytes | None:
    """The encoded bytes of a Hugging Face Image struct cell ({bytes, path}) or raw binary."""
    if cell is None:
        return None
    if isinstance(cell, (bytes, bytearray, memoryview)):
        return bytes(cell)
    if isinstance(cell, dict):
        b = cell.get("bytes")
        return bytes(b) if b else None
    return None


class Benchmark(ABC):
    """A counting benchmark: dataset, schema, samples, messages, parser, metrics, subgroups."""

    name: str
    title: str  # how pages, summaries and leaderboards name it
    hub_id: str
    hub_files: str = "data/test-*.parquet"
    # column -> human description; the one place the release schema lives
    columns: dict[str, str]
    image_column: str = "image"
    group_fields: tuple[str, ...] = ()
    default_sampling: Sampling
    prompt_files: tuple[str, ...] = ()
    # True when the manifest needs the image bytes (no released hash column to read instead)
    manifest_reads_images: bool = False
    # The tokens one question's prompt may take (text and image together), as a served model's context
    # must hold it beside max_tokens: the sweep's checks before starting (study.plan_checks) add the two.
    # An estimate per benchmark, documented in docs/serving.md; each benchmark declares its own.
    prompt_budget: int
    # True when zero is a valid count (some questions have none): the metrics then keep a zero's own
    # error terms rather than treating it as a data error.
    zero_counts: bool = False

    # -- data -> samples
    @abstractmethod
    def samples(self, batch: pa.RecordBatch, first_row_index: int, with_images: bool) -> Iterator[Sample]:
        """Samples of one parquet record batch. Row problems become Sample.data_error, never exceptions."""

    def manifest_columns(self) -> list[str]:
        if self.manifest_reads_images:
            return list(self.columns)
        return [c for c in self.columns if c != self.image_column]

    # -- sample -> request
    @abstractmethod
    def messages(self, sample: Sample, image_data_url: str) -> list[ChatMessage]:
        """The chat messages sent for one sample."""

    # -- response -> answer
    @abstractmethod
    def parse(self, text: str | None) -> ParseResult:
        """The primary parser."""

    def fallback(self, text: str | None) -> int | None:
        """A diagnostic answer, reported separately and never used as the score."""
        return last_integer_fallback(text)

    def is_correct(self, answer: int | None, truth: int | None) -> bool:
        return answer is not None and truth is not None and answer == truth

    def extra_metrics(self, answers: list[int | None], truths: list[int | None]) -> dict[str, float]:
        """Benchmark-specific metrics over ALL questions (None answers count as wrong)."""
        return {}

    def prompt_hashes(self) -> dict[str, str]:
        return {name: sha256_hex(prompt_bytes(name)) for name in self.prompt_files}


PROMPTS_ENV = "DOCCOUNT_PROMPTS_DIR"


class PromptError(UserError):
    """A prompt file is missing or unreadable (a one-line message for the user)."""


def prompts_dir() -> Traversable:
    """DOCCOUNT_PROMPTS_DIR when set, else the prompts shipped in the package."""
    env = os.environ.get(PROMPTS_ENV)
    if env:
        return Path(env)
    return resources.files("evaluator.data").joinpath("prompts")


def prompt_bytes(name: str) -> bytes:
    folder = prompts_dir()
    try:
        return folder.joinpath(name).read_bytes()
    except OSError as exc:
        where = f"{PROMPTS_ENV}={folder}" if os.environ.get(PROMPTS_ENV) else str(folder)
        raise PromptError(
            f"prompt file {name} cannot be read from {where} ({exc.strerror or type(exc).__name__}); "
            f"point {PROMPTS_ENV} at a folder that has it, or reinstall the package"
        ) from None


def prompt_text(name: str) -> str:
    return prompt_bytes(name).decode("utf-8")
