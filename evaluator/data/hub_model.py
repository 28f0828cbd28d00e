"""A model's weights at a pinned revision, fetched once into the Hugging Face cache (`doccount model`).

The revision (branch, tag or commit) is resolved by `huggingface_hub` (`HfApi.resolve_revision`, which
writes the cache's `refs/<revision>` entry) and the repository's files at that commit are fetched with
`snapshot_download`, exactly where vLLM looks for them: a server started with the same cache,
`--revision <commit>` and `HF_HUB_OFFLINE=1` then loads these files and asks the hub nothing.
Offline (HF_HUB_OFFLINE=1) the same calls answer from the cache, so the command also checks a copy.

Cache layout (huggingface_hub's "Manage the cache" guide):
    <HF_HUB_CACHE>/models--<owner>--<name>/{blobs/<etag>, refs/<branch>, snapshots/<commit>/<path>}
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from evaluator.core.errors import UserError
from evaluator.core.text import one_line
from evaluator.data.hub import COMMIT_RE, hub_cache_dir, repo_folder

REPO_TYPE = "model"


class HubModelError(UserError):
    """The model cannot be resolved or fetched; the message is one line with the fix."""


@dataclass(frozen=True)
class ModelSnapshot:
    repo_id: str
    requested: str | None  # the --revision given (None: the default branch)
    commit: str
    folder: Path
    files: int
    size: int
    offline: bool


def serve_command(repo_id: str, commit: str) -> str:
    """The make line that serves exactly these weights from the cache (compose.yaml's vllm service)."""
    return f"HF_HUB_OFFLINE=1 make serve MODEL={repo_id} MODEL_REVISION={commit}"


def fetch_model(
    repo_id: str, revision: str | None, allow: list[str] | None = None, ignore: list[str] | None = None
) -> ModelSnapshot:
    """Resolve the revision and fetch (or find in the cache) the model's files at that commit."""
    from huggingface_hub import HfApi, constants, snapshot_download

    offline = constants.is_offline_mode()
    try:
        resolved = HfApi().resolve_revision(
            repo_id, repo_type=REPO_TYPE, revision=revision, local_files_only=offline
        )
        folder = Path(
            snapshot_download(
                repo_id, repo_type=REPO_TYPE, revision=resolved, allow_patterns=allow, ignore_patterns=ignore
            )
        )
    except Exception as exc:
        error = model_error(exc, repo_id, revision, offline)
        if error is None:
            raise
        raise error from None
    files = [p for p in folder.rglob("*") if p.is_file()]
    size = sum(p.stat().st_size for p in files)
    return ModelSnapshot(repo_id, revision, resolved.resolved, folder, len(files), size, offline)


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
        cached = cached_model_commits(hub_cache_dir(), repo_id)
        hint = (
            f"; the cache holds commit(s) {', '.join(cached[:3])}: pass one as --revision" if cached else ""
        )
        return HubModelError(
            f"{repo_id} at revision {rev} is not (completely) in the Hugging Face cache ({hub_cache_dir()}) "
            f"and {why}: run `{fetch}` where the hub is reachable, with the same HF_HOME or HF_HUB_CACHE "
            f"(or copy its {repo_folder('', repo_id, REPO_TYPE).name} folder here){hint}"
        )
    if isinstance(exc, (errors.HfHubHTTPError, OSError, ValueError)):
        return HubModelError(
            f"could not fetch {repo_id} (revision {rev}) from the Hugging Face hub: "
            f"{type(exc).__name__}: {one_line(exc)[:300]}"
        )
    return None


def cached_model_commits(cache_dir: str, repo_id: str) -> list[str]:
    snaps = repo_folder(cache_dir, repo_id, REPO_TYPE) / "snapshots"
    if not snaps.is_dir():
        return []
    return sorted(p.name for p in snaps.iterdir() if p.is_dir() and COMMIT_RE.fullmatch(p.name))


def model_report(snap: ModelSnapshot) -> list[str]:
    """What `doccount model` prints: the commit first, then where the files are and how to serve them."""
    return [
        f"commit {snap.commit}",
        f"model {snap.repo_id} (revision {snap.requested or 'main'})",
        f"{snap.files} file(s), {snap.size / 1e6:.1f} MB in {snap.folder}",
        f"serve: {serve_command(snap.repo_id, snap.commit)}",
    ]
