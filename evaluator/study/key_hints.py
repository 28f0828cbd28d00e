"""The message for an unknown key in a sweep file: the closest valid key, then every valid one."""

from __future__ import annotations

import difflib


def unknown_key(key: str, what: str, valid: list[str]) -> str:
    """`concurency` in a run -> 'unknown key `concurency` in a run: did you mean `concurrency`? ...'."""
    close = difflib.get_close_matches(key, valid, n=1, cutoff=0.6)
    hint = f": did you mean `{close[0]}`?" if close else ""
    return f"unknown key `{key}` in {what}{hint} (valid keys: {', '.join(valid)})"
