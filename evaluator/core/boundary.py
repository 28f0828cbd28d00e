"""The trust boundary: every byte a server sends passes here before any other code reads it. Pure.

A server may be hostile or broken: it can echo the API key in any field, in any type, in any encoding,
and send counts that are not numbers. So, in this order:

1. `KeyFilter` removes the key from text, in every form it can take there: verbatim, JSON-escaped,
   URL-encoded (either case of hex), base64 of the key alone or inside `user:key` (Basic auth, whatever
   the user part), and any piece of 8 or more characters of it (a server that cut its own text mid-key);
   and it looks again at the text with its escapes decoded (`decoded_views`: \\u escapes, percent-encoding,
   HTML references, repeatedly for double escaping; core/unescape.py), redacting the span the key came from.
2. JSON is parsed from the raw text, then every string in it is redacted (redacting raw JSON text could
   break its syntax; the parser decodes the escapes a key may hide behind).
3. Fields are typed: counts are non-negative integers (else dropped, and an anomaly is noted);
   `finish_reason`, `id`, `model` and `system_fingerprint` are strings (any other JSON value is kept as
   its redacted JSON text, and noted).
4. Clipping happens last, through `clip`: a key cut in half by a clip can no longer be recognised.

Public API (the batch path uses it too):
- `KeyFilter(secret)`: callable on text, `.json(obj)` on any JSON value;
- `clip(text, limit)`: the one clipping helper, applied only to redacted text;
- `body_text(raw, keys)`: a body's bytes as redacted text;
- `sanitize_completion(payload, keys) -> (SafeCompletion, anomalies)`: a chat.completion object;
- `sanitize_usage(obj, keys) -> (counts, anomalies)`; `error_text(status, raw, keys) -> (message, body)`;
- `safe_string(value, name, keys, limit) -> (text | None, anomaly | None)`.
Anomalies name a field and a JSON type, never a value the server sent.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any
from urllib.parse import quote, quote_plus

from evaluator.core.jsonl import JSONObject
from evaluator.core.unescape import RUN, decoded_views, mark, replaced

REDACTED = "[REDACTED]"
PIECE = 8  # the shortest piece of the key that is removed on its own
MAX_COUNT = 2**53  # a token count above this is not a count (and would not survive every JSON reader)
ID_LIMIT = 300  # ids, model names, fingerprints, finish reasons: longer values are clipped
COUNT_FIELDS = ("prompt_tokens", "completion_tokens", "total_tokens")
DETAIL_COUNTS = (
    ("completion_tokens_details", "reasoning_tokens"),
    ("prompt_tokens_details", "cached_tokens"),
)


class ShapeError(ValueError):
    """The reply is not a chat completion; the message names types only, never server text."""


# What a terminal acts on: the escape sequences (CSI ... final byte; OSC, DCS, APC, PM ... BEL or ST; in their
# 7-bit ESC form and their 8-bit C1 form), any other ESC pair, and every C0 and C1 control character and DEL.
_SEQUENCE = re.compile(
    r"(?:\x1b\[|\x9b)[0-?]*[ -/]*[@-~]"
    r"|(?:\x1b[\]P^_X]|[\x90\x98\x9d\x9e\x9f]).*?(?:\x07|\x1b\\|\x9c)"
    r"|\x1b.?",
    re.DOTALL,
)
_CONTROLS = {c: None for c in (*range(0x20), *range(0x7F, 0xA0))}
# _SEQUENCE without the string sequences, for text past the last terminator: there a string sequence cannot
# end, and searching for its end from every opener would take time quadratic in the text.
_NO_STRING = re.compile(r"(?:\x1b\[|\x9b)[0-?]*[ -/]*[@-~]|\x1b.?", re.DOTALL)


def _after_last_terminator(text: str) -> int:
    """Where the last string terminator (BEL, ESC \\, ST) ends; 0 without one."""
    ends = [at + len(t) for t in ("\x07", "\x1b\\", "\x9c") if (at := text.rfind(t)) >= 0]
    return max(ends, default=0)


def terminal_text(text: str, keep: str = "\n\t") -> str:
    """A server's text made harmless for a terminal: escape sequences and control characters removed
    (those in `keep` stay). Every string a server controls passes this before it is printed."""
    if text.isprintable():
        return text
    table = {c: v for c, v in _CONTROLS.items() if chr(c) not in keep}
    end = _after_last_terminator(text)  # no sequence spans it: its two sides are cleaned apart, linearly
    return (_SEQUENCE.sub("", text[:end]) + _NO_STRING.sub("", text[end:])).translate(table)


def one_line(text: str) -> str:
    """A server's text as one terminal-safe line (ids, statuses, error messages)."""
    return " ".join(terminal_text(text, keep="\n\t\r").split()) if not text.isprintable() else text


