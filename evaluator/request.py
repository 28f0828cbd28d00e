"""Request bodies: built from a sample, hashed as sent. Pure."""

from __future__ import annotations

import base64
import hashlib
import json
from typing import Any

from evaluator.benchmarks.base import Benchmark, Sample, sniff_image_mime
from evaluator.records import Sampling

# Keys the evaluator owns; --extra-body-json may not set them.
RESERVED_KEYS = frozenset(
    {"model", "messages", "stream", "n", "temperature", "top_p", "max_tokens", "max_completion_tokens"}
)


class RequestBuildError(ValueError):
    pass


def validate_extra_body(extra: Any) -> dict[str, Any]:
    if not isinstance(extra, dict):
        raise RequestBuildError(
            f"--extra-body-json must be a JSON object, got {type(extra).__name__}; e.g. '{{\"top_k\": 20}}'"
        )
    reserved = sorted(RESERVED_KEYS & set(extra))
    if reserved:
        raise RequestBuildError(
            f"--extra-body-json sets {', '.join(reserved)}, which the evaluator owns; use the matching "
            "flag (--model, --temperature, --top-p, --max-tokens) or drop the key"
        )
    return extra


def image_data_url(image: bytes) -> str:
    mime = sniff_image_mime(image)
    if mime is None:
        raise RequestBuildError("image bytes are not JPEG, PNG, GIF or WebP")
    return f"data:{mime};base64,{base64.b64encode(image).decode('ascii')}"


def build_body(benchmark: Benchmark, sample: Sample, model: str, sampling: Sampling) -> dict[str, Any]:
    if sample.image is None:
        raise RequestBuildError("sample has no image bytes")
    body: dict[str, Any] = {
        "model": model,
        "messages": benchmark.messages(sample, image_data_url(sample.image)),
        "temperature": sampling.temperature,
        "top_p": sampling.top_p,
        "max_tokens": sampling.max_tokens,
    }
    body.update(sampling.extra_body)
    return body


def canonical_json(body: dict[str, Any]) -> bytes:
    return json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def body_sha256(body: dict[str, Any]) -> str:
    """SHA-256 of the canonical JSON body (image included; credentials live in headers, never here)."""
    return hashlib.sha256(canonical_json(body)).hexdigest()
