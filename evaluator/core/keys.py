"""The (sample_id, repeat) key of a record and the per-request seed. Pure.

* `derive_seed(S, sample_id, repeat)`: the integer sent as `seed` with `--seed S`. A SHA-256 of the
  three values, so it is the same on every run and on resume, and differs between questions and
  between repeats. It is kept in 0 .. 2**31 - 1: vLLM takes any signed 64-bit seed (its request
  model bounds `seed` by int64), OpenAI's chat API an integer, and some OpenAI-compatible providers
  (Gemini's generationConfig.seed) a 32-bit one; a non-negative 31-bit value fits all of them.
* `record_key(record)`: (sample_id, repeat); a record without `repeat` (every run without
  `--repeats`) is repeat 0.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

from evaluator.core.jsonl import JSONObject

SEED_MODULUS = 2**31  # derived seeds are 0 .. 2**31 - 1 (see the module docstring)

Key = tuple[str, int]


def derive_seed(base: int, sample_id: str, repeat: int = 0) -> int:
    """The request seed for one question and repeat under `--seed base`: the first 8 bytes of
    sha256(f"doccount-seed-v1:{base}:{repeat}:{sample_id}"), big-endian, mod 2**31."""
    digest = hashlib.sha256(f"doccount-seed-v1:{base}:{repeat}:{sample_id}".encode()).digest()
    return int.from_bytes(digest[:8], "big") % SEED_MODULUS


def record_repeat(record: JSONObject) -> int | None:
    """The record's repeat index (0 when absent); None when it is there but not a non-negative int."""
    r = record.get("repeat", 0)
    if r is None:
        return 0
    if isinstance(r, bool) or not isinstance(r, int) or r < 0:
        return None
    return r


def record_key(record: JSONObject) -> Key:
    return (record["sample_id"], record_repeat(record) or 0)


def unit_keys(sample_ids: Iterable[str], repeats: int) -> list[Key]:
    """Every (question, repeat) a run must answer, question by question."""
    return [(sid, r) for sid in sample_ids for r in range(repeats)]
