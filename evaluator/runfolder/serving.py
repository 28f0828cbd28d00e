"""What served a self-hosted run: the weights, the server and its GPUs (run_config.json `serving`).

The evaluator does not start the server, so whoever does tells it: a sweep's unit in its launch contract
(runfolder.handoff, `served`), `make serve`/`make eval` and other callers through the environment (all
optional):

    DOCCOUNT_SERVED_MODEL    the model the server loaded: a Hugging Face id or a folder (make: MODEL)
    DOCCOUNT_MODEL_REVISION  the revision asked for: branch, tag or commit (make: MODEL_REVISION)
    DOCCOUNT_MODEL_COMMIT    the commit it resolved to, when the caller knows it
    DOCCOUNT_VLLM_ARGS       the server's arguments, a JSON list of strings (make: the vllm container's)
    DOCCOUNT_GPUS            what `nvidia-smi --query-gpu=name,memory.total,driver_version
                             --format=csv,noheader` printed where the server runs (absent: no GPU seen)
    DOCCOUNT_IMAGE_VLLM      the server's image id (also under environment.containers)

The server adds vLLM's /version and the `root` of the served model in /v1/models; the commit, when not
given, is read from this machine's HF cache, only when DOCCOUNT_SERVED_MODEL says it was served here.
"""

from __future__ import annotations

import csv
import json
import re
import shlex
from collections.abc import Mapping
from typing import Any

import msgspec

COMMIT_RE = re.compile(r"[0-9a-f]{40}")
REPO_ID_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9][A-Za-z0-9_.-]*")


class Gpu(msgspec.Struct, kw_only=True, frozen=True):
    """One GPU as nvidia-smi names it."""

    name: str
    """Product name, e.g. `NVIDIA H100 80GB HBM3`."""

    memory_total: str
    """Total memory as nvidia-smi prints it, e.g. `81559 MiB`."""

    driver_version: str
    """NVIDIA driver version."""


class Serving(msgspec.Struct, kw_only=True, omit_defaults=True):
    """What served the run (self-hosted models); a field is absent when it is not known."""

    model: str | None = None
    """The model the server loaded: a Hugging Face model id or a folder."""

    revision: str | None = None
    """The revision asked for (branch, tag or commit; absent: the default branch)."""

    commit: str | None = None
    """The commit of the weights that answered (40 hex digits)."""

    server_version: str | None = None
    """The server's version (vLLM's GET /version)."""

    image: str | None = None
    """The server's container image id."""

    args: list[str] = msgspec.field(default_factory=list)
    """The server's arguments (after the launcher's own: served name, host, port, image limit)."""

    gpus: list[Gpu] = msgspec.field(default_factory=list)
    """The GPUs where the server ran (none: none seen, e.g. a CPU server or a remote endpoint)."""


def parse_gpus(text: str | None) -> list[Gpu]:
    """nvidia-smi's `--query-gpu=name,memory.total,driver_version --format=csv[,noheader]` output."""
    gpus = []
    for row in csv.reader((text or "").splitlines(), skipinitialspace=True):
        cells = [c.strip() for c in row]
        if len(cells) != 3 or not cells[0] or cells[0] == "name":  # blank line or the csv header
            continue
        gpus.append(Gpu(name=cells[0], memory_total=cells[1], driver_version=cells[2]))
    return gpus


def parse_args(text: str | None) -> list[str]:
    """Server arguments: a JSON list of strings (as `docker inspect` prints a command), else shell words."""
    text = (text or "").strip()
    if not text:
        return []
    try:
        value = json.loads(text)
    except ValueError:
        return shlex.split(text)
    if value is None:  # `docker inspect` of a container without a command
        return []
    if isinstance(value, list) and all(isinstance(a, str) for a in value):
        return value
    return shlex.split(text)


def server_version(server: Mapping[str, Any]) -> str | None:
    version = server.get("version")
    found = version.get("version") if isinstance(version, dict) else None
    return found if isinstance(found, str) else None


def served_root(server: Mapping[str, Any], model: str) -> str | None:
    """The id or folder the server loaded for the model name the requests send (/v1/models `root`)."""
    roots = server.get("roots")
    root = roots.get(model) if isinstance(roots, dict) else None
    return root if isinstance(root, str) and root else None


def is_repo_id(model: str | None) -> bool:
    return bool(model) and REPO_ID_RE.fullmatch(model or "") is not None


def cached_commit(model: str, revision: str | None) -> str | None:
    """The commit the Hugging Face cache maps a revision of a model to (no network); None if not cached."""
    if revision and COMMIT_RE.fullmatch(revision):
        return revision
    if not is_repo_id(model):
        return None
    from huggingface_hub import HfApi

    try:
        resolved = HfApi().resolve_revision(
            model, repo_type="model", revision=revision, local_files_only=True
        )
    except Exception:  # noqa: BLE001 - not in this cache: the commit stays unknown
        return None
    commit = resolved.resolved
    return commit if isinstance(commit, str) and COMMIT_RE.fullmatch(commit) else None


def served_from_env(env: Mapping[str, str]) -> Serving:
    """What the DOCCOUNT_* variables say was served (the Make path); empty fields when none is set."""
    return Serving(
        model=env.get("DOCCOUNT_SERVED_MODEL", "").strip() or None,
        revision=env.get("DOCCOUNT_MODEL_REVISION", "").strip() or None,
        commit=env.get("DOCCOUNT_MODEL_COMMIT", "").strip() or None,
        image=env.get("DOCCOUNT_IMAGE_VLLM", "").strip() or None,
        args=parse_args(env.get("DOCCOUNT_VLLM_ARGS")),
        gpus=parse_gpus(env.get("DOCCOUNT_GPUS")),
    )


def serving_record(
    server: Mapping[str, Any], model_sent: str, env: Mapping[str, str] | Serving
) -> Serving | None:
    """This run's `serving` from what its starter said (a contract's `served` or DOCCOUNT_* variables) and
    the server's self-description; None when nothing says the model is self-hosted."""
    given = env if isinstance(env, Serving) else served_from_env(env)
    started_here = given.model
    models = server.get("models")
    listed = models if isinstance(models, list) else []
    # A server that reports a version (vLLM) and lists the name sent, with no other root: it loaded that id.
    model = (
        started_here
        or served_root(server, model_sent)
        or (model_sent if server_version(server) and model_sent in listed else None)
    )
    revision, args, gpus = given.revision, given.args, given.gpus
    if not (model or revision or args or gpus):
        return None
    commit = given.commit
    if commit is None and model and (started_here or (revision and COMMIT_RE.fullmatch(revision))):
        commit = cached_commit(model, revision)
    return Serving(
        model=model,
        revision=revision,
        commit=commit,
        server_version=server_version(server),
        image=given.image,
        args=args,
        gpus=gpus,
    )
