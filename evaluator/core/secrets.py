"""Keeping the API key out of everything stored or printed. Pure (the environment is passed in or read).

`Redactor` is the boundary's `KeyFilter` (evaluator/core/boundary.py): it removes the key verbatim and in
its encoded forms (JSON-escaped, URL-encoded, base64, Basic auth, and behind \\u escapes, percent-encoding or
double escaping) and any 8-character piece of it, from text (`redactor(text)`) and from every string of a
JSON value (`redactor.json(value)`).

`api_key_from_env()` is where every command takes MODEL_API_KEY from. A key shorter than `MIN_KEY_CHARS`
is refused: text as short as `0` or `null` occurs in ordinary replies and records, so a server echoing it
could not be told apart from an answer and it could not be kept out of what is written. `EMPTY`, the
placeholder vLLM's documentation puts where a keyless server needs some value, means no key.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from evaluator.core.boundary import PIECE, KeyFilter
from evaluator.core.errors import UserError

MIN_KEY_CHARS = PIECE  # the shortest piece the filter removes on its own
NO_KEY_PLACEHOLDERS = frozenset({"EMPTY"})  # vLLM's docs' value for "this server has no key"


class Redactor(KeyFilter):
    """Removes the API key from any text that might be stored or printed (servers can echo it)."""


class ShortKeyError(UserError):
    """MODEL_API_KEY is too short to be redacted safely (the message never shows it)."""


def api_key_from_env(env: Mapping[str, str] | None = None) -> str | None:
    """MODEL_API_KEY with surrounding whitespace stripped (a CRLF .env file leaves a "\\r"); None when unset
    or blank or the placeholder `EMPTY`. Raises ShortKeyError for a key under MIN_KEY_CHARS characters."""
    key = (os.environ if env is None else env).get("MODEL_API_KEY", "").strip() or None
    if key in NO_KEY_PLACEHOLDERS:
        return None
    if key is not None and len(key) < MIN_KEY_CHARS:
        raise ShortKeyError(
            f"MODEL_API_KEY is {len(key)} character(s) long, too short to redact safely: text that short occurs "
            "in ordinary replies and records, so an echo of it could not be kept out of what is written. Use "
            f"a key of at least {MIN_KEY_CHARS} characters, or unset MODEL_API_KEY for a server that needs none"
        )
    return key


def redactor_from_env() -> Redactor:
    """A Redactor of MODEL_API_KEY for error and report text (a key too short is not redacted here: the
    commands that send or pack refuse it before anything is written)."""
    try:
        return Redactor(api_key_from_env())
    except ShortKeyError:
        return Redactor(None)