def clip(text: str, limit: int) -> str:
    """At most `limit` characters of an already redacted text ("..." marks a cut)."""
    return text if len(text) <= limit else text[: max(0, limit - 3)] + "..."


def _b64_cores(secret: bytes) -> set[str]:
    """The base64 characters that encode `secret` wherever it sits in a longer encoded text (three
    alignments; the characters shared with the neighbouring bytes are left off)."""
    cores = set()
    for pad in range(3):
        enc = base64.b64encode(b"\0" * pad + secret).decode()
        start = (pad * 4 + 2) // 3  # characters touched by the padding bytes
        end = 4 * (len(secret) + pad) // 3  # characters made of the key's bits alone
        core = enc[start:end]
        if len(core) >= PIECE:
            cores |= {core, core.replace("+", "-").replace("/", "_")}  # and the URL-safe alphabet
    return cores


def _forms(secret: str) -> list[str]:
    """Every spelling of the key that a text can carry, longest first."""
    forms = {secret, json.dumps(secret)[1:-1], json.dumps(secret, ensure_ascii=False)[1:-1]}
    for q in (quote(secret, safe=""), quote_plus(secret, safe="")):
        forms |= {q, q.lower(), q.upper()} if "%" in q else {q}
    raw = secret.encode("utf-8", "surrogatepass")
    forms |= _b64_cores(raw)
    forms.add(base64.b64encode(raw).decode())
    return sorted((f for f in forms if f), key=len, reverse=True)


class KeyFilter:
    """Removes one API key from text. Built once per run; cheap when the text does not contain it."""

    def __init__(self, secret: str | None) -> None:
        # Stripped: a CRLF .env file leaves a \r that the HTTP layer quotes escaped, so only the bare
        # key is sure to appear verbatim.
        self.secret = (secret or "").strip() or None
        s = self.secret or ""
        self.forms = _forms(s) if s else []
        self.pieces = [s[i : i + PIECE] for i in range(len(s) - PIECE + 1)] if len(s) > PIECE else []
        # every 8-character piece holds one of these 4-character quarters: a cheap first look
        self.quarters = [s[i : i + 4] for i in range(0, len(s) - 3, 4)] if self.pieces else []
        # runs of back-to-back copies: a text repeating the key is covered in one step per run, not per copy
        self.form_runs = {f: re.compile(f"(?:{re.escape(f)})+") for f in self.forms}

    def __call__(self, text: str) -> str:
        """The text without the key, in any of its forms or pieces, also where escapes hide it."""
        if self.secret is None:
            return text
        cover = self._cover(text)
        for view in decoded_views(text):
            found = self._cover(view.text)
            if found is None:
                continue
            cover = cover if cover is not None else bytearray(len(text))
            for run in RUN.finditer(found):
                mark(cover, *view.original(*run.span()))
        return replaced(text, cover, REDACTED) if cover is not None else text

    def found_in(self, text: str, pieces: bool = True) -> bool:
        """Whether the text holds the key in any form (with `pieces`, an 8-character piece of it too)."""
        if self.secret is None:
            return False
        views = (text, *(v.text for v in decoded_views(text)))
        return any(self._cover(t, pieces) is not None for t in views)

    def _cover(self, text: str, pieces: bool = True) -> bytearray | None:
        """A byte per character of the text, 1 where one of the key's forms (or 8-character pieces) sits;
        None when none does. Linear in the text: each run of back-to-back copies or pieces is one step, and
        the memory is one byte per character however many copies the text holds."""
        cover = None
        runs = self.piece_runs if pieces and any(q in text for q in self.quarters) else None
        for form, form_runs in self.form_runs.items():
            if runs is not None and form == self.secret:
                continue  # the key itself is a run of its pieces
            at = text.find(form)
            while at != -1:
                end = form_runs.match(text, at).end()  # type: ignore[union-attr]  # a copy starts at `at`
                cover = cover if cover is not None else bytearray(len(text))
                mark(cover, at, end)
                at = text.find(form, max(at + 1, end - len(form) + 1))  # copies inside the run are covered
        if runs is None:
            return cover
        found = runs.search(text)
        while found is not None:
            start, end = found.start(), self._extended(text, found.end())
            cover = cover if cover is not None else bytearray(len(text))
            mark(cover, start, end)
            found = runs.search(text, end)
        return cover

    def _extended(self, text: str, end: int) -> int:
        """The end of a run of pieces, past any piece that starts inside it and ends after it (one search
        of the 14 characters around the end tells), then past the run of pieces from there."""
        runs, piece = self._piece_patterns
        while found := piece.search(text, end - PIECE + 1, end + PIECE - 1):
            end = runs.match(text, found.start()).end()  # type: ignore[union-attr]
        return end

    @property
    def piece_runs(self) -> re.Pattern[str] | None:
        return self._piece_patterns[0] if self.pieces else None

    @cached_property
    def _piece_patterns(self) -> tuple[re.Pattern[str], re.Pattern[str]]:
        """A run of back-to-back pieces of the key, and one piece; built at the first text that holds a
        quarter of the key."""
        alternatives = "|".join(map(re.escape, sorted(set(self.pieces))))
        return re.compile(f"(?:{alternatives})+"), re.compile(alternatives)

    def json(self, obj: Any) -> Any:
        """A JSON value with the key removed from every string in it, object keys included.
        (Too deep a value raises RecursionError: callers that take server JSON use `json_text`.)"""
        if self.secret is None:
            return obj
        if isinstance(obj, str):
            return self(obj)
        if isinstance(obj, list):
            return [self.json(v) for v in obj]
        if isinstance(obj, dict):
            return {self(str(k)): self.json(v) for k, v in obj.items()}
        return obj


