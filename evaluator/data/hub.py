"""The benchmark's Hugging Face dataset: a pinned revision, fetched once, read from the HF cache.

Online, the revision (branch, tag or commit) is resolved by `huggingface_hub` itself
(`HfApi.resolve_revision`, which also writes the `refs/` entry of the cache) and the parquet files
of that commit are fetched with `snapshot_download`. Offline (`HF_HUB_OFFLINE=1`, or no route to the
hub) the same two calls answer from the cache: a branch or tag through `refs/<name>`, a full commit
id directly, the files from `snapshots/<commit>/` (symlinks into `blobs/`). Either way the files
are read where the library keeps them; nothing is copied or converted.

Cache layout (huggingface_hub's "Manage the cache" guide):
    <HF_HUB_CACHE>/datasets--<owner>--<name>/{blobs/<etag>, refs/<branch>, snapshots/<commit>/<path>}

A model's weights are fetched the same way (`doccount model`: `fetch_model`), exactly where vLLM looks for
them (`models--<owner>--<name>/`): a server started with the same cache, `--revision <commit>` and
`HF_HUB_OFFLINE=1` then loads these files and asks the hub nothing. Offline the same calls answer from
the cache, so the command also checks a copy.
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from evaluator.core.errors import UserError
from evaluator.core.text import one_line
from evaluator.data.benchmarks import DEFAULT_BENCHMARK
from evaluator.data.benchmarks.base import Benchmark

if TYPE_CHECKING:
    from huggingface_hub import ResolvedRevision


REPO_TYPE = "dataset"
COMMIT_RE = re.compile(r"[0-9a-f]{40}")


class HubDataError(UserError):
    """The hub dataset cannot be resolved or read; the message is one line with the fix."""


@dataclass(frozen=True)
class HubSnapshot:
    """A hub repo at the commit a revision resolved to, its files where the library keeps them."""

    repo_id: str
    requested: str | None  # the --revision given (None: the default branch)
    commit: str
    folder: Path
    offline: bool

    def heading(self, kind: str) -> list[str]:
        """A report's first lines: the commit, then the repo and the revision asked for."""
        return [f"commit {self.commit}", f"{kind} {self.repo_id} (revision {self.requested or 'main'})"]


@dataclass(frozen=True)
class Snapshot(HubSnapshot):
    """The benchmark's dataset: its parquet files."""

    files: list[Path]


def repo_folder(cache_dir: str | os.PathLike[str], repo_id: str, repo_type: str = REPO_TYPE) -> Path:
    """The cache folder of a repo, as huggingface_hub names it."""
    from huggingface_hub.file_download import repo_folder_name

    return Path(cache_dir) / repo_folder_name(repo_id=repo_id, repo_type=repo_type)


def hub_cache_dir() -> str:
    from huggingface_hub import constants

    return str(constants.HF_HUB_CACHE)


def cached_commits(cache_dir: str | os.PathLike[str], repo_id: str, repo_type: str = REPO_TYPE) -> list[str]:
    """Commits with a snapshot folder in the cache, e.g. left by `datasets.load_dataset`."""
    snaps = repo_folder(cache_dir, repo_id, repo_type) / "snapshots"
    if not snaps.is_dir():
        return []
    return sorted(p.name for p in snaps.iterdir() if p.is_dir() and COMMIT_RE.fullmatch(p.name))


def fetch_command(benchmark: str, repo_id: str, default_repo: str, revision: str | None) -> str:
    """The one command that puts this revision into the cache (what `make data` runs), shell-quoted: the
    dataset id and revision may come from an archive."""
    words = ["doccount", "data", "--benchmark", benchmark]
    if repo_id != default_repo:
        words += ["--dataset", repo_id]
    if revision:
        words += ["--revision", revision]
    return shlex.join(words)


def make_command(benchmark: str, repo_id: str, default_repo: str, revision: str | None) -> str | None:
    """The `make data` line for the same fetch (None for a dataset other than the benchmark's): each word's
    `$` doubled for Make, then shell-quoted."""
    if repo_id != default_repo:
        return None
    words = (
        ["make", "data"]
        + ([f"BENCHMARK={benchmark}"] if benchmark != DEFAULT_BENCHMARK else [])
        + ([f"DATASET_REVISION={revision}"] if revision else [])
    )
    return shlex.join(w.replace("$", "$$") for w in words)


