"""The trust boundary (evaluator/core/boundary.py), pure: whatever a server puts where, in whatever
encoding and type, no 8-character piece of the key survives, counts are integers, ids are strings."""

from __future__ import annotations

import base64
import binascii
import contextlib
import json
import re
from urllib.parse import quote, quote_plus, unquote, unquote_plus

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.measure import measured

from evaluator.core.boundary import (
    MAX_COUNT,
    REDACTED,
    KeyFilter,
    ShapeError,
    clip,
    error_text,
    parse_json,
    safe_headers,
    sanitize_completion,
    sanitize_usage,
    terminal_text,
)
from evaluator.core.unescape import _ESCAPE, _unescape, decoded_views

KEY_CHARS = st.sampled_from("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_+/=.~")
KEYS = st.text(KEY_CHARS, min_size=20, max_size=60)
FILLER = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=200)
CLIPS = (80, 120, 300, 400, 500, 1500, 2000)


def pieces(key: str) -> list[str]:
    return [key[i : i + 8] for i in range(len(key) - 7)]


def assert_no_piece(key: str, text: str) -> None:
    for p in pieces(key):
        assert p not in text, (p, text)


def b64_runs_decode_to(text: str) -> list[bytes]:
    """Every run of base64 characters in text, decoded at each of its four alignments."""
    out = []
    for run in re.findall(r"[A-Za-z0-9+/_-]{8,}", text):
        run = run.replace("-", "+").replace("_", "/")
        for skip in range(4):
            part = run[skip:]
            part = part[: len(part) // 4 * 4]
            with contextlib.suppress(binascii.Error, ValueError):
                out.append(base64.b64decode(part, validate=True))
    return out


@settings(max_examples=200, deadline=None)
@given(key=KEYS, before=FILLER, after=FILLER, user=st.text(KEY_CHARS, max_size=12), how=st.integers(0, 6))
def test_the_key_is_removed_in_every_encoding(key: str, before: str, after: str, user: str, how: int) -> None:
    keys = KeyFilter(key)
    plain = before + key + after
    encoded, decode = [
        (plain, str),
        (json.dumps(plain), json.loads),
        (json.dumps(plain, ensure_ascii=False), json.loads),
        (quote(plain, safe=""), unquote),
        (quote_plus(plain, safe=""), unquote_plus),
        (f"Authorization: Basic {base64.b64encode(f'{user}:{key}'.encode()).decode()}", None),
        (base64.urlsafe_b64encode(plain.encode()).decode(), None),
    ][how]
    out = keys(encoded)
    assert REDACTED in out
    if decode is not None:
        # a key that runs into a \u escape takes the escape's digits with it: nothing left to decode then
        with contextlib.suppress(ValueError):
            assert_no_piece(key, decode(out))
    else:
        for blob in b64_runs_decode_to(out):
            assert key.encode() not in blob
    assert_no_piece(key, out)


@settings(max_examples=150, deadline=None)
@given(key=KEYS, limit=st.sampled_from(CLIPS), shift=st.integers(-70, 10), tail=FILLER)
def test_clipping_after_redaction_leaves_no_piece_at_any_clip_length(
    key: str, limit: int, shift: int, tail: str
) -> None:
    """The key straddles the clip: it starts `shift` characters away from the cut."""
    at = max(0, limit + shift)
    text = "x" * at + key + tail
    shown = clip(KeyFilter(key)(text), limit)
    assert len(shown) <= limit
    assert_no_piece(key, shown)


@settings(max_examples=100, deadline=None)
@given(key=KEYS, start=st.integers(0, 40), length=st.integers(8, 60), around=FILLER)
def test_a_piece_of_the_key_cut_by_the_server_is_removed(
    key: str, start: int, length: int, around: str
) -> None:
    piece = key[start : start + length]
    if len(piece) < 8:
        return
    out = KeyFilter(key)(around + piece + around)
    assert_no_piece(key, out)


def test_without_a_key_text_is_unchanged_and_short_keys_have_no_pieces() -> None:
    assert KeyFilter(None)("anything sk-123") == "anything sk-123"
    assert KeyFilter("  \r\n")("x") == "x"
    assert KeyFilter("EMPTY")("EMPTY reply EMPT") == f"{REDACTED} reply EMPT"


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda kids: st.lists(kids, max_size=3) | st.dictionaries(st.text(max_size=5), kids, max_size=3),
    max_leaves=8,
)


