"""What `evaluate` has settled before anything is sent: one value the senders share (online rows,
provider batches, offline batch files), instead of the same seven arguments three times."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evaluator.data.benchmarks.base import ManifestEntry
from evaluator.data.parquet import DataSource


@dataclass(frozen=True)
class RunPlan:
    settings: Any  # evaluation.runner.EvalSettings (typed loosely: runner imports the HTTP client)
    source: DataSource  # where the questions' rows and images are read
    root: Path  # the run folder, locked by the caller
    folder: list[ManifestEntry]  # the folder's whole question set (it only grows)
    selection: list[ManifestEntry]  # this invocation's questions (--limit)
    overwrite: bool = False  # re-send rows that are done
    quiet: bool = False  # no progress bar
