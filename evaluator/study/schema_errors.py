"""A msgspec ValidationError from decoding a file, taken apart for a message that names the line: what
went wrong, the path to it (with each table key filled in: msgspec writes `[...]` for a dict's key),
and what the schema says the value must be (a Literal's words, or the field's `Meta(description=...)`).
Where keys are in a TOML file's text (`LineIndex`: tomllib gives no positions), and the message for an
unknown key (the closest valid key, then every valid one).
"""

from __future__ import annotations

import difflib
import re
import types
from collections import Counter
from collections.abc import Sequence
from typing import Annotated, Any, Literal, Union, get_args, get_origin, get_type_hints

import msgspec

Part = str | int
_STEP = re.compile(r"\.([^.\[]+)|\[(\d+|\.\.\.)\]")
_FIELD = re.compile(r"^Object (contains unknown|missing required) field `([^`]+)`")


Kind = Literal["unknown", "missing", "invalid"]


class Problem(msgspec.Struct, frozen=True):
    kind: Kind
    path: list[Part]
    """To the bad value, or to the table with the unknown or missing key."""
    key: str | None
    """The unknown or missing key."""
    must: str
    """What the value must be ("" when the schema does not say)."""
    depth: int
    """path[:depth] is the field that `must` describes (a list's item or a table's entry is below it)."""
    valid: list[str]
    """The keys the table at `path` takes (for an unknown key)."""


def problem(exc: msgspec.ValidationError, root: Any, data: Any) -> Problem:
    """The error's kind, where it is in `data` (decoded as `root`), and what the value must be."""
    text, _, where = str(exc).partition(" - at `")
    steps: list[Part] = []
    for name, index in _STEP.findall(where.rstrip("`")[1:]):
        steps.append(name or (index if index == "..." else int(index)))
    field = _FIELD.match(text)
    kind: Kind = (
        "invalid" if field is None else "unknown" if field.group(1) == "contains unknown" else "missing"
    )
    key = field.group(2) if field else None
    path, tp, must, depth = _walk(root, data, steps)
    if kind == "missing":
        _, _, must, _ = _walk(root, data, [*path, str(key)])
    valid = list(getattr(tp, "__struct_fields__", ()))
    return Problem(kind, path, key, must, depth, valid)


def _walk(tp: Any, data: Any, steps: list[Part]) -> tuple[list[Part], Any, str, int]:
    """The path with dict keys filled in, the type at its end, its description and the depth of that."""
    path: list[Part] = []
    must, depth = "", 0
    for step in [*steps, None]:
        tp, found = _unwrap(tp, step)
        if found is not None:
            must, depth = found, len(path)
        if step is None:
            break
        args = get_args(tp)
        if step == "...":  # the first entry that does not decode is the one msgspec stopped at
            items = data.items() if isinstance(data, dict) else ()
            step = next((k for k, v in items if not _fits(v, args[1])), "...")
        if get_origin(tp) is dict:
            tp = args[1]
        elif isinstance(step, int):
            tp = args[0] if get_origin(tp) is list else args[min(step, len(args) - 1)]
        else:
            tp = get_type_hints(tp, include_extras=True).get(step, Any) if _is_struct(tp) else Any
        data = data[step] if isinstance(data, (dict, list)) and _has(data, step) else None  # type: ignore[index]
        path.append(step)
    if get_origin(tp) is Literal:
        must, depth = " or ".join(f'"{v}"' for v in get_args(tp)), len(path)
    return path, tp, must, depth


def _unwrap(tp: Any, step: Part | None) -> tuple[Any, str | None]:
    """Annotated and Optional taken off (for a union: the member the next step goes into)."""
    found = None
    while True:
        if get_origin(tp) is Annotated:
            meta = [m for m in tp.__metadata__ if isinstance(m, msgspec.Meta) and m.description]
            found = meta[0].description if meta else found
            tp = get_args(tp)[0]
        elif get_origin(tp) in (Union, types.UnionType):
            members = [m for m in get_args(tp) if m is not type(None)]
            inner = [m for m in members if _goes_into(m, step)]
            tp = (inner or members)[0] if len(members) > 1 else members[0]
        else:
            return tp, found


def _goes_into(tp: Any, step: Part | None) -> bool:
    tp = get_args(tp)[0] if get_origin(tp) is Annotated else tp
    if isinstance(step, int):
        return get_origin(tp) in (list, tuple)
    return step is not None and (get_origin(tp) is dict or _is_struct(tp))


def _is_struct(tp: Any) -> bool:
    return isinstance(tp, type) and issubclass(tp, msgspec.Struct)


def _has(data: dict | list, step: Part) -> bool:
    return step in data if isinstance(data, dict) else isinstance(step, int) and step < len(data)


def _fits(value: Any, tp: Any) -> bool:
    try:
        msgspec.convert(value, tp)
    except msgspec.ValidationError:
        return False
    return True


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


def unknown_key(key: str, what: str, valid: list[str]) -> str:
    """`concurency` in a run -> 'unknown key `concurency` in a run: did you mean `concurrency`? ...'."""
    close = difflib.get_close_matches(key, valid, n=1, cutoff=0.6)
    hint = f": did you mean `{close[0]}`?" if close else ""
    return f"unknown key `{key}` in {what}{hint} (valid keys: {', '.join(valid)})"
