"""Keeping the API key out of everything stored or printed. Pure."""

from __future__ import annotations

from typing import Any


class Redactor:
    """Removes the API key from any text that might be stored or printed (servers can echo it)."""

    def __init__(self, secret: str | None) -> None:
        # Stripped: with stray whitespace the HTTP layer quotes the key escaped ('...\\r'), so only
        # the bare key is sure to appear verbatim in an error text.
        self.secret = (secret or "").strip() or None

    def __call__(self, text: str) -> str:
        if self.secret and self.secret in text:
            text = text.replace(self.secret, "[REDACTED]")
        return text

    def json(self, obj: Any) -> Any:
        """A JSON value with the key removed from every string in it, keys of objects included."""
        if self.secret is None:
            return obj
        if isinstance(obj, str):
            return self(obj)
        if isinstance(obj, list):
            return [self.json(v) for v in obj]
        if isinstance(obj, dict):
            return {self.json(k): self.json(v) for k, v in obj.items()}
        return obj
