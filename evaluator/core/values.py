"""Type tests for values read from JSON (records, run_config.json), where a bool is not a number. Pure."""

from __future__ import annotations

from typing import Any


def is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def is_num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)
