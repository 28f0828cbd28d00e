"""The response record: one JSON object per line in responses.partial.jsonl (and, merged, responses.jsonl).

One typed, versioned model (msgspec Structs, like evaluator.runfolder.runconfig.RunConfig and inspect_ai's
log records: a docstring per field). Field names are part of the outside contract (README, "Response
record"). Written by `ResponseRecord.to_line`; `msgspec.to_builtins` is the one way any part of a record
becomes JSON-ready data. Bump RECORD_SCHEMA_VERSION when a field changes meaning; a record without the
field was written before records carried a version (0).

Read back, a line is a `RecordLine` (what ResponseRecord narrows for writing), and may be old or damaged
(hand-edited, crafted): `read_record` decodes it strictly when it can and otherwise field by field
(evaluator.core.records), a field of the wrong JSON type read as None (or empty), never as a value of
another type; a label (status, parse_status, finish_reason) keeps its text. The scorer's row
(evaluator.scoring.row.ScoredRow) is a RecordLine plus the scorer's fields.

Which fields a line holds: every field is written, except the ones added with a feature (marked "left out
at its default" below), which are left out while they hold their default so that records made without
the feature keep their bytes. msgspec's `omit_defaults` does that for plain defaults; the fields that are
always written take their default from a factory (`written`), which msgspec never omits.

The (sample_id, repeat) key of a record and the per-request seed. Pure.

* `derive_seed(S, sample_id, repeat)`: the integer sent as `seed` with `--seed S`. A SHA-256 of the
  three values, so it is the same on every run and on resume, and differs between questions and
  between repeats. It is kept in 0 .. 2**31 - 1: vLLM takes any signed 64-bit seed (its request
  model bounds `seed` by int64), OpenAI's chat API an integer, and some OpenAI-compatible providers
  (Gemini's generationConfig.seed) a 32-bit one; a non-negative 31-bit value fits all of them.
* `record_key(record)`: (sample_id, repeat); a record without `repeat` (every run without
  `--repeats`) is repeat 0.

Lenient decoding: a msgspec Struct read from JSON that may be damaged (a hand-edited or crafted file).

`lenient_struct` reads each field the Struct declares (msgspec.structs.fields) on its own with msgspec's
strict converter; a field that does not convert is replaced by a value of its declared type, never by a
value of another one. The fields come from the Struct itself, so a field added to it is read here with no
other edit. Pure.
The replacement (`replacement`): a label keeps its text; a Struct or list keeps what converts of it;
else None where allowed, else an empty or zero value. A missing required field is read as if it held null.
"""

from __future__ import annotations

import hashlib
import types
import typing
from collections.abc import Iterable
from typing import Annotated, Any, Literal, TypeVar

import msgspec

from evaluator.core.jsonl import JSONObject, utf8_json

S = TypeVar("S", bound=msgspec.Struct)

LABEL = msgspec.Meta(extra={"lenient": "label"})
"""Annotated[str | None, LABEL]: a text that keeps its text when it is not a string (5 reads as "5")."""

_ZERO: dict[Any, Any] = {str: "", int: 0, float: 0.0, bool: False}


def lenient(value: Any, tp: Any) -> Any:
    """`value` as type `tp`: msgspec's strict conversion, or the replacement of its declared type."""
    try:
        return msgspec.convert(value, tp)
    except msgspec.ValidationError:
        return replacement(value, tp)


def lenient_struct(cls: type[S], obj: dict[str, Any]) -> S:
    """An instance of `cls` from a JSON object, field by field (see the module docstring)."""
    values: dict[str, Any] = {}
    for f in msgspec.structs.fields(cls):
        if f.encode_name in obj:
            values[f.name] = lenient(obj[f.encode_name], f.type)
        elif f.required:
            values[f.name] = lenient(None, f.type)
    return cls(**values)


def _is_struct(tp: Any) -> bool:
    return isinstance(tp, type) and issubclass(tp, msgspec.Struct)


