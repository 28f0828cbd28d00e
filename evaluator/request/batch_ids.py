"""Batch ids: which ones can be saved, polled and printed. Its own module, without the openai client,
so that the run-folder ledger (runfolder.batches) and the commands that read it start without openai."""

from __future__ import annotations

import re
from typing import Any, TypeGuard

BATCH_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:=+-]{0,199}")


def usable_batch_id(value: Any) -> TypeGuard[str]:
    """Pure: whether a batch id can be saved, polled and printed (a non-empty string of id characters)."""
    return isinstance(value, str) and BATCH_ID.fullmatch(value) is not None
