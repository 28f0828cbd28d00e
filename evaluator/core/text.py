"""Small text helpers shared by every layer: timestamps, one-line exception texts, id lists, and text from
a data file, a server, a sweep file or a folder name made safe for where it is written (a Markdown cell or
line, inline code, a CSV cell no spreadsheet runs as a formula, a relative link that is never a scheme).
Ordinary text (no newline, `|`, `\\`, `<`, `[`, `]` or backtick) comes back unchanged, so the files
written for ordinary runs keep their bytes. Pure.

References to the repository's docs/ in help texts: named only where the files are (a checkout), since
a wheel install does not ship them and a path it cannot open helps no one.

`usable_batch_id` is here, not beside the Batch API client, so that the run folder's batch ledger and the
commands that read it start without the openai client.
"""

from __future__ import annotations

import re
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, TypeGuard
from urllib.parse import quote

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


# every character a Markdown reader (or str.splitlines) may take as the end of a line
_LINE_BREAKS = re.compile(r"\r\n|[\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029]")
# backslash first, so the escapes added after it are not themselves escaped; brackets and backticks as
# entities (a `\]` would still read as `](` to a naive scanner), `<` as an entity (no HTML, no autolink)
_MD_ESCAPES = (("\\", "\\\\"), ("|", "\\|"), ("<", "&lt;"), ("[", "&#91;"), ("]", "&#93;"), ("`", "&#96;"))
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def md_text(value: Any) -> str:
    """`value` as Markdown text that stays in its table cell or line and makes no link or HTML."""
    text = _LINE_BREAKS.sub(" ", str(value))
    for raw, escaped in _MD_ESCAPES:
        text = text.replace(raw, escaped)
    return text


def md_code(value: Any) -> str:
    """`value` as inline code (`value`) when a code span can hold it, else as md_text (no code span)."""
    text = str(value)
    if "`" in text or "|" in text or _LINE_BREAKS.search(text) or not text.strip():
        return md_text(text)
    return f"`{text}`"


def csv_cell(value: Any) -> Any:
    """A text cell that a spreadsheet would read as a formula gets a leading `'`; numbers are untouched."""
    if isinstance(value, str) and value.startswith(FORMULA_STARTS):
        return "'" + value
    return value


def safe_href(path: str) -> str:
    """A relative path as a link: each segment percent-encoded (a `:` too, so never a scheme) and the
    whole prefixed with `./` unless it starts with `./` or `../` already."""
    href = "/".join(quote(segment, safe="") for segment in path.split("/"))
    return href if href.startswith(("./", "../")) else "./" + href


BATCH_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:=+-]{0,199}")


def usable_batch_id(value: Any) -> TypeGuard[str]:
    """Pure: whether a batch id can be saved, polled and printed (a non-empty string of id characters)."""
    return isinstance(value, str) and BATCH_ID.fullmatch(value) is not None
