"""JSON Lines decoding and encoding for the run files: fast where exact, the stdlib where not.

Decoding: msgspec decodes a line to the same Python value as `json.loads` whenever it accepts it
(integers of any size stay exact, floats are correctly rounded), and it refuses everything that is not
strict JSON in UTF-8 (NaN, Infinity, lone surrogates, a BOM, invalid UTF-8). Those lines, and only
those, go through `json.loads`, so a line that the stdlib reads is read to the same value, and a line it
refuses is refused. Lines read that way are "lenient": their values may hold things strict JSON cannot
say (NaN, a lone surrogate), which the encoder must not lose.

Encoding (responses.jsonl, one line per row): msgspec's compact form with sorted keys, UTF-8
(`{"a":1,"b":"é"}`), which is what `json.dumps(row, sort_keys=True, ensure_ascii=False,
separators=(",", ":"))` writes except for the spelling of some floats (msgspec writes the shortest
round-trip form `0.00001`, the stdlib `1e-05`). A row built from a lenient line, or one msgspec cannot
encode, is written by the stdlib with ASCII escapes (`json.dumps(row, sort_keys=True,
separators=(",", ":"))`), which keeps NaN as NaN and a lone surrogate as `\\ud800` instead of
turning them into null or failing. The choice depends only on the row, so re-encoding is byte-identical.

Type tests for values read from JSON (records, run_config.json), where a bool is not a number. Pure.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, BinaryIO, TypeGuard

import msgspec

JSONObject = dict[str, Any]
"""A JSON object whose keys are not known in advance, as read or to be written: a record line as a file
holds it (checked where it is read), subgroup fields, a request's extra body fields, what a server reported.
Values with a known shape have their own types (Structs, TypedDicts)."""

_DECODER = msgspec.json.Decoder()
_ENCODER = msgspec.json.Encoder(order="sorted")
# RecursionError: nesting deeper than either decoder goes (json.loads refuses it too: a bad line).
_STRICT_ERRORS = (msgspec.DecodeError, msgspec.ValidationError, RecursionError)


# Python strings may hold lone surrogates (a server can send "\ud800" in JSON); they have no UTF-8 form.
# A str holds a valid pair as one code point, so every code point in this range is alone.
LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def _finite(obj: Any) -> Any:
    """obj with every non-finite float replaced by None."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite(v) for v in obj]
    return obj


def utf8_json(obj: Any, **dumps_options: Any) -> bytes:
    """json.dumps(obj, ensure_ascii=False, ...) as UTF-8, with a lone surrogate kept as its \\uXXXX escape.

    Inside JSON a raw surrogate can only stand in a string, where the escape reads back to the same text.
    """
    try:
        text = json.dumps(obj, ensure_ascii=False, allow_nan=False, **dumps_options)
    except ValueError:  # JSON has no Infinity or NaN: such a number is written as null, never as a token
        text = json.dumps(_finite(obj), ensure_ascii=False, allow_nan=False, **dumps_options)
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        return LONE_SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", text).encode("utf-8")


def utf8_text(text: str) -> bytes:
    """Text for people (Markdown, HTML) as UTF-8; a lone surrogate shows as U+FFFD."""
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        return LONE_SURROGATE.sub("\ufffd", text).encode("utf-8")


def printable(text: str) -> str:
    """`text` with every lone surrogate as U+FFFD, for a terminal."""
    return utf8_text(text).decode("utf-8")


class NotJSON(ValueError):
    """The line is not JSON for `json.loads` either."""


def decode_line(line: bytes) -> tuple[Any, bool]:
    """(value, lenient) of one line; raises NotJSON when json.loads would refuse it too."""
    try:
        return _DECODER.decode(line), False
    except _STRICT_ERRORS:
        pass
    try:
        return json.loads(line), True
    except (ValueError, RecursionError):
        raise NotJSON(line[:80]) from None


def split_lines(data: bytes) -> list[memoryview]:
    """The newline-separated segments of `data` as zero-copy views (the last may be empty or torn).

    bytes.split would copy the whole file once more (200 MB for a 100k-record run) only to decode it.
    """
    view = memoryview(data)
    find = data.find
    lines: list[memoryview] = []
    start = 0
    while True:
        end = find(b"\n", start)
        if end < 0:
            lines.append(view[start:])
            return lines
        lines.append(view[start:end])
        start = end + 1


def decode_strict_lines(lines: Sequence[bytes | memoryview]) -> list[Any] | None:
    """Every line decoded, when each one is strict JSON (then each value is what json.loads gives); else None.

    The fast path for a clean file: one C call per line and no Python-level error handling per line.
    """
    try:
        return list(map(_DECODER.decode, lines))
    except _STRICT_ERRORS:
        return None


def encode_row(row: Any, lenient: bool = False) -> bytes:
    """One row as one line (with its newline)."""
    if not lenient:
        try:
            return _ENCODER.encode(row) + b"\n"
        except (UnicodeEncodeError, TypeError, OverflowError, ValueError):
            pass
    # the stdlib form for rows strict JSON cannot carry: sorted keys, compact, ASCII escapes
    return json.dumps(row, sort_keys=True, separators=(",", ":")).encode("ascii") + b"\n"


def encode_rows(rows: Sequence[Any], lenient: Iterable[int] = ()) -> bytes:
    """The lines of `rows` (each with its newline); `lenient` lists the indices of lenient rows.

    The same bytes as joining `encode_row(row, i in lenient)`, in one msgspec call when it can.
    """
    marked = set(lenient)
    if not marked:
        try:
            return _ENCODER.encode_lines(rows)
        except (UnicodeEncodeError, TypeError, OverflowError, ValueError):
            pass  # a row msgspec cannot encode: row by row below
    return b"".join(encode_row(row, i in marked) for i, row in enumerate(rows))


def file_lines(f: BinaryIO, cap: int) -> Iterator[bytes]:
    """The newline-separated lines of a binary file from its start, one at a time (the file is never held
    whole); a line longer than `cap` bytes is skipped, read past in pieces of `cap`."""
    f.seek(0)
    while True:
        line = f.readline(cap + 1)
        if not line:
            return
        if len(line) <= cap:
            yield line
            continue
        while line and not line.endswith(b"\n"):  # the rest of the long line
            line = f.readline(cap + 1)


def is_int(v: Any) -> TypeGuard[int]:
    return isinstance(v, int) and not isinstance(v, bool)


def is_num(v: Any) -> TypeGuard[int | float]:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def object_at(d: Mapping[str, Any], key: str) -> JSONObject:
    """d[key] when it is a JSON object, else an empty one (a summary or config read back may hold anything)."""
    v = d.get(key)
    return v if isinstance(v, dict) else {}


MAX_PRICE = 10_000.0  # USD per 1M tokens: 15 times the dearest price listed anywhere (above it: an error)


def is_price(v: Any) -> bool:
    """A price a pricing table may hold: a finite number from 0 to MAX_PRICE (USD per 1M tokens)."""
    return is_num(v) and math.isfinite(v) and 0 <= v <= MAX_PRICE
