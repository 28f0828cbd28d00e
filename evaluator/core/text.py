"""Small text helpers shared by every layer: timestamps, one-line exception texts, id lists. Pure."""

from __future__ import annotations

from datetime import datetime, timezone

EXAMPLES = 5  # ids quoted in a message


def utc_now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def one_line(exc: BaseException) -> str:
    """An exception's text on one readable line: Arrow and hub messages can span lines and carry raw bytes."""
    return " ".join("".join(c if c.isprintable() else " " for c in str(exc)).split())


def examples(items: list[str]) -> str:
    """The first EXAMPLES items, comma-separated, with a count of the rest."""
    shown = ", ".join(items[:EXAMPLES])
    return shown + (f" (+{len(items) - EXAMPLES} more)" if len(items) > EXAMPLES else "")