def json_text(value: Any, keys: KeyFilter, limit: int) -> str | None:
    """Any JSON value as compact redacted text, clipped; None if it cannot be written (too deep)."""
    try:
        text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=True)
    except (RecursionError, ValueError, TypeError):
        return None
    return clip(one_line(keys(text)), limit)


def body_text(raw: bytes | str, keys: KeyFilter) -> str:
    """A body as redacted text (bytes that are not UTF-8 are shown as U+FFFD)."""
    text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw
    return keys(text)


def parse_json(raw: bytes | str, keys: KeyFilter) -> Any:
    """The JSON of a body with the key removed from every string in it. Raises ShapeError (no server text
    in it). Parsed first, redacted after: redacting the raw text could break its syntax (a key such as
    `"choices"` is part of every reply's text), and the parser decodes the escapes a key may hide behind."""
    if isinstance(raw, bytes):
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise ShapeError("response is not UTF-8 text") from None
    else:
        text = raw
    try:
        return keys.json(json.loads(text))
    except RecursionError:
        raise ShapeError("response JSON is nested too deeply") from None
    except ValueError as exc:
        raise ShapeError(f"response is not JSON ({type(exc).__name__})") from None


def _type(value: Any) -> str:
    return "null" if value is None else type(value).__name__


def safe_string(
    value: Any, name: str, keys: KeyFilter, limit: int = ID_LIMIT
) -> tuple[str | None, str | None]:
    """A field that must be a string: the redacted, clipped string; or any other value's redacted JSON
    text with an anomaly; None stays None."""
    if value is None:
        return None, None
    if isinstance(value, str):
        return clip(one_line(keys(value)), limit), None
    text = json_text(value, keys, limit)
    note = f"{name} was {_type(value)}, " + ("kept as JSON text" if text is not None else "dropped")
    return text, note


def _count(value: Any, name: str, anomalies: list[str]) -> int | None:
    if value is None:
        return None
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_COUNT:
        return value
    what = "out of range" if isinstance(value, int) and not isinstance(value, bool) else _type(value)
    anomalies.append(f"usage.{name} was {what}, dropped (counts are non-negative integers)")
    return None


def sanitize_usage(usage: Any) -> tuple[dict[str, int | None], list[str]]:
    """The usage counts we keep (prompt, completion, total, reasoning, cached), each a non-negative
    integer or None. Nothing of a usage object but these integers is kept, so nothing else needs redacting."""
    anomalies: list[str] = []
    counts: dict[str, int | None] = {k: None for k in (*COUNT_FIELDS, "reasoning_tokens", "cached_tokens")}
    if usage is None:
        return counts, anomalies
    if not isinstance(usage, dict):
        return counts, [f"usage was {_type(usage)}, dropped"]
    for name in COUNT_FIELDS:
        counts[name] = _count(usage.get(name), name, anomalies)
    for parent, name in DETAIL_COUNTS:
        details = usage.get(parent)
        if isinstance(details, dict):
            counts[name] = _count(details.get(name), f"{parent}.{name}", anomalies)
        elif details is not None:
            anomalies.append(f"usage.{parent} was {_type(details)}, dropped")
    return counts, anomalies