def replacement(value: Any, tp: Any) -> Any:
    """The value of type `tp` that stands for `value`, which did not convert to it."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is typing.Annotated:
        if LABEL in args[1:] and not (value is None and type(None) in typing.get_args(args[0])):
            return str(value)
        return replacement(value, args[0])
    if origin in (typing.Union, types.UnionType):
        return _union(value, args)
    if _is_struct(tp):
        return lenient_struct(tp, value if isinstance(value, dict) else {})
    if origin is list:
        return _list(value, args[0])
    if origin is dict or tp is dict:
        return {}
    if origin is Literal:
        return args[0]
    if tp in _ZERO:
        return _ZERO[tp]
    raise TypeError(f"no lenient replacement for {tp!r}")


def _union(value: Any, args: tuple[Any, ...]) -> Any:
    for member in args:
        if _is_struct(member) and isinstance(value, dict):
            return lenient_struct(member, value)
        if typing.get_origin(member) is list and isinstance(value, list):
            return _list(value, typing.get_args(member)[0])
    if type(None) in args:
        return None
    return replacement(value, args[0])


def _list(value: Any, item: Any) -> list[Any]:
    if not isinstance(value, list):
        return []
    if _is_struct(item):
        return [lenient_struct(item, x) for x in value if isinstance(x, dict)]
    out = []
    for x in value:
        try:
            out.append(msgspec.convert(x, item))
        except msgspec.ValidationError:
            continue  # an element of the wrong type is left out, not replaced
    return out


RECORD_SCHEMA_VERSION = 1

Status = Literal["ok", "request_error", "data_error", "missing"]
# "missing" is written only by the scorer, for questions that have no record at all.

MAX_TOKENS_FIELDS = ("max_tokens", "max_completion_tokens")
DEFAULT_MAX_TOKENS_FIELD = MAX_TOKENS_FIELDS[0]

Label = Annotated[str | None, LABEL]
"""A text read back as its text when it is not a string (5 reads as "5"; lenient_struct above)."""


def written(default: Any) -> Any:
    """A default that is written like any other value (a factory: omit_defaults leaves it alone)."""
    if isinstance(default, list):
        return msgspec.field(default_factory=lambda: [])
    return msgspec.field(default_factory=lambda: default)


class Usage(msgspec.Struct, omit_defaults=True):
    """Token counts a reply reported (evaluator.core.usage)."""

    prompt_tokens: int | None = written(None)
    completion_tokens: int | None = written(None)
    total_tokens: int | None = written(None)
    reasoning_tokens: int | None = None
    """usage.completion_tokens_details.reasoning_tokens; left out at its default (not reported)."""
    cached_tokens: int | None = None
    """usage.prompt_tokens_details.cached_tokens; left out at its default (not reported)."""


class Sampling(msgspec.Struct, omit_defaults=True):
    """The sampling fields of every request. None: the field is left out of the request."""

    temperature: float | None
    top_p: float | None
    max_tokens: int | None
    extra_body: JSONObject = msgspec.field(default_factory=lambda: {})
    """Extra request fields (--extra-body-json)."""
    max_tokens_field: str = DEFAULT_MAX_TOKENS_FIELD
    """The name the output limit is sent under (MAX_TOKENS_FIELDS); left out at its default."""

    def __post_init__(self) -> None:
        # omit_defaults compares a string default by identity: an equal string read from a flag or a
        # preset must be the default object itself to be left out like it.
        if self.max_tokens_field == DEFAULT_MAX_TOKENS_FIELD:
            self.max_tokens_field = DEFAULT_MAX_TOKENS_FIELD


class RetryError(msgspec.Struct, omit_defaults=True):
    """One failed HTTP attempt (kept so a record shows every fault it survived)."""

    attempt: int
    """1-based attempt number (0 for a batch line's own failure, the input line number for a failed batch)."""
    kind: str
    """connection, timeout, http_status, malformed_response, empty_content, ... (evaluator.request.client)."""
    message: str
    """What went wrong, redacted and clipped."""
    status_code: int | None = written(None)
    """The HTTP status, when there was one."""
    retry_after_s: float | None = written(None)
    """The wait the server asked for (Retry-After and the like)."""
    at: str | None = written(None)
    """When the attempt failed (UTC, ISO 8601)."""
    endpoint: str | None = written(None)
    """The endpoint, when several share the run."""
    usage: Usage | None = None
    """The failed reply's usage, when it reported one; left out at its default."""
    wait_s: float | None = None
    """The pause before the next attempt (for a rate limit: every worker's); left out at its default."""
    paced: bool | None = None
    """True: a rate-limit refusal with a wait, not charged to --max-retries; left out at its default."""


class ResponseAttempt(msgspec.Struct, omit_defaults=True):
    """An earlier completed response that failed to parse (kept with --retry-parse-failures)."""

    response_text: str | None
    reasoning_text: str | None
    parse_status: str
    finish_reason: str | None
    response_id: str | None
    usage: Usage
    latency_s: float | None
    attempts: int
    retry_errors: list[RetryError] = written([])
    started_at: str | None = written(None)
    finished_at: str | None = written(None)


class RecordLine(msgspec.Struct, omit_defaults=True, kw_only=True):
    """One question's (and repeat's) outcome: what was sent, what came back, how it parsed; as a line read
    back holds it (`read_record`). ResponseRecord (what evaluate writes) narrows the fields every record it
    writes holds; the scorer's row (evaluator.scoring.row.ScoredRow) adds the scorer's fields. A line read
    back (an old record, the scorer's `missing` row) may lack a request, times, usage and attempts, and
    its status and parse_status keep their text whatever it is."""

    sample_id: str
    """The question's id (DocCount: the row's sample_id; CountQA: image and question index)."""
    benchmark: str
    """Benchmark name (`doccount`, `countqa`)."""
    groups: JSONObject
    """Subgroup fields, e.g. {"target_class": "Table"}; also lifted to the top level of the line."""
    ground_truth: int | None
    """The true count, as the data gave it."""
    model: str
    """Model id sent in the request."""
    backend: str
    """`api` or `vllm`."""
    sampling: Sampling | None = None
    """The sampling fields sent."""
    started_at: str | None = None
    """When the row's first attempt started (UTC, ISO 8601)."""
    finished_at: str | None = None
    """When the row's last attempt ended."""
    status: Annotated[str, LABEL]
    """`ok` (a reply came back), `request_error` or `data_error` (Status)."""
    schema_version: int = 0
    """RECORD_SCHEMA_VERSION of the code that wrote the record; 0 (left out): written before there was one."""
    response_text: str | None = written(None)
    """The reply's visible text (redacted)."""
    reasoning_text: str | None = written(None)
    """The reply's reasoning text, when the server sent one apart."""
    parsed_answer: int | None = written(None)
    """The answer the benchmark's parser read, or null."""
    parse_status: Label = None
    """How parsing went: ok, no_tag, multiple_tags, unclosed_tag, not_final, not_integer, no_number, no_response."""
    correct: bool = written(False)
    """parsed_answer equals ground_truth (score recomputes it against the manifest)."""
    fallback_answer: int | None = written(None)
    """The last integer in the reply: diagnostic only, never the primary answer."""
    finish_reason: Label = written(None)
    latency_s: int | float | None = written(None)
    """Seconds of the answered attempt (an int, as an old or hand-made line may hold it, stays an int)."""
    usage: Usage | None = None
    response_id: str | None = written(None)
    system_fingerprint: str | None = written(None)
    endpoint: str | None = written(None)
    """The endpoint that answered."""
    attempts: int | None = None
    """HTTP attempts of the last send."""
    retry_errors: list[RetryError] = written([])
    """Every failed attempt of the last send."""
    earlier_attempts: list[ResponseAttempt] = written([])
    """Parse-failed sends before the last one (--retry-parse-failures)."""
    request_error: str | None = written(None)
    data_error: str | None = written(None)
    request_sha256: str | None = written(None)
    """SHA-256 of the canonical JSON request body as sent (image included, no credentials)."""
    image_sha256: str | None = written(None)
    inline_think: bool = False
    """A <think> block in the visible text; left out at its default."""
    seed: int | None = None
    """The request's seed (--seed); left out at its default."""
    repeat: Annotated[int, msgspec.Meta(ge=0)] | None = None
    """The repeat index 0..K-1 (--repeats K > 1); left out at its default. Read back: None when it is not a
    non-negative int."""
    batch_id: str | None = None
    """The batch that answered the row (--batch, `doccount batch collect`); left out at its default."""
    protocol_anomalies: list[str] = msgspec.field(default_factory=list)
    """What the server sent that broke the protocol (core.boundary): field names and JSON types only; left
    out at its default."""


class ResponseRecord(RecordLine, kw_only=True):
    """A record as evaluate writes it: the fields every record holds, with their written defaults."""

    sampling: Sampling
    started_at: str
    finished_at: str
    status: Status
    parse_status: str = written("no_response")
    attempts: int = written(0)
    usage: Usage = msgspec.field(default_factory=lambda: Usage())

    def to_dict(self) -> JSONObject:
        """The record as JSON-ready data; group fields are also lifted to the top level."""
        d: JSONObject = msgspec.to_builtins(self)
        for k, v in self.groups.items():
            d.setdefault(k, v)
        return d

    def to_line(self) -> bytes:
        """One line of responses.partial.jsonl (sorted keys, UTF-8), with its newline.

        A lone surrogate (a server can send "\\ud800" in a JSON string) has no UTF-8 form; it is written
        as its JSON escape, which reads back to the same text (evaluator.core.jsonl.utf8_json).
        """
        return utf8_json(self.to_dict(), sort_keys=True) + b"\n"


def read_record(cls: type[S], line: JSONObject) -> S:
    """A record (or a Struct made of its fields, such as the scorer's row) from a line read back.

    A line whose every field has its declared type (what the evaluator writes) is converted by msgspec
    (C speed: a 100k-row run); any other goes field by field (evaluator.core.records). Both give the same
    value (tests/test_scored_row.py, tests/test_record_schema.py)."""
    try:
        return msgspec.convert(line, cls)
    except msgspec.ValidationError:
        return lenient_struct(cls, line)


SEED_MODULUS = 2**31  # derived seeds are 0 .. 2**31 - 1 (see the module docstring)

Key = tuple[str, int]


def derive_seed(base: int, sample_id: str, repeat: int = 0) -> int:
    """The request seed for one question and repeat under `--seed base`: the first 8 bytes of
    sha256(f"doccount-seed-v1:{base}:{repeat}:{sample_id}"), big-endian, mod 2**31."""
    digest = hashlib.sha256(f"doccount-seed-v1:{base}:{repeat}:{sample_id}".encode()).digest()
    return int.from_bytes(digest[:8], "big") % SEED_MODULUS


def record_repeat(record: JSONObject) -> int | None:
    """The record's repeat index (0 when absent); None when it is there but not a non-negative int."""
    r = record.get("repeat", 0)
    if r is None:
        return 0
    if isinstance(r, bool) or not isinstance(r, int) or r < 0:
        return None
    return r


def record_key(record: JSONObject) -> Key:
    return (record["sample_id"], record_repeat(record) or 0)


def unit_keys(sample_ids: Iterable[str], repeats: int) -> list[Key]:
    """Every (question, repeat) a run must answer, question by question."""
    return [(sid, r) for sid in sample_ids for r in range(repeats)]
