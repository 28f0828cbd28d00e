"""What every command does to its output before anything runs: the terminal guard.

* `sys.stdout` and `sys.stderr` are wrapped so that no escape sequence or control character reaches the
  terminal (core.boundary.terminal_text; newline, tab and the carriage return of a progress bar stay). A
  server controls much of what is printed (ids, statuses, error texts, a reply in check-endpoint), and one
  helper here covers every print, click.echo, log line and traceback, present or future.
* A library's warning (`warnings.warn`: pydantic's serialization warnings quote the value of a field, a
  server's key included) is shown by its category and origin only, never its text.
"""

from __future__ import annotations

import sys
import warnings
from typing import Any, TextIO

from evaluator.core.boundary import terminal_text

KEEP = "\n\t\r"


class TerminalGuard:
    """A text stream that writes through `terminal_text`; every other attribute is the wrapped stream's."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        if not isinstance(text, str):  # click probes with b"" to tell text streams from binary ones
            raise TypeError("TerminalGuard writes text")
        self._stream.write(terminal_text(text, KEEP))
        return len(text)

    def writelines(self, lines: Any) -> None:
        for line in lines:
            self.write(line)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def show_warning(
    message: Any, category: type[Warning], filename: str, lineno: int, *_: Any, **__: Any
) -> None:
    """warnings.showwarning: the category and where it came from; the text may quote what a server sent."""
    sys.stderr.write(
        f"warning: {category.__name__} from {filename}:{lineno} (its text is not shown: a library's warning "
        "may quote what a server sent)\n"
    )


def install() -> None:
    """Wrap stdout and stderr once; route warnings through show_warning."""
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        if stream is not None and not isinstance(stream, TerminalGuard):
            setattr(sys, name, TerminalGuard(stream))
    warnings.showwarning = show_warning