@settings(max_examples=200, deadline=None)
@given(values=st.dictionaries(st.sampled_from(["prompt_tokens", "completion_tokens", "total_tokens"]), JSON))
def test_counts_are_non_negative_integers_or_dropped_with_a_note(values: dict) -> None:
    counts, notes = sanitize_usage(values)
    for name, value in values.items():
        ok = isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_COUNT
        assert counts[name] == (value if ok else None)
        assert any(f"usage.{name} " in n for n in notes) == (value is not None and not ok)
    assert all(v is None or (type(v) is int and v >= 0) for v in counts.values())


def test_detail_counts_are_typed_too() -> None:
    counts, notes = sanitize_usage(
        {
            "completion_tokens_details": {"reasoning_tokens": "7"},
            "prompt_tokens_details": {"cached_tokens": 3},
        }
    )
    assert counts["reasoning_tokens"] is None and counts["cached_tokens"] == 3
    assert notes == [
        "usage.completion_tokens_details.reasoning_tokens was str, dropped (counts are non-negative integers)"
    ]
    assert sanitize_usage({"total_tokens": 10**30})[0]["total_tokens"] is None
    assert sanitize_usage("lots")[1] == ["usage was str, dropped"]


def _reply(**top) -> dict:
    message = {"role": "assistant", "content": top.pop("content", "<answer>3</answer>")}
    choice = {"index": 0, "message": message, "finish_reason": top.pop("finish_reason", "stop")}
    return {"id": "c-1", "model": "m", "choices": [choice], **top}


@settings(max_examples=150, deadline=None)
@given(
    key=KEYS,
    field=st.sampled_from(["finish_reason", "id", "model", "system_fingerprint"]),
    shape=st.sampled_from(["str", "list", "dict", "nested", "number"]),
    pad=st.integers(0, 400),
)
def test_string_fields_are_strings_without_the_key(key: str, field: str, shape: str, pad: int) -> None:
    s = "p" * pad + key
    value = {"str": s, "list": [s, "stop"], "dict": {s: s}, "nested": {"a": [{"b": s}]}, "number": 7}[shape]
    keys = KeyFilter(key)
    payload = parse_json(json.dumps(_reply(**{field: value})).encode(), keys)
    safe, notes = sanitize_completion(payload, keys)
    got = {"finish_reason": safe.finish_reason, "id": safe.response_id, "model": safe.model}
    got["system_fingerprint"] = safe.system_fingerprint
    assert isinstance(got[field], str)
    strings = [v for v in safe.__dict__.values() if isinstance(v, str)]
    assert_no_piece(key, json.dumps(strings, ensure_ascii=False))
    assert bool(notes) == (shape != "str")
    assert all(key not in n and "p" * 8 not in n for n in notes)  # notes name types, not values


def test_a_key_hidden_by_json_escapes_is_removed_once_decoded() -> None:
    key = "sk-test-0123456789abcdef"
    escaped = "".join(f"\\u{ord(c):04x}" for c in key)
    raw = json.dumps(_reply()).replace('"c-1"', f'"{escaped}"').encode()
    keys = KeyFilter(key)
    safe, _ = sanitize_completion(parse_json(raw, keys), keys)
    assert safe.response_id == REDACTED


@pytest.mark.parametrize(
    "raw, error",
    [
        (b"[" * 100_000 + b"]" * 100_000, "nested too deeply"),
        (b"\xff\xfe not text", "not UTF-8"),
        (b"<html>busy</html>", "not JSON"),
        (b"[1, 2]", "JSON list"),
        (b'{"choices": []}', "no choices"),
        (b'{"choices": [{"message": {"content": 5}}]}', "content has type int"),
    ],
)
def test_replies_that_are_not_completions_are_shape_errors(raw: bytes, error: str) -> None:
    keys = KeyFilter("sk-secret-0123456789")
    with pytest.raises(ShapeError, match=error):
        sanitize_completion(parse_json(raw, keys), keys)


def test_reasoning_and_parts_content_are_redacted() -> None:
    key = "sk-test-0123456789abcdef"
    payload = _reply(content=[{"type": "text", "text": f"a {key}"}, {"type": "image"}])
    payload["choices"][0]["message"]["reasoning_content"] = f"think {key[:12]}"
    payload["usage"] = {"prompt_tokens": key, "total_tokens": 12}
    keys = KeyFilter(key)
    safe, notes = sanitize_completion(payload, keys)
    assert safe.response_text == f"a {REDACTED}" and safe.reasoning_text == f"think {REDACTED}"
    assert safe.usage["prompt_tokens"] is None and safe.usage["total_tokens"] == 12
    assert notes == ["usage.prompt_tokens was str, dropped (counts are non-negative integers)"]


