"""Request bodies: built from a sample, hashed as sent. Pure."""

from __future__ import annotations

import base64
import json
from typing import Any

from evaluator.core.errors import UserError
from evaluator.core.jsonl import JSONObject
from evaluator.core.records import Sampling
from evaluator.data.benchmarks.base import Benchmark, Sample, sniff_image_mime

# Keys the evaluator owns; --extra-body-json may not set them.
RESERVED_KEYS = frozenset(
    {"model", "messages", "stream", "n", "temperature", "top_p", "max_tokens", "max_completion_tokens"}
)


class RequestBuildError(UserError):
    pass


def validate_extra_body(extra: Any) -> JSONObject:
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


def _body(
    benchmark: Benchmark, sample: Sample, model: str, sampling: Sampling, url: str, seed: int | None = None
) -> JSONObject:
    body: JSONObject = {"model": model, "messages": benchmark.messages(sample, url)}
    body.update(sampling_fields(sampling))
    body.update(sampling.extra_body)
    if seed is not None:  # --seed: one integer per question and repeat (evaluator.core.records.derive_seed)
        body["seed"] = seed
    return body


def sampling_fields(sampling: Sampling) -> JSONObject:
    """The sampling part of a request body: a None value is left out, the output limit goes by its chosen name."""
    fields = {
        "temperature": sampling.temperature,
        "top_p": sampling.top_p,
        sampling.max_tokens_field: sampling.max_tokens,
    }
    return {k: v for k, v in fields.items() if v is not None}


def build_body(
    benchmark: Benchmark, sample: Sample, model: str, sampling: Sampling, seed: int | None = None
) -> JSONObject:
    if sample.image is None:
        raise RequestBuildError("sample has no image bytes")
    return _body(benchmark, sample, model, sampling, image_data_url(sample.image), seed)


def canonical_json(body: JSONObject) -> bytes:
    return json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


# Stands in for the data URL while the rest of the body is encoded (a body that happens to contain it
# elsewhere takes the plain path).
_URL_SLOT = "\x00doccount-image-data-url\x00"
_URL_SLOT_JSON = json.dumps(_URL_SLOT).encode("ascii")


def request_bytes(
    benchmark: Benchmark, sample: Sample, model: str, sampling: Sampling, seed: int | None = None
) -> bytes:
    """`canonical_json(build_body(...))`, byte for byte: a data URL is ASCII that JSON never escapes, so the
    body is encoded around a placeholder and the base64 bytes spliced in (no encoder pass over ~1 MB)."""
    if sample.image is None:
        raise RequestBuildError("sample has no image bytes")
    mime = sniff_image_mime(sample.image)
    if mime is None:
        raise RequestBuildError("image bytes are not JPEG, PNG, GIF or WebP")
    skeleton = canonical_json(_body(benchmark, sample, model, sampling, _URL_SLOT, seed))
    head, found, tail = skeleton.partition(_URL_SLOT_JSON)
    if not found or _URL_SLOT_JSON in tail:  # the placeholder is not where only the URL can be
        return canonical_json(build_body(benchmark, sample, model, sampling, seed))
    prefix = f'"data:{mime};base64,'.encode("ascii")
    return b"".join((head, prefix, base64.b64encode(sample.image), b'"', tail))
