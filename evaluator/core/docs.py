"""References to the repository's docs/ in help texts: named only where the files are (a checkout), since
a wheel install does not ship them and a path it cannot open helps no one."""

from __future__ import annotations

from pathlib import Path

CHECKOUT_DOCS = Path(__file__).resolve().parents[2] / "docs"


def see_docs(*names: str) -> str:
    """ " (docs/a.md, docs/b.md)" for the named pages present in this install's checkout, else ""."""
    present = [f"docs/{n}" for n in names if (CHECKOUT_DOCS / n).is_file()]
    return f" ({', '.join(present)})" if present else ""
