"""An archive read and parsed once: its index, SHA256SUMS, the run's run_config.json (as read and as a
RunConfig) and, for a sweep archive, sweep.json, each parsed when the archive is read (read.read_archive)
and handed down through verify, reproduce and the sweep's paths as one frozen value.

A member that cannot be parsed does not fail the read: its one-line reason is kept and raised (or
reported) where the member is used, so what a command prints, and in what order, does not depend on
parsing early.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from evaluator.archive.base import INDEX, RUNS, SUMS, Archive, ArchiveError
from evaluator.archive.recorded import data_error
from evaluator.runfolder.files import CONFIG
from evaluator.runfolder.runconfig import RunConfig, RunConfigError
from evaluator.runfolder.sweep_state import SWEEP_STATE, SweepState

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
    sweep_state: (
        Decoded[SweepState | None] | None
    )  # sweep.json (None when absent) of a sweep archive, else None


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


def _index(archive: Archive) -> dict[str, Any] | None:
    try:
        return archive.json_object(INDEX)
    except ArchiveError:
        return None


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
    index = _index(archive)
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
