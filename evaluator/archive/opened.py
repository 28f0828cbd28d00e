"""An archive read and parsed once (index, SHA256SUMS, the run's run_config.json, a sweep's sweep.json)
and handed down through verify, reproduce and the sweep's paths as one frozen value. A member that cannot
be parsed does not fail the read: its reason is kept and raised (or reported) where the member is used.

What run_config.json says about its data is typed and checked when the archive is read (`ArchivedData`):
`reproduce` turns these values into file lookups, hub requests and printed command lines, so a crafted
archive must not reach any of them with a value a real run never records (a revision holding shell
syntax, a dataset id that is not one). The recorded local pattern is checked where it is used
(`local_pattern`): a run records it relative to the working folder, so an absolute or climbing one did
not come from a run.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import msgspec

from evaluator.archive.base import INDEX, RUNS, SUMS, Archive, ArchiveError
from evaluator.core.boundary import clip
from evaluator.runfolder.files import CONFIG
from evaluator.runfolder.handoff import SWEEP_STATE, SweepState
from evaluator.runfolder.runconfig import RunConfig, RunConfigError

SWEEP_FORMAT = "doccount-sweep-archive"

T = TypeVar("T")


@dataclass(frozen=True)
class Decoded(Generic[T]):
    """A member as parsed when the archive was read: its value, or why it could not be parsed."""

    outcome: T | ArchiveError

    @property
    def error(self) -> str | None:
        """Why the member could not be parsed, or None."""
        return str(self.outcome) if isinstance(self.outcome, ArchiveError) else None

    def get(self) -> T:
        """The value; ArchiveError with the kept reason when the member could not be parsed."""
        if isinstance(self.outcome, ArchiveError):
            raise ArchiveError(str(self.outcome))
        return self.outcome


@dataclass(frozen=True)
class RunEntry:
    """The run of a run archive: its folder and its run_config.json, parsed once."""

    name: str
    dir: str  # runs/<name>
    raw: Decoded[dict[str, Any]]  # the JSON object as read (what the recorded endpoints are read from)
    config: RunConfig | None  # typed; None when it is not a valid run configuration
    error: str | None  # why `config` is None (verify reports it against run_config.json)


@dataclass(frozen=True, kw_only=True)
class OpenedArchive(Archive):
    """An archive's members (Archive) and what is parsed of them, once."""

    index: dict[str, Any] | None  # ARCHIVE.json; None when it is not a JSON object
    run_name: str | None  # the one run folder with a run_config.json
    sums: Decoded[tuple[dict[str, str], list[int]]]  # SHA256SUMS: name -> digest, and its bad lines
    run: RunEntry | None  # None when the archive holds no single run folder
    # sweep.json (None when absent) of a sweep archive, else None
    sweep_state: Decoded[SweepState | None] | None


def parse_sums(data: bytes) -> tuple[dict[str, str], list[int]]:
    sums: dict[str, str] = {}
    bad: list[int] = []
    for i, line in enumerate(data.decode("utf-8", "replace").splitlines(), 1):
        if not line.strip():
            continue
        digest, sep, name = line.partition("  ")
        if not sep or len(digest) != 64 or any(c not in "0123456789abcdef" for c in digest) or not name:
            bad.append(i)
            continue
        sums[name.lstrip("*")] = digest
    return sums, bad


def _decode(read: Callable[[], T]) -> Decoded[T]:
    try:
        return Decoded(read())
    except ArchiveError as exc:
        return Decoded(ArchiveError(str(exc)))


def _run_name(archive: Archive, index: dict[str, Any] | None) -> str | None:
    name = index.get("run_name") if index else None
    if isinstance(name, str) and f"{RUNS}/{name}/{CONFIG}" in archive.files:
        return name
    found = sorted(
        p.split("/")[1] for p in archive.files if p.startswith(f"{RUNS}/") and p.endswith(f"/{CONFIG}")
    )
    return found[0] if len(found) == 1 else None


def _run(archive: Archive, name: str | None) -> RunEntry | None:
    if name is None:
        return None
    run_dir = f"{RUNS}/{name}"
    raw = _decode(lambda: archive.json_object(f"{run_dir}/{CONFIG}"))
    if raw.error is not None:
        return RunEntry(name, run_dir, raw, None, raw.error)
    try:
        config = RunConfig.from_dict(raw.get())
    except RunConfigError as exc:
        return RunEntry(name, run_dir, raw, None, str(exc))
    error = data_error(config.data)  # typed here: reproduce reads files, the hub and prints commands from it
    return RunEntry(name, run_dir, raw, None if error else config, error)


def _sweep_state(archive: Archive) -> SweepState | None:
    if SWEEP_STATE not in archive.files:
        return None
    try:
        return SweepState.from_object(archive.json(SWEEP_STATE))
    except ValueError as exc:
        raise ArchiveError(f"{SWEEP_STATE} is not a sweep's state file ({exc})") from None