@settings(max_examples=100, deadline=None)
@given(
    key=KEYS,
    limit=st.sampled_from(CLIPS),
    shift=st.integers(-70, 10),
    kind=st.sampled_from(["html", "json", "list"]),
)
def test_error_bodies_are_redacted_before_they_are_clipped(
    key: str, limit: int, shift: int, kind: str
) -> None:
    text = "e" * max(0, limit + shift) + key + " more"
    raw = {
        "html": f"<html><body>{text}</body></html>",
        "json": json.dumps({"error": {"message": text, "code": key}}),
        "list": json.dumps([{"error": {"message": [text]}}]),
    }[kind]
    message, body = error_text(raw.encode(), KeyFilter(key), limit)
    assert len(message) <= limit
    assert_no_piece(key, message)
    assert_no_piece(key, json.dumps(body))


def test_headers_are_lower_cased_and_redacted() -> None:
    key = "sk-test-0123456789abcdef"
    assert safe_headers({"X-Echo": f"Bearer {key}", "Retry-After": "1"}, KeyFilter(key)) == {
        "x-echo": f"Bearer {REDACTED}",
        "retry-after": "1",
    }


BATCH_SPOTS = ["finish_reason", "id", "usage", "error_message", "error_code", "body_error", "content"]


@settings(max_examples=80, deadline=None)
@given(
    key=KEYS,
    spot=st.sampled_from(BATCH_SPOTS),
    shape=st.sampled_from(["str", "list", "dict"]),
    pad=st.sampled_from([0, 280, 490, 1490]),
)
def test_batch_output_lines_pass_the_boundary(key: str, spot: str, shape: str, pad: int) -> None:
    """A provider's batch output file is server bytes too: the same rules hold for its lines."""
    from evaluator.core.secrets import Redactor
    from evaluator.evaluation.batch_files import results_of

    s = "q" * pad + key
    value = {"str": s, "list": [s], "dict": {s: s}}[shape]
    body = _reply(**({"usage": {"total_tokens": value}} if spot == "usage" else {}))
    if spot == "finish_reason":
        body["choices"][0]["finish_reason"] = value
    elif spot == "id":
        body["id"] = value
    elif spot == "content":
        body["choices"][0]["message"]["content"] = f"{s} <answer>2</answer>"
    line: dict = {
        "id": "r1",
        "custom_id": "doc-1#0#0",
        "response": {"status_code": 200, "body": body},
        "error": None,
    }
    if spot.startswith("error") or spot == "body_error":
        line["response"] = (
            {"status_code": 500, "body": {"error": {"message": value}}} if spot == "body_error" else None
        )
        line["error"] = (
            {"code": value, "message": "x"}
            if spot == "error_code"
            else {"code": "server_error", "message": value}
        )
    results = results_of(json.dumps(line).encode() + b"\n", Redactor(key), "t")
    (result,) = results.values()
    # the values only: field names such as "completion_tokens" are ours, and a key may share 8 letters
    values = [
        v
        for o in (result.completion, result.failure)
        if o is not None
        for v in msgspec.to_builtins(o).values()
    ]
    shown = json.dumps([v for v in values if isinstance(v, str)])
    assert_no_piece(key, shown)
    if result.completion is not None:
        c = result.completion
        assert all(
            isinstance(v, (str, type(None))) for v in (c.finish_reason, c.response_id, c.system_fingerprint)
        )
        assert all(v is None or type(v) is int for v in msgspec.structs.asdict(c.usage).values())


# Redaction bounded in memory and time at the reply size cap (trust3 #14): one byte of cover per character
# and a step per run of copies, instead of a span per piece found (a 15 MiB reply repeating the key took
# 1.9 GB and 19 s per row). The reference below is the span-based filter it replaced: outputs are equal.


def _reference_positions(source: str, rounds: int) -> tuple[list[int], list[int]]:
    text = source
    starts, ends = list(range(len(text))), list(range(1, len(text) + 1))
    for _ in range(rounds):
        new_s: list[int] = []
        new_e: list[int] = []
        at = 0
        for m in _ESCAPE.finditer(text):
            new_s += starts[at : m.start()] + [starts[m.start()]]
            new_e += ends[at : m.start()] + [ends[m.end() - 1]]
            at = m.end()
        new_s += starts[at:]
        new_e += ends[at:]
        text, starts, ends = _ESCAPE.sub(_unescape, text), new_s, new_e
    return starts, ends


def _reference_spans(kf: KeyFilter, text: str) -> list[tuple[int, int]]:
    spans = []
    for needle in [*kf.forms, *kf.pieces]:
        at = text.find(needle)
        while at != -1:
            spans.append((at, at + len(needle)))
            at = text.find(needle, at + 1)
    return spans


