"""Lenient decoding: a msgspec Struct read from JSON that may be damaged (a hand-edited or crafted file).

`lenient_struct` reads each field the Struct declares (msgspec.structs.fields) on its own with msgspec's
strict converter; a field that does not convert is replaced by a value of its declared type, never by a
value of another one. The fields come from the Struct itself, so a field added to it is read here with no
other edit. Pure.

The replacement for a field of the wrong type:
- a label (a type annotated with LABEL) keeps its text: str(value), None staying None where None is allowed;
- a type that allows None: None, except that a JSON object given for a Struct member is read leniently
  and a JSON array for a list member keeps its convertible elements;
- a Struct: read leniently from the object (an empty one when the value is not an object);
- a list: its elements that convert (for Structs: every JSON object, read leniently);
- a dict: {}; str, int, float, bool: "", 0, 0.0, False; Any accepts every value.
A required field that is missing is replaced as if it held null; a missing optional one keeps its default.
"""

from __future__ import annotations

import types
import typing
from typing import Any, Literal, TypeVar

import msgspec

S = TypeVar("S", bound=msgspec.Struct)

LABEL = msgspec.Meta(extra={"lenient": "label"})
"""Annotated[str | None, LABEL]: a text that keeps its text when it is not a string (5 reads as "5")."""

_ZERO: dict[Any, Any] = {str: "", int: 0, float: 0.0, bool: False}


def lenient(value: Any, tp: Any) -> Any:
    """`value` as type `tp`: msgspec's strict conversion, or the replacement of its declared type."""
    try:
        return msgspec.convert(value, tp)
    except msgspec.ValidationError:
        return replacement(value, tp)


def lenient_struct(cls: type[S], obj: dict[str, Any]) -> S:
    """An instance of `cls` from a JSON object, field by field (see the module docstring)."""
    values: dict[str, Any] = {}
    for f in msgspec.structs.fields(cls):
        if f.encode_name in obj:
            values[f.name] = lenient(obj[f.encode_name], f.type)
        elif f.required:
            values[f.name] = lenient(None, f.type)
    return cls(**values)


def _is_struct(tp: Any) -> bool:
    return isinstance(tp, type) and issubclass(tp, msgspec.Struct)


def replacement(value: Any, tp: Any) -> Any:
    """The value of type `tp` that stands for `value`, which did not convert to it."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is typing.Annotated:
        if LABEL in args[1:] and not (value is None and type(None) in typing.get_args(args[0])):
            return str(value)
        return replacement(value, args[0])
    if origin in (typing.Union, types.UnionType):
        return _union(value, args)
    if _is_struct(tp):
        return lenient_struct(tp, value if isinstance(value, dict) else {})
    if origin is list:
        return _list(value, args[0])
    if origin is dict or tp is dict:
        return {}
    if origin is Literal:
        return args[0]
    if tp in _ZERO:
        return _ZERO[tp]
    raise TypeError(f"no lenient replacement for {tp!r}")


def _union(value: Any, args: tuple[Any, ...]) -> Any:
    for member in args:
        if _is_struct(member) and isinstance(value, dict):
            return lenient_struct(member, value)
        if typing.get_origin(member) is list and isinstance(value, list):
            return _list(value, typing.get_args(member)[0])
    if type(None) in args:
        return None
    return replacement(value, args[0])


def _list(value: Any, item: Any) -> list[Any]:
    if not isinstance(value, list):
        return []
    if _is_struct(item):
        return [lenient_struct(item, x) for x in value if isinstance(x, dict)]
    out = []
    for x in value:
        try:
            out.append(msgspec.convert(x, item))
        except msgspec.ValidationError:
            continue  # an element of the wrong type is left out, not replaced
    return out