@dataclass
class SafeCompletion:
    """The fields kept from one chat.completion, every string redacted, every count an int or None."""

    response_text: str | None
    reasoning_text: str | None
    finish_reason: str | None
    response_id: str | None
    system_fingerprint: str | None
    model: str | None
    usage: dict[str, int | None]
    anomalies: list[str] = field(default_factory=list)


def _text_of(content: Any, keys: KeyFilter) -> str | None:
    """Message content as redacted text; some servers send a list of parts."""
    if content is None or isinstance(content, str):
        return keys(content) if content else content
    if isinstance(content, list):
        texts = [p.get("text") for p in content if isinstance(p, dict) and p.get("type") == "text"]
        return keys("".join(t for t in texts if isinstance(t, str)))
    raise ShapeError(f"message content has type {_type(content)}")


def _message(payload: Any) -> tuple[JSONObject, JSONObject]:
    """(choices[0], its message), or ShapeError."""
    if not isinstance(payload, dict):
        raise ShapeError(f"response is JSON {_type(payload)}, not an object")
    choices = payload.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise ShapeError("response has no choices")
    message = choices[0].get("message")
    if not isinstance(message, dict):
        raise ShapeError("choices[0] has no message")
    return choices[0], message


def sanitize_completion(payload: Any, keys: KeyFilter) -> tuple[SafeCompletion, list[str]]:
    """The typed, redacted fields of a parsed chat.completion (parse it with `parse_json`), and the
    protocol anomalies seen. Raises ShapeError when it is not a chat completion at all."""
    choice, message = _message(payload)
    anomalies: list[str] = []

    def string(value: Any, name: str) -> str | None:
        text, note = safe_string(value, name, keys)
        if note:
            anomalies.append(note)
        return text

    # vLLM >= 0.10 and OpenRouter send `reasoning`; older vLLM and DeepSeek send `reasoning_content`.
    reasoning = message.get("reasoning")
    if reasoning is None:
        reasoning = message.get("reasoning_content")
    if reasoning is not None and not isinstance(reasoning, str):
        anomalies.append(f"reasoning was {_type(reasoning)}, dropped")
    counts, usage_notes = sanitize_usage(payload.get("usage"))
    safe = SafeCompletion(
        response_text=_text_of(message.get("content"), keys),
        reasoning_text=keys(reasoning) if isinstance(reasoning, str) else None,
        finish_reason=string(choice.get("finish_reason"), "finish_reason"),
        response_id=string(payload.get("id"), "id"),
        system_fingerprint=string(payload.get("system_fingerprint"), "system_fingerprint"),
        model=string(payload.get("model"), "model"),
        usage=counts,
        anomalies=anomalies + usage_notes,
    )
    return safe, safe.anomalies


def error_text(raw: bytes | str, keys: KeyFilter, limit: int = 500) -> tuple[str, Any]:
    """An error body's message (redacted, then clipped) and its parsed JSON (redacted; None if not JSON).

    The message is the OpenAI-style `error.message` when it is a string, else the body's JSON text, else
    the body's text (an HTML page, a proxy's plain-text error)."""
    text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw
    try:  # parsed first, then every string redacted (see parse_json)
        body = keys.json(json.loads(text))
    except (ValueError, RecursionError):
        return clip(one_line(keys(text)), limit), None
    err = body[0] if isinstance(body, list) and body and isinstance(body[0], dict) else body
    err = err.get("error", err) if isinstance(err, dict) else err
    if isinstance(err, dict) and isinstance(err.get("message"), str):
        return clip(one_line(err["message"]), limit), body
    return json_text(body, keys, limit) or clip(one_line(keys(text)), limit), body


def safe_headers(headers: Mapping[str, str] | Iterable[tuple[str, str]], keys: KeyFilter) -> dict[str, str]:
    """Headers with lower-cased names and redacted values (the only form other code reads them in)."""
    items = headers.items() if isinstance(headers, Mapping) else headers
    return {keys(str(k)).lower(): keys(str(v)) for k, v in items}
