"""The settings an evaluate run records in run_config.json, as the runner makes them (TypedDicts).

`RunConfig` keeps `sampling`, `request_policy` and `data` as plain dicts: it reads folders and archives
written by every earlier version, whose sections must come back byte for byte (an integer stays an
integer, a key this version does not know stays). These types say what this version writes into them
(evaluation.runner.settings_summary, evaluation.data_check.data_record), so the writers are checked.
"""

from __future__ import annotations

from typing import Any, TypedDict

from evaluator.data.parquet import DataOrigin
from evaluator.request.shape import PresetRecord


class BatchPolicy(TypedDict, total=False):
    """request_policy.batch: how rows were sent in batches (evaluation.options.batch_settings)."""

    mode: str  # batch_api | offline_files
    max_mb: float
    poll_s: float
    max_wait_s: float


class RequestPolicy(TypedDict, total=False):
    """request_policy: concurrency, timeout and retries; how requests were sent, not what they hold.
    max_total_tokens and batch are there only when used."""

    concurrency: int
    timeout_s: float
    max_retries: int
    backoff_base_s: float
    backoff_max_s: float
    retry_after_max_s: float
    max_total_tokens: int
    max_requests_per_minute: float | None
    max_tokens_per_minute: float | None
    batch: BatchPolicy
    rate_limit_patience_s: float
    smoke_check: bool  # false only: --no-smoke-check


class RunSettings(TypedDict, total=False):
    """runner.settings_summary: RunConfig's fields (seed, repeats and preset there only when used)."""

    benchmark: str
    model: str
    backend: str
    endpoint: str
    endpoints: list[str]
    sampling: dict[str, Any]  # msgspec.to_builtins(Sampling): its extra body is the user's free-form JSON
    retry_parse_failures: int
    seed: int
    repeats: int
    reasoning: str
    strip_tokens: list[str]  # --strip-token, when given
    request_policy: RequestPolicy
    preset: PresetRecord


class DataFile(TypedDict):
    name: str
    sha256: str
    bytes: int


class Selection(TypedDict):
    questions: int
    manifest_sha256: str


class DataRecord(DataOrigin, total=False):
    """run_config.json `data` as data_check.data_record writes it: the origin (parquet.DataSource.origin:
    source with dataset and revisions, or a local pattern), the files, the digests, the folder's selection."""

    files: list[DataFile]
    questions: int
    manifest_sha256: str
    labels_sha256: str
    messages_sha256: str
    selection: Selection


class Environment(TypedDict):
    """run_config.json `environment` (environment_info)."""

    evaluator_version: str
    git_commit: str | None
    python: str
    platform: str
    packages: dict[str, str | None]
    containers: dict[str, str]
