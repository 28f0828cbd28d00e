"""Small text helpers shared by every layer: timestamps, one-line exception texts, id lists. Pure.

References to the repository's docs/ in help texts: named only where the files are (a checkout), since
a wheel install does not ship them and a path it cannot open helps no one.
"""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

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


CHECKOUT_DOCS = Path(__file__).resolve().parents[2] / "docs"


def see_docs(*names: str) -> str:
    """ " (docs/a.md, docs/b.md)" for the named pages present in this install's checkout, else ""."""
    present = [f"docs/{n}" for n in names if (CHECKOUT_DOCS / n).is_file()]
    return f" ({', '.join(present)})" if present else ""
