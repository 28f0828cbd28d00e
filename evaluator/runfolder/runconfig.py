"""The run's identity: run_config.json as one typed, versioned model (a msgspec Struct).

Built from the settings and the data (`build_run_config`), carried over from an earlier invocation of the
folder (`continue_run`), checked against it (`check_compatible`), and read back by score, report,
archive, verify and reproduce (`load_run_config`). Bump RUN_CONFIG_SCHEMA_VERSION when a field changes
meaning; adding a setting is walked through in docs/development.md (a field with a default, so older
folders still read, named in IDENTITY_FIELDS when it changes a request byte or a number).

`sampling`, `request_policy` and `data` stay plain dicts: folders and archives of every earlier version
must come back byte for byte; the TypedDicts say what this version writes into them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal, TypedDict

import msgspec

from evaluator.core.errors import UserError
from evaluator.core.jsonl import JSONObject
from evaluator.core.vocab import Launcher
from evaluator.data.parquet import DataOrigin
from evaluator.request.shape import PresetRecord
from evaluator.runfolder.serving import Serving


class BatchPolicy(TypedDict, total=False):
    """request_policy.batch: how rows were sent in batches (evaluation.options.batch_settings)."""

    mode: str  # batch_api | offline_files
    max_mb: float
    poll_s: float
    max_wait_s: float


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


RUN_CONFIG_SCHEMA_VERSION = 1
# Settings that change a request byte or a number: a run folder refuses records made under others.
IDENTITY_FIELDS = ("benchmark", "model", "sampling", "retry_parse_failures", "seed", "strip_tokens")


# Fields left out of run_config.json when None (a field added later: an older folder reads the same).
OMITTED_WHEN_NONE = ("servers", "serving", "launch", "reasoning", "seed", "repeats", "preset", "strip_tokens")


class RunConfigError(UserError):
    """run_config.json cannot be read, or belongs to a run with other settings."""


class Launch(msgspec.Struct, kw_only=True):
    """How a sweep started the server of a served run (evaluator.study.unit); what was served is `serving`.
    No secret: a key reaches a server only through the environment, by name."""

    launcher: Launcher
    """`process` (the sweep's `command`) or `container` (the serving image)."""

    command: list[str]
    """The argv as started: COMMAND... MODEL --host --port --served-model-name [--revision] ARGS
    (the port is this invocation's)."""

    gpus: list[str] = msgspec.field(default_factory=list)
    """The GPU ids the server was given (CUDA_VISIBLE_DEVICES; the container's devices)."""

    image: str | None = None
    """The serving image by name (container launcher)."""

    tries: int = 1
    """Starts it took until the server was ready (at most 3)."""

    host: str | None = None
    """The host that ran the server."""

    job_id: str | None = None
    """The scheduler's job id (Slurm)."""

    partition: str | None = None
    """The scheduler's partition (Slurm)."""


class RunConfig(msgspec.Struct, kw_only=True, omit_defaults=False):
    """run_config.json: the settings and hashes of one run folder, no secrets."""

    schema_version: int = RUN_CONFIG_SCHEMA_VERSION
    """Version of this layout (evaluator.runfolder.runconfig.RUN_CONFIG_SCHEMA_VERSION)."""

    benchmark: str
    """Benchmark name (`doccount`, `countqa`)."""

    model: str
    """Model id sent in every request."""

    backend: str = "api"
    """`api` (a remote endpoint) or `vllm` (self-hosted)."""

    endpoint: str | None = None
    """The first endpoint (base URL as normalised)."""

    endpoints: list[str] = msgspec.field(default_factory=list)
    """Every endpoint the requests were spread over."""

    sampling: dict[str, Any] = msgspec.field(default_factory=dict)
    """The sampling fields sent (evaluator.core.records.Sampling as a dict, extra body included)."""

    retry_parse_failures: int = 0
    """Re-samples after a parse failure (--retry-parse-failures)."""

    request_policy: dict[str, Any] = msgspec.field(default_factory=dict)
    """Concurrency, timeout and retry policy: how requests were sent, not what they hold (the keys of the
    options declared Recorded at `request_policy.KEY`, retry_after_max_s, and `batch` when batched)."""

    data: dict[str, Any] = msgspec.field(default_factory=dict)
    """Data origin, file hashes, question count, manifest/labels/messages digests and the selection."""

    prompts: dict[str, str] = msgspec.field(default_factory=dict)
    """SHA-256 of each prompt file the benchmark reads."""

    environment: JSONObject = msgspec.field(default_factory=dict)
    """Evaluator version, git commit, Python, platform, key packages, container ids."""

    server: JSONObject = msgspec.field(default_factory=dict)
    """What the (first) endpoint said about itself (/v1/models, /version), the API key redacted."""

    servers: JSONObject | None = None
    """The same per endpoint, when there are several."""

    created_at: str | None = None
    """When the folder's first evaluate run started (UTC, ISO 8601)."""

    updated_at: str | None = None
    """When the latest evaluate run started."""

    invocations: int = 1
    """How many evaluate runs wrote this folder."""

    server_history: list[Any] = msgspec.field(default_factory=list)
    """Every distinct `server` that served part of the run, in order."""

    serving: Serving | None = None
    """What served a self-hosted model: weights (id, revision, commit), server version, image, arguments,
    GPUs (evaluator.runfolder.serving). Absent when nothing says the model was self-hosted."""

    launch: Launch | None = None
    """How the sweep started this invocation's server (a served run), or None (an endpoint run)."""

    reasoning: Literal["on", "off"] | None = None
    """The declared reasoning mode (--reasoning `on` or `off`), or None: not declared (and left out, as
    before the option existed). One per folder: a re-run declaring another is refused."""

    seed: int | None = None
    """The base seed of the requests (--seed), or None: not given (and left out)."""

    repeats: int | None = None
    """K, the samples per question (--repeats), written only when above 1; None reads as 1."""

    strip_tokens: list[str] | None = None
    """The exact strings removed from each response before the strict parser (--strip-token), in order,
    or None: none (and left out). Part of the run's identity: a resume under other tokens is refused."""

    preset: PresetRecord | None = None
    """Which request preset shaped the requests (--preset: name, file hash, flags), or None (left out)."""

    extra: JSONObject = msgspec.field(default_factory=dict)
    """Top-level keys a newer version wrote (written back unchanged, kept at the top level)."""

    @property
    def repeat_count(self) -> int:
        """K as recorded (absent: 1, the run folder of a run without --repeats)."""
        return self.repeats if self.repeats is not None and self.repeats > 1 else 1

    @classmethod
    def from_dict(cls, d: JSONObject) -> RunConfig:
        """Read run_config.json's object; unknown keys are kept in `extra`, wrong types refused."""
        known = set(cls.__struct_fields__) - {"extra"}
        body = {k: v for k, v in d.items() if k in known}
        extra = {k: v for k, v in d.items() if k not in known}
        try:
            return msgspec.convert({**body, "extra": extra}, cls)
        except msgspec.ValidationError as exc:
            raise RunConfigError(f"run_config.json does not hold a valid run configuration ({exc})") from None

    def to_dict(self) -> JSONObject:
        """The object written to run_config.json (unknown keys back at the top level)."""
        d = msgspec.to_builtins(self)
        extra = d.pop("extra")
        for key in OMITTED_WHEN_NONE:  # absent rather than null, as before these fields existed
            if d.get(key) is None:
                d.pop(key)
        return {**d, **extra}


def build_run_config(
    settings: JSONObject,
    data: DataRecord,
    prompts: dict[str, str],
    environment: Environment,
    servers: dict[str, JSONObject],
    now: str,
    serving: Serving | None = None,
    launch: Launch | None = None,
) -> RunConfig:
    """A fresh run's configuration. `settings` is evaluate.run_settings(...) (RunConfig's fields as
    recorded); `servers` maps each endpoint to its server_info, in the order of settings["endpoints"]."""
    known = set(RunConfig.__struct_fields__)
    body = {k: v for k, v in settings.items() if k in known}
    extra = {k: v for k, v in settings.items() if k not in known}
    first = next(iter(servers.values()), {})
    return RunConfig(
        **body,
        data=dict(data),
        prompts=prompts,
        environment=dict(environment),
        server=first,
        servers=servers if len(servers) > 1 else None,
        created_at=now,
        updated_at=now,
        invocations=1,
        server_history=[first],
        serving=serving,
        launch=launch,
        extra=extra,
    )


def check_compatible(old: RunConfig, new: RunConfig, root: Path) -> None:
    """Refuse to add records made under other settings or data to a folder (one line, with the fix)."""
    changed = [k for k in IDENTITY_FIELDS if getattr(old, k) != getattr(new, k)]
    if new.repeat_count < old.repeat_count:  # K may grow: repeat r's requests do not depend on K
        changed.append("repeats")
    for key, what in (
        ("manifest_sha256", "data (question set or images)"),
        ("labels_sha256", "data (ground truth or class labels)"),
        ("messages_sha256", "data (the text sent for some questions: prompt, question or definition)"),
    ):
        before = old.data.get(key)
        if before and before != new.data.get(key):
            changed.append(what)
    if old.prompts and old.prompts != new.prompts:
        changed.append("prompts")
    was, now = (c.serving.commit if c.serving else None for c in (old, new))
    if was and now and was != now:  # both known: other weights answer now
        changed.append(f"model weights (commit {was[:12]}... then {now[:12]}...)")
    if old.reasoning != new.reasoning:  # the claim the run's answers are checked and compared under
        changed.append(f"declared reasoning mode ({_mode(old.reasoning)}, now {_mode(new.reasoning)})")
    if changed:
        raise RunConfigError(
            f"{root} holds a run made with different {', '.join(changed)}; records made under other settings "
            "must not be mixed. Use a new --run-name (or --run-root) for the new settings"
        )


def _mode(declared: str | None) -> str:
    return f"--reasoning {declared}" if declared else "not declared"


def continue_run(old: RunConfig, new: RunConfig) -> tuple[RunConfig, str | None]:
    """`new` as the next invocation of the folder `old` describes, and a warning when the server now
    reports another version. Every server that served part of the run stays in server_history."""
    history = list(old.server_history) or [old.server]
    warning = None
    if new.server not in history:
        history.append(new.server)
        if old.server and old.server.get("version") != new.server.get("version"):
            warning = (
                f"the server now reports version {new.server.get('version')}, earlier "
                f"{old.server.get('version')}; both are recorded in run_config.json server_history"
            )
    merged = msgspec.structs.replace(
        new, created_at=old.created_at, invocations=old.invocations + 1, server_history=history
    )
    return merged, warning


def load_run_config(path: Path) -> RunConfig:
    """run_config.json of a folder, typed."""
    import json

    try:
        d = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise RunConfigError(f"{path} cannot be read as JSON ({exc}); the run folder is damaged") from None
    if not isinstance(d, dict):
        raise RunConfigError(f"{path} is not a JSON object; the run folder is damaged")
    return RunConfig.from_dict(d)
