"""What run_config.json records about the evaluator, its environment and the server. No secrets."""

from __future__ import annotations

import os
import platform
import subprocess
from collections.abc import Mapping
from importlib import metadata
from pathlib import Path
from typing import Any

import evaluator
from evaluator.core.boundary import json_text, parse_json, safe_string
from evaluator.core.jsonl import JSONObject
from evaluator.core.secrets import Redactor
from evaluator.request.bounds import MAX_MODELS_BYTES, MAX_SMALL_BYTES, BoundedGets
from evaluator.request.endpoint import server_root, split_query
from evaluator.runfolder.handoff import read_contract
from evaluator.runfolder.runconfig import Environment, Launch
from evaluator.runfolder.serving import Serving, serving_record

KEY_PACKAGES = ("openai", "httpx2", "pyarrow", "huggingface_hub", "click", "numpy", "matplotlib", "tqdm")
# Set by the Makefile / compose for containerised runs: image ids and file hashes.
CONTAINER_ENV = (
    "DOCCOUNT_IMAGE_EVAL", "DOCCOUNT_IMAGE_VLLM", "DOCCOUNT_COMPOSE_SHA256",
    "DOCCOUNT_DOCKERFILE_EVAL_SHA256", "DOCCOUNT_DOCKERFILE_VLLM_SHA256",
    "DOCCOUNT_DOCKERFILE_VLLM_CPU_SHA256", "DOCCOUNT_LOCK_SHA256", "DOCCOUNT_GIT_COMMIT",
    "DOCCOUNT_VLLM_BATCH_INVARIANT",
)  # fmt: skip


def served_provenance(
    server: Mapping[str, Any], model_sent: str, env: Mapping[str, str] = os.environ
) -> tuple[Serving | None, Launch | None, dict[str, str]]:
    """run_config.json `serving` and `launch`, and container variables to record: from a sweep's launch
    contract when HANDOFF_ENV names one (its image id as DOCCOUNT_IMAGE_VLLM), else DOCCOUNT_* variables."""
    contract = read_contract(env)
    if contract is None:
        return serving_record(server, model_sent, env), None, {}
    served = contract.served or Serving()
    image = {"DOCCOUNT_IMAGE_VLLM": served.image} if served.image else {}
    return serving_record(server, model_sent, served), contract.launch, image


def git_commit() -> str | None:
    if os.environ.get("DOCCOUNT_GIT_COMMIT"):
        return os.environ["DOCCOUNT_GIT_COMMIT"]
    repo = Path(evaluator.__file__).resolve().parents[1]
    if not (repo / ".git").exists():
        return None
    git = ["git", "-C", str(repo)]
    try:
        head = subprocess.run(
            [*git, "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5, check=True
        )
        status = [*git, "status", "--porcelain", "--untracked-files=no"]
        dirty = subprocess.run(status, capture_output=True, text=True, timeout=5).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    out = head.stdout.strip()
    return f"{out}-dirty" if dirty else out


def environment_info(containers: Mapping[str, str] | None = None) -> Environment:
    """The evaluator, Python, key packages, the container variables (a launch contract's over the env's)."""
    given = {**os.environ, **(containers or {})}
    packages: dict[str, str | None] = {}
    for name in KEY_PACKAGES:
        try:
            packages[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            packages[name] = None
    return {
        "evaluator_version": evaluator.__version__,
        "git_commit": git_commit(),
        "python": platform.python_version(),
        "platform": f"{platform.system()}-{platform.machine()}",
        "packages": packages,
        "containers": {k: given[k] for k in CONTAINER_ENV if given.get(k)},
    }


def server_info(base_url: str, api_key: str | None, timeout_s: float = 10.0) -> JSONObject:
    """What the endpoint says about itself (/v1/models, vLLM's /version), through the boundary (a server may
    echo the key); a failure, a slow (past `timeout_s`) or oversized answer, is recorded as an error."""
    keys = Redactor(api_key)
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    info: JSONObject = {}
    base, query = split_query(base_url)
    asks = (
        ("models", f"{base}/models", MAX_MODELS_BYTES),
        ("version", f"{server_root(base_url)}/version", MAX_SMALL_BYTES),
    )
    for key, url, cap in asks:
        # each answer within its deadline and cap: a dripping or endless one is recorded as an error
        with BoundedGets(timeout_s, cap, headers) as http:
            try:
                resp = http.get(url, params=query if key == "models" else None)
                if resp.status_code != 200:
                    info[key] = {"error": f"HTTP {resp.status_code}"}
                    continue
                data = parse_json(resp.content, keys)
                info[key] = _model_ids(data, keys) if key == "models" else _version(data, keys)
                if key == "models" and (roots := _model_roots(data, keys)):
                    info["roots"] = roots
            except Exception as exc:  # noqa: BLE001 - whatever a server does, provenance records it and goes on
                info[key] = {"error": type(exc).__name__}
    return info


def _model_ids(data: Any, keys: Redactor) -> list[str | None]:
    """The ids of a /v1/models list, each a redacted string (other JSON as its text)."""
    entries = data.get("data", []) if isinstance(data, dict) else []
    ids = [safe_string(m.get("id"), "model id", keys)[0] for m in entries if isinstance(m, dict)]
    return ids[:1000]


def _model_roots(data: Any, keys: Redactor) -> dict[str, str]:
    """What each served name is a name for (vLLM's `root`), where it differs from the name."""
    entries = data.get("data", []) if isinstance(data, dict) else []
    roots = {}
    for m in entries[:1000]:
        if isinstance(m, dict) and isinstance(m.get("root"), str) and m.get("root") != m.get("id"):
            model_id = safe_string(m.get("id"), "model id", keys)[0]
            if model_id is not None:
                roots[model_id] = safe_string(m["root"], "model root", keys)[0] or ""
    return roots


def _version(data: Any, keys: Redactor) -> Any:
    """/version as redacted JSON; a large or deeply nested answer is kept as its clipped JSON text."""
    text = json_text(data, keys, 4000)
    if text is None or len(text) >= 4000:
        return {"text": text}
    try:
        return keys.json(data)
    except RecursionError:
        return {"text": text}
