"""What an archive's run_config.json says about its data, typed and checked when the archive is read.

`reproduce` turns these values into file lookups, hub requests and printed command lines, so a crafted
archive must not reach any of them with a value a real run never records: `files` as a list of numbers, a
revision holding shell syntax, a dataset id that is not one. A record that does not fit is refused when
the archive is read (archive.opened), the reason reported against run_config.json like any other
damage (verify: exit 1; reproduce: refused before anything is read or sent).

The recorded local pattern is checked where it is used (`local_pattern`): `doccount evaluate` records it
relative to the working folder (data.parquet.portable_pattern), so an absolute or climbing one
(`/proc/self/pagemap`, `../../x`) did not come from a run, and reproduce asks for --data-files instead.
"""

from __future__ import annotations

import re
from typing import Any

import msgspec

from evaluator.archive.base import ArchiveError
from evaluator.core.boundary import clip

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