def _reference_redact(kf: KeyFilter, text: str) -> str:
    spans = _reference_spans(kf, text)
    for view in decoded_views(text):
        starts, ends = _reference_positions(text, view.rounds)
        spans += [(starts[s], ends[e - 1]) for s, e in _reference_spans(kf, view.text)]
    covered = [False] * len(text)
    for s, e in spans:
        covered[s:e] = [True] * (e - s)
    out, i = [], 0
    while i < len(text):
        if covered[i]:
            while i < len(text) and covered[i]:
                i += 1
            out.append(REDACTED)
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


_KEYS = ['sk-Ab%cd"ef/gh\\ij+kl==mnopqrstu', "abcabcabcabcabcab", "sk-aaaaaaaaaaaaaaaaaaaa", "xyzw1234"]


def _fragments(key: str) -> list[str]:
    return [
        key,
        key[:9],
        key[5:17],
        key[2:11],
        key[-9:],
        json.dumps(key)[1:-1],
        quote(key, safe=""),
        quote(key[3:14], safe="").lower(),
        base64.b64encode(key.encode()).decode(),
        *["%25", "%", "\\u0073", "&#115;", " ", "x", "\\", "%2F", "a"],
    ]


@settings(max_examples=300, deadline=None)
@given(
    st.sampled_from(_KEYS).flatmap(
        lambda k: st.tuples(st.just(k), st.lists(st.sampled_from(_fragments(k)), max_size=9))
    )
)
def test_redaction_equals_the_span_reference(case: tuple[str, list[str]]) -> None:
    key, parts = case
    kf, text = KeyFilter(key), "".join(parts)
    assert kf(text) == _reference_redact(kf, text)
    assert kf.found_in(text) == bool(
        _reference_spans(kf, text) or any(_reference_spans(kf, v.text) for v in decoded_views(text))
    )


_BENCH_KEY = "sk-bench-abcdefghijklmnopqrstuvwxyzABCDEF"


@pytest.mark.parametrize(
    "unit",
    [
        "KEY + ' '",  # the key, again and again
        "KEY[:20] + ' '",  # a piece of it, again and again
        "'%41' + KEY + ' '",  # with an escape in every copy: each copy found in a decoded view
    ],
)
def test_redacting_a_15_mib_reply_repeating_the_key_is_bounded(unit: str) -> None:
    cost = measured(
        f"from evaluator.core.boundary import KeyFilter\nKEY = {_BENCH_KEY!r}\nunit = {unit}\n"
        "text = unit * (15 * 2**20 // len(unit))\nkf = KeyFilter(KEY)",
        "out = kf(text)\nassert KEY[3:11] not in out",
        deadline_s=120,
    )
    assert cost["peak_mib"] < 400, cost
    assert cost["cpu_s"] < 20, cost
    print(f"15 MiB of {unit}: {cost}")


# Terminal text linear in its length (the same hole as trust3 #4): a string sequence (OSC, DCS, ...) was
# searched for its end from every opener, quadratic without a terminator (40 KB of "\x1b]" took 12 s).
_OLD_SEQUENCE = re.compile(
    r"(?:\x1b\[|\x9b)[0-?]*[ -/]*[@-~]"
    r"|(?:\x1b[\]P^_X]|[\x90\x98\x9d\x9e\x9f]).*?(?:\x07|\x1b\\|\x9c)"
    r"|\x1b.?",
    re.DOTALL,
)
_TERMINAL_PIECES = [
    "\x1b",
    "]",
    "[",
    "\\",
    "\x07",
    "\x9c",
    "\x9b",
    "\x90",
    "P",
    "0",
    ";",
    "m",
    "a",
    " ",
    "\n",
    "/",
]


@settings(max_examples=500, deadline=None)
@given(st.lists(st.sampled_from(_TERMINAL_PIECES), max_size=14).map("".join))
def test_terminal_text_equals_the_single_pattern(text: str) -> None:
    table = {c: None for c in (*range(0x20), *range(0x7F, 0xA0)) if chr(c) not in "\n\t"}
    expected = text if text.isprintable() else _OLD_SEQUENCE.sub("", text).translate(table)
    assert terminal_text(text) == expected


def test_terminal_text_is_linear_at_the_reply_cap() -> None:
    cost = measured(
        "from evaluator.core.boundary import terminal_text\ntext = '\\x1b]' * (8 * 2**20) + '\\x07' + '\\x1bP' * 2**20",
        "terminal_text(text)",
        deadline_s=60,
    )
    assert cost["cpu_s"] < 5, cost
