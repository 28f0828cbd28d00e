"""Keeping the API key out of everything stored or printed. Pure.

`Redactor` is the boundary's `KeyFilter` (evaluator/core/boundary.py): it removes the key verbatim and in
its encoded forms (JSON-escaped, URL-encoded, base64, Basic auth) and any 8-character piece of it, from
text (`redactor(text)`) and from every string of a JSON value (`redactor.json(value)`).
"""

from __future__ import annotations

from evaluator.core.boundary import KeyFilter


class Redactor(KeyFilter):
    """Removes the API key from any text that might be stored or printed (servers can echo it)."""
