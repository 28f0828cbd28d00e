"""Where keys are in a TOML file's text, for errors that name the line (tomllib gives no positions)."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence


class LineIndex:
    """Where keys are in the text: tomllib gives no positions, so the lines are scanned per table."""

    _header = re.compile(r"^\s*(\[\[?)\s*([^\]]+?)\s*\]\]?\s*(?:#.*)?$")

    def __init__(self, text: str) -> None:
        self.lines = text.splitlines()
        self.sections: list[tuple[tuple[str, ...], int, int]] = [((), 0, 0)]  # (table, index, first line)
        counts: Counter[tuple[str, ...]] = Counter()
        for no, line in enumerate(self.lines, start=1):
            m = self._header.match(line)
            if m:
                table = tuple(_dotted(m.group(2)))
                index = counts[table] if m.group(1) == "[[" else 0
                counts[table] += m.group(1) == "[["
                self.sections.append((table, index, no))

    def line_of(self, table: tuple[str, ...], key: str | None = None, index: int = 0) -> int | None:
        """The line of `key` in the table (the index-th of an array of tables); its header when not found."""
        for n, (t, i, start) in enumerate(self.sections):
            if t != table or i != index:
                continue
            end = self.sections[n + 1][2] - 1 if n + 1 < len(self.sections) else len(self.lines)
            if key is not None:
                pattern = re.compile(
                    rf"^\s*(?:{re.escape(key)}|\"{re.escape(key)}\"|'{re.escape(key)}')\s*[=.]"
                )
                for no in range(start + 1, end + 1):
                    if pattern.match(self.lines[no - 1]):
                        return no
                sub = self._subtable(table + (key,))  # a key given as a table header: [colour]
                if sub:
                    return sub
            return start or None
        return None

    def line_of_path(self, path: Sequence[str | int]) -> int | None:
        """The line of a value by its path (runs, 1, serve, gpus): the deepest table header on the path
        that the file writes, then the key after it ([[runs]] #2, then its `serve = ...` line)."""
        for cut in range(len(path), -1, -1):
            head, key = path[:cut], (path[cut] if cut < len(path) else None)
            table = tuple(p for p in head if isinstance(p, str))
            index = next((p for p in reversed(head) if isinstance(p, int)), 0)
            if not isinstance(key, int) and (table, index) in {(t, i) for t, i, _ in self.sections}:
                return self.line_of(table, key, index)
        return None

    def _subtable(self, prefix: tuple[str, ...]) -> int | None:
        return next((start for t, _, start in self.sections if t[: len(prefix)] == prefix), None)


def _dotted(name: str) -> list[str]:
    """The parts of a dotted TOML key, quotes removed: pricing."gpt-5.5" -> [pricing, gpt-5.5]."""
    return [a or b or c.strip() for a, b, c in re.findall(r'"([^"]*)"|\'([^\']*)\'|([^.]+)', name)]