def not_cached_message(
    benchmark: Benchmark, repo_id: str, revision: str | None, cache_dir: str, commits: list[str], why: str
) -> str:
    """One line: what is missing, and what to run (pure; `why` says why the hub was not asked)."""
    rev = revision or "main"
    fetch = fetch_command(benchmark.name, repo_id, benchmark.hub_id, revision)
    make = make_command(benchmark.name, repo_id, benchmark.hub_id, revision)
    line = (
        f"{repo_id} at revision {rev} is not in the Hugging Face cache ({cache_dir}) and {why}: "
        f"run `{fetch}`{f' (or `{make}`)' if make else ''} where the hub is reachable, with the same "
        "HF_HOME or HF_HUB_CACHE "
        f"(or copy its {repo_folder('', repo_id).name} folder here), or pass --data-files GLOB"
    )
    if commits:
        shown = ", ".join(commits[:3]) + (" ..." if len(commits) > 3 else "")
        line += f"; the cache holds commit(s) {shown}: pass one as --revision"
    return line


def _why_unreachable(exc: BaseException | None, offline: bool) -> str:
    if offline:
        return "HF_HUB_OFFLINE is set"
    cause = exc.__cause__ if exc is not None and exc.__cause__ is not None else exc
    return f"the hub cannot be reached ({type(cause).__name__})" if cause else "the hub cannot be reached"


def resolve(
    repo_id: str, revision: str | None, offline: bool, repo_type: str = REPO_TYPE
) -> ResolvedRevision:
    """The commit for a revision, by the hub library's own resolution (cache-only when offline)."""
    from huggingface_hub import HfApi

    # local_files_only when offline: the library would fall back to refs/ anyway, after a warning.
    return HfApi().resolve_revision(repo_id, repo_type=repo_type, revision=revision, local_files_only=offline)


def _download(
    repo_id: str,
    revision: str | None,
    repo_type: str,
    error_of: Callable[[Exception, bool], UserError | None],
    **options: Any,
) -> tuple[str, Path, bool]:
    """(commit, folder, offline): the revision resolved and its files fetched (or found in the cache) by
    `snapshot_download` with these options; what the hub library raised becomes `error_of`'s one-line
    error (None: not a hub problem, let it through)."""
    from huggingface_hub import constants, snapshot_download

    offline = constants.is_offline_mode()
    try:
        resolved = resolve(repo_id, revision, offline, repo_type)
        folder = snapshot_download(repo_id, repo_type=repo_type, revision=resolved, **options)
    except Exception as exc:
        error = error_of(exc, offline)
        if error is None:
            raise
        raise error from None
    return resolved.resolved, Path(folder), offline


def fetch(
    benchmark: Benchmark, dataset: str | None, revision: str | None, local_dir: str | None = None
) -> Snapshot:
    """Resolve the revision and fetch (or find in the cache) the benchmark's parquet files."""
    repo_id = dataset or benchmark.hub_id
    commit, folder, offline = _download(
        repo_id,
        revision,
        REPO_TYPE,
        lambda exc, offline: hub_error(exc, benchmark, repo_id, revision, offline),
        allow_patterns=[benchmark.hub_files],
        local_dir=local_dir,
    )
    files = sorted(p for p in folder.glob(benchmark.hub_files) if p.is_file())
    if not files:
        raise HubDataError(
            f"{repo_id} at commit {commit} has no files matching {benchmark.hub_files!r} in {folder}; run "
            f"`{fetch_command(benchmark.name, repo_id, benchmark.hub_id, commit)}` where the hub is reachable"
        )
    return Snapshot(repo_id, revision, commit, folder, offline, files)


def hub_error(
    exc: Exception, benchmark: Benchmark, repo_id: str, revision: str | None, offline: bool
) -> HubDataError | None:
    """The one-line error for what huggingface_hub raised (None: not a data problem, let it through)."""
    from huggingface_hub import errors

    cache_dir = hub_cache_dir()
    fetch_line = fetch_command(benchmark.name, repo_id, benchmark.hub_id, revision)
    if isinstance(exc, errors.RevisionNotFoundError):
        return HubDataError(
            f"{repo_id} has no revision {revision!r}: pass a branch, a tag or a full 40-character commit id "
            "as --revision"
        )
    if isinstance(exc, (errors.RepositoryNotFoundError, errors.GatedRepoError)):
        return HubDataError(
            f"{repo_id} is not a dataset you can read on the hub ({type(exc).__name__}): check --dataset, "
            "and set HF_TOKEN if it is gated or private"
        )
    if isinstance(exc, errors.LocalEntryNotFoundError):  # also IncompleteSnapshotError
        try:  # the commit the cache maps this revision to (only to word the message)
            commit: str | None = resolve(repo_id, revision, True).resolved
        except Exception:  # noqa: BLE001
            commit = None
        if commit and (repo_folder(cache_dir, repo_id) / "snapshots" / commit).is_dir():
            return HubDataError(
                f"the cached copy of {repo_id} at commit {commit} is incomplete (some of its "
                f"{benchmark.hub_files} files are missing) and {_why_unreachable(exc, offline)}: run "
                f"`{fetch_line}` where the hub is reachable"
            )
    if isinstance(exc, (errors.LocalEntryNotFoundError, errors.RevisionResolutionError)):
        commits = cached_commits(cache_dir, repo_id)
        why = _why_unreachable(exc, offline)
        return HubDataError(not_cached_message(benchmark, repo_id, revision, cache_dir, commits, why))
    if isinstance(exc, (errors.HfHubHTTPError, OSError, ValueError)):
        return HubDataError(
            f"could not load {repo_id} (revision {revision or 'main'}) from the Hugging Face hub: "
            f"{type(exc).__name__}: {one_line(exc)[:300]}"
        )
    return None