def parse_archive(archive: Archive) -> OpenedArchive:
    """Parse what verify, reproduce and the sweep's paths read of `archive`, once."""
    try:
        index: dict[str, Any] | None = archive.json_object(INDEX)
    except ArchiveError:
        index = None
    run_name = _run_name(archive, index)
    sweep = (index or {}).get("format") == SWEEP_FORMAT
    return OpenedArchive(
        source=archive.source,
        top=archive.top,
        files=archive.files,
        duplicates=archive.duplicates,
        index=index,
        run_name=run_name,
        sums=_decode(lambda: parse_sums(archive.whole(SUMS))),
        run=_run(archive, run_name),
        sweep_state=_decode(lambda: _sweep_state(archive)) if sweep else None,
    )


def config_of(archive: OpenedArchive) -> dict[str, Any]:
    """The run's run_config.json object as read; ArchiveError when it is missing or not a JSON object."""
    if archive.run is None:  # no single run folder: the same refusal as reading runs/None/run_config.json
        return archive.json_object(f"{RUNS}/{archive.run_name}/{CONFIG}")
    return archive.run.raw.get()


COMMIT = re.compile(r"[0-9a-f]{40}")
SHA256 = re.compile(r"[0-9a-f]{64}")
# git check-ref-format: no control characters, space, ~ ^ : ? * [ \ or DEL anywhere
_REF_FORBIDDEN = re.compile(r"[\x00-\x20\x7f~^:?*\[\\]")
REVISION_CHARS = 255  # a branch or tag name longer than this is no revision a run recorded


class ArchivedFile(msgspec.Struct):
    """One data file as the run recorded it (evaluation.data_check.data_record)."""

    name: str
    sha256: str
    bytes: int | None = None


class ArchivedSelection(msgspec.Struct):
    questions: int | None = None
    manifest_sha256: str | None = None


class ArchivedData(msgspec.Struct):
    """run_config.json `data` as reproduce reads it (unknown keys are allowed and ignored)."""

    source: str | None = None
    pattern: str | None = None
    dataset: str | None = None
    requested_revision: str | None = None
    revision: str | None = None
    files: list[ArchivedFile] = msgspec.field(default_factory=list)
    questions: int | None = None
    manifest_sha256: str | None = None
    selection: ArchivedSelection = msgspec.field(default_factory=ArchivedSelection)


def is_hub_revision(value: str) -> bool:
    """A revision the Hugging Face Hub can hold: a 40-hex commit, or a branch or tag name as
    `git check-ref-format --allow-onelevel` accepts it (the Hub's branches and tags are git refs)."""
    if COMMIT.fullmatch(value):
        return True
    if not value or len(value) > REVISION_CHARS or _REF_FORBIDDEN.search(value):
        return False
    if value == "@" or "@{" in value or ".." in value or "//" in value:
        return False
    if value.startswith(("/", "-")) or value.endswith(("/", ".", ".lock")):
        return False
    return not any(part.startswith(".") or part.endswith(".lock") for part in value.split("/"))


def _check_hub(data: ArchivedData) -> str | None:
    for key in ("revision", "requested_revision"):
        value = getattr(data, key)
        if value is not None and not is_hub_revision(value):
            return (
                f"data.{key} {clip(repr(value), 80)} is not a Hugging Face revision (a branch or tag name as "
                "git allows it, or a 40-hex commit)"
            )
    if data.dataset is not None:
        from huggingface_hub.utils import HFValidationError, validate_repo_id

        try:
            validate_repo_id(data.dataset)
        except HFValidationError:
            return f"data.dataset {clip(repr(data.dataset), 80)} is not a Hugging Face dataset id"
    return None


def data_error(data: dict[str, Any]) -> str | None:
    """Why run_config.json `data` is no data record a run writes (wrong types, a revision or dataset id the
    Hub cannot hold, a file digest that is not one), or None."""
    try:
        typed = msgspec.convert(data, ArchivedData)
    except msgspec.ValidationError as exc:
        return f"run_config.json `data` is not a data record doccount writes ({exc})"
    bad = [f.name for f in typed.files if not SHA256.fullmatch(f.sha256) or "/" in f.name]
    if bad:
        return f"run_config.json `data.files` holds {clip(repr(bad[0]), 80)}, not a data file name with its SHA-256"
    found = _check_hub(typed)
    return f"run_config.json {found}" if found else None


def archived_data(data: dict[str, Any]) -> ArchivedData:
    """The data record typed (ArchiveError when it is not one; an opened archive's was checked already)."""
    error = data_error(data)
    if error is not None:
        raise ArchiveError(error)
    return msgspec.convert(data, ArchivedData)


def local_pattern(pattern: str | None) -> str | None:
    """The recorded local pattern when it names files under the working folder (relative, no `..`, no
    `~`), else None: such a pattern is not one `doccount evaluate` records."""
    if not pattern or pattern.startswith(("/", "~", "\\")) or "\0" in pattern:
        return None
    if any(part == ".." for part in re.split(r"[/\\]", pattern)):
        return None
    return pattern
