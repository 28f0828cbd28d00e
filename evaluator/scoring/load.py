"""Reading a run folder's run_config.json and manifest.jsonl, and checking that they belong together."""

from __future__ import annotations

from pathlib import Path

from evaluator.core.jsonl import object_at
from evaluator.data.benchmarks import REGISTRY
from evaluator.data.benchmarks.base import ManifestEntry
from evaluator.data.parquet import manifest_digest
from evaluator.runfolder.files import CONFIG, MANIFEST, read_json
from evaluator.runfolder.manifest import ManifestError, load_manifest
from evaluator.runfolder.runconfig import RunConfig, RunConfigError
from evaluator.scoring.base import ScoreError
from evaluator.scoring.summary_shape import ManifestCheck


def load_config(run_root: Path) -> RunConfig:
    """run_config.json, typed (wrong field types refused in one line; absent newer fields take their defaults)."""
    if not run_root.exists():
        raise ScoreError(
            f"run folder {run_root} does not exist; pass the folder that evaluate wrote (runs/<name>)"
        )
    if not run_root.is_dir():
        raise ScoreError(
            f"{run_root} is a file, not a run folder; pass the folder that evaluate wrote (runs/<name>)"
        )
    path = run_root / CONFIG
    if not path.exists():
        raise ScoreError(f"{run_root} has no {CONFIG}; is it a run folder written by doccount-evaluate?")
    try:
        config = read_json(path)
    except (OSError, ValueError) as exc:
        raise ScoreError(f"{path} cannot be read as JSON ({exc}); the run folder is damaged") from None
    if not isinstance(config, dict):
        raise ScoreError(f"{path} is not a JSON object; the run folder is damaged")
    try:
        typed = RunConfig.from_dict(config)
    except RunConfigError as exc:
        raise ScoreError(f"{path}: {exc}; the run folder is damaged") from None
    if typed.benchmark not in REGISTRY:
        raise ScoreError(
            f"{path} names benchmark {typed.benchmark!r}; expected one of {', '.join(sorted(REGISTRY))}"
        )
    return typed


def load_run_manifest(run_root: Path, lenient: set[str] | None = None) -> list[ManifestEntry]:
    """runfolder.manifest.load_manifest, its refusal as a ScoreError (same text)."""
    try:
        return load_manifest(run_root, lenient)
    except ManifestError as exc:
        raise ScoreError(str(exc)) from None


def check_manifest_digest(
    config: RunConfig, manifest: list[ManifestEntry], warnings: list[str]
) -> ManifestCheck:
    data = config.data
    selection = object_at(data, "selection")
    expected = selection.get("manifest_sha256")
    actual = manifest_digest(manifest)
    if not expected:
        warnings.append(
            f"{CONFIG} records no data.selection.manifest_sha256, so {MANIFEST} could not be verified against it"
        )
        verified = False
    elif expected != actual:
        raise ScoreError(
            f"{MANIFEST} (SHA-256 {actual[:12]}..., {len(manifest)} questions) does not match the question set "
            f"recorded in {CONFIG} (SHA-256 {str(expected)[:12]}..., {selection.get('questions')} questions): "
            "one of them was replaced or an evaluate run was cut short between writing them. Re-run "
            "doccount-evaluate with the options in run_config.json to rewrite both"
        )
    else:
        verified = True
    return {"manifest_sha256": actual, "manifest_verified": verified}