def fetch_report(snap: Snapshot, benchmark: Benchmark, local_dir: str | None) -> list[str]:
    """What `doccount data` prints: the commit first, then where the files are and how to use them."""
    size = sum(p.stat().st_size for p in snap.files)
    lines = [*snap.heading("dataset"), f"{len(snap.files)} file(s), {size / 1e6:.1f} MB in {snap.folder}"]
    if local_dir:
        glob = str(Path(local_dir) / benchmark.hub_files)
        lines.append(f"use: doccount-evaluate --benchmark {benchmark.name} --data-files '{glob}' ...")
    else:
        lines.append(
            f"offline use: HF_HUB_OFFLINE=1 doccount-evaluate --benchmark {benchmark.name} "
            f"--revision {snap.commit} ..."
        )
    return lines


MODEL_REPO_TYPE = "model"


class HubModelError(UserError):
    """The model cannot be resolved or fetched; the message is one line with the fix."""


@dataclass(frozen=True)
class ModelSnapshot(HubSnapshot):
    """A model's weights: how many files, how many bytes."""

    files: int
    size: int


def fetch_model(
    repo_id: str, revision: str | None, allow: list[str] | None = None, ignore: list[str] | None = None
) -> ModelSnapshot:
    """Resolve the revision and fetch (or find in the cache) the model's files at that commit."""
    commit, folder, offline = _download(
        repo_id,
        revision,
        MODEL_REPO_TYPE,
        lambda exc, offline: model_error(exc, repo_id, revision, offline),
        allow_patterns=allow,
        ignore_patterns=ignore,
    )
    files = [p for p in folder.rglob("*") if p.is_file()]
    size = sum(p.stat().st_size for p in files)
    return ModelSnapshot(repo_id, revision, commit, folder, offline, len(files), size)


def model_error(exc: Exception, repo_id: str, revision: str | None, offline: bool) -> HubModelError | None:
    """The one-line error for what huggingface_hub raised (None: not a hub problem, let it through)."""
    from huggingface_hub import errors

    rev = revision or "main"
    fetch = f"doccount model {repo_id}" + (f" --revision {revision}" if revision else "")
    if isinstance(exc, errors.RevisionNotFoundError):
        return HubModelError(
            f"{repo_id} has no revision {revision!r}: pass a branch, a tag or a full 40-character commit id "
            "as --revision"
        )
    if isinstance(exc, (errors.RepositoryNotFoundError, errors.GatedRepoError)):
        return HubModelError(
            f"{repo_id} is not a model you can read on the hub ({type(exc).__name__}): check the model id, "
            "and set HF_TOKEN if it is gated or private (accept its license on the hub first)"
        )
    if isinstance(exc, (errors.LocalEntryNotFoundError, errors.RevisionResolutionError)):
        why = "HF_HUB_OFFLINE is set" if offline else "the hub cannot be reached"
        cached = cached_commits(hub_cache_dir(), repo_id, MODEL_REPO_TYPE)
        hint = (
            f"; the cache holds commit(s) {', '.join(cached[:3])}: pass one as --revision" if cached else ""
        )
        return HubModelError(
            f"{repo_id} at revision {rev} is not (completely) in the Hugging Face cache ({hub_cache_dir()}) "
            f"and {why}: run `{fetch}` where the hub is reachable, with the same HF_HOME or HF_HUB_CACHE "
            f"(or copy its {repo_folder('', repo_id, MODEL_REPO_TYPE).name} folder here){hint}"
        )
    if isinstance(exc, (errors.HfHubHTTPError, OSError, ValueError)):
        return HubModelError(
            f"could not fetch {repo_id} (revision {rev}) from the Hugging Face hub: "
            f"{type(exc).__name__}: {one_line(exc)[:300]}"
        )
    return None


def model_report(snap: ModelSnapshot) -> list[str]:
    """What `doccount model` prints: the commit first, then where the files are and how to serve them."""
    return [
        *snap.heading("model"),
        f"{snap.files} file(s), {snap.size / 1e6:.1f} MB in {snap.folder}",
        # the make line that serves exactly these weights from the cache (compose.yaml's vllm service)
        f"serve: HF_HUB_OFFLINE=1 make serve MODEL={snap.repo_id} MODEL_REVISION={snap.commit}",
    ]
