"""Type tests for values read from JSON (records, run_config.json), where a bool is not a number. Pure."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, TypeGuard

from evaluator.core.jsonl import JSONObject


def is_int(v: Any) -> TypeGuard[int]:
    return isinstance(v, int) and not isinstance(v, bool)


def is_num(v: Any) -> TypeGuard[int | float]:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def object_at(d: Mapping[str, Any], key: str) -> JSONObject:
    """d[key] when it is a JSON object, else an empty one (a summary or config read back may hold anything)."""
    v = d.get(key)
    return v if isinstance(v, dict) else {}


MAX_PRICE = 10_000.0  # USD per 1M tokens: 15 times the dearest price listed anywhere (above it: an error)


def is_price(v: Any) -> bool:
    """A price a pricing table may hold: a finite number from 0 to MAX_PRICE (USD per 1M tokens)."""
    return is_num(v) and math.isfinite(v) and 0 <= v <= MAX_PRICE
