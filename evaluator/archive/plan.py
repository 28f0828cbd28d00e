"""What an archive tells a reader to run: REPRODUCE.md and the `doccount evaluate` arguments that repeat
the archived run's settings."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import PurePosixPath
from typing import Any

from evaluator.archive.base import TOP_SUFFIX, ArchiveError
from evaluator.core.boundary import clip
from evaluator.evaluation.options import evaluate_params
from evaluator.evaluation.recorded import recorded_args
from evaluator.request.shape import shape_flags
from evaluator.runfolder.runconfig import RunConfig
from evaluator.runfolder.serving import is_repo_id

# vLLM flags that compose.yaml sets from make variables (the rest go through VLLM_EXTRA_ARGS).
PARALLEL_VARS = {
    "--tensor-parallel-size": "TENSOR_PARALLEL_SIZE",
    "--pipeline-parallel-size": "PIPELINE_PARALLEL_SIZE",
    "--data-parallel-size": "DATA_PARALLEL_SIZE",
}
REVISION_FLAGS = ("--revision", "--tokenizer-revision")  # the launcher adds them from MODEL_REVISION
# What a serving value read from an archive may be before it goes into a printed `make` line (a crafted
# archive could hold Make or shell syntax): a hub repository id or a plain absolute folder, a revision as
# scripts/serve_vllm.sh accepts it, a served name of the same characters, parallel sizes as numbers.
SERVING_VALUES = {
    "model": re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9][A-Za-z0-9._-]*)?|(/[A-Za-z0-9._-]+)+"),
    "revision": re.compile(r"[A-Za-z0-9][A-Za-z0-9._/-]{0,199}"),
    "served name": re.compile(r"[A-Za-z0-9][A-Za-z0-9._/:-]{0,199}"),
    "parallel size": re.compile(r"[0-9]{1,4}"),
}


def data_args_for(config: dict[str, Any], data_files: str | None = None) -> list[str]:
    data = config.get("data") or {}
    if data_files:
        return ["--data-files", data_files]
    if data.get("source") == "hub":
        args = ["--dataset", str(data.get("dataset"))]
        if data.get("revision"):
            args += ["--revision", str(data["revision"])]
        return args
    pattern = str(data.get("pattern") or "data/test-*.parquet")
    return ["--data-files", f"data/{PurePosixPath(pattern).name}"]


def _typed(config: RunConfig | dict[str, Any]) -> RunConfig:
    """The run configuration as a RunConfig: the one an archive was opened with, or a dict decoded now."""
    return config if isinstance(config, RunConfig) else RunConfig.from_dict(config)


def evaluate_args(
    config: RunConfig | dict[str, Any],
    data_args: list[str],
    base_urls: list[str],
    run_root: str,
    concurrency: int | None = None,
) -> list[str]:
    """The `doccount evaluate` arguments that repeat the archived run's settings."""
    c = _typed(config)
    args = ["--backend", c.backend or "api", "--model", c.model]
    for url in base_urls:
        args += ["--base-url", url]
    args += ["--benchmark", c.benchmark, *data_args, "--run-root", run_root]
    args += shape_flags(c.sampling, with_preset=c.preset is not None)
    if c.sampling.get("extra_body"):
        args += [
            "--extra-body-json",
            json.dumps(c.sampling["extra_body"], sort_keys=True, separators=(",", ":")),
        ]
    try:  # every option declared Recorded, read back (evaluation.recorded)
        args += recorded_args(c.to_dict(), evaluate_params(), {"concurrency": concurrency})
    except ValueError as exc:
        raise ArchiveError(f"{exc}; repeat the run by hand with the recorded settings") from None
    return args + _limit_args(c.data)


def _limit_args(data: dict[str, Any]) -> list[str]:
    """--limit N when the folder's question set is the first N of the data (it is always a prefix)."""
    selected = (data.get("selection") or {}).get("questions")
    if isinstance(selected, int) and isinstance(data.get("questions"), int) and selected < data["questions"]:
        return ["--limit", str(selected)]
    return []


def format_command(words: list[str]) -> str:
    return " ".join(shlex.quote(w) for w in words)


def make_command(words: list[str]) -> str:
    """A `make` line for a shell: each word's `$` doubled (Make expands `$(...)` in a command-line
    variable, even under `make -n`), then shell-quoted."""
    return format_command([w.replace("$", "$$") for w in words])


def _checked(what: str, value: str) -> str:
    if not SERVING_VALUES[what].fullmatch(value) or ".." in value.split("/"):
        raise ArchiveError(
            f"run_config.json `serving` holds a {what} {clip(repr(value), 80)} that is not one (letters, digits "
            "and ._-/ only); refusing to print a make line for it"
        )
    return value


def serve_commands(config: RunConfig | dict[str, Any]) -> list[str]:
    """The make lines that put the recorded weights into the HF cache and serve them as the run was served
    (compose.yaml's vllm service): the commit, the served name and the recorded server arguments. Empty
    when the run records no self-hosted model."""
    c = _typed(config)
    s = c.serving
    if s is None or not s.model:
        return []
    model = _checked("model", s.model)
    recorded_pin = s.commit or s.revision
    pin = _checked("revision", recorded_pin) if recorded_pin else None
    words = ["make", "serve", f"MODEL={model}"] + ([f"MODEL_REVISION={pin}"] if pin else [])
    if c.model != s.model:
        words.append(f"SERVED_MODEL_NAME={_checked('served name', c.model)}")
    rest: list[str] = []
    args = iter(s.args)
    for arg in args:
        flag, eq, value = arg.partition("=")
        if flag in PARALLEL_VARS or flag in REVISION_FLAGS:
            value = value if eq else next(args, "")
            if flag in PARALLEL_VARS:
                words.append(f"{PARALLEL_VARS[flag]}={_checked('parallel size', value)}")
            continue
        rest.append(arg)
    if rest:
        words.append("VLLM_EXTRA_ARGS=" + shlex.join(rest))
    fetch = ["make", "model", f"MODEL={model}"] + ([f"MODEL_REVISION={pin}"] if pin else [])
    return ([make_command(fetch)] if is_repo_id(model) else []) + [make_command(words)]


def reproduce_md(
    config: dict[str, Any],
    run_name: str,
    summary: dict[str, Any],
    missing: dict[str, str],
    typed: RunConfig | None = None,
) -> str:
    """REPRODUCE.md: the exact commands to verify the archive and re-run its evaluation."""
    primary = summary.get("primary") or {}
    lines = [
        f"# Reproducing run `{run_name}`",
        "",
        f"Benchmark `{config.get('benchmark')}`, model `{config.get('model')}` (backend `{config.get('backend')}`), "
        f"{primary.get('questions')} questions, exact-count accuracy {primary.get('correct')} / "
        f"{primary.get('questions')}. `ARCHIVE.tar.gz` below stands for this archive's file name; `URL` for "
        f"an OpenAI-compatible endpoint serving the same model (recorded: `{config.get('endpoint')}`). "
        "If the endpoint needs a key, export `MODEL_API_KEY` (it is never written to any file).",
        "",
    ]
    lines += _md_verify(run_name) + _md_inputs(config, missing)
    lines += _md_rerun(config, typed if typed is not None else RunConfig.from_dict(config), run_name)
    return "\n".join(lines)


def _md_verify(run_name: str) -> list[str]:
    top = f"{run_name}{TOP_SUFFIX}"
    return [
        "## 1. Verify (offline)",
        "",
        "```sh",
        "doccount verify ARCHIVE.tar.gz",
        "```",
        "",
        "It checks every checksum, the prompt / lock / container file hashes recorded in run_config.json, "
        "and re-scores the archived records. By hand:",
        "",
        "```sh",
        f"tar xzf ARCHIVE.tar.gz && cd {shlex.quote(top)} && sha256sum -c SHA256SUMS",
        f"doccount score --run-root {shlex.quote(f'runs/{run_name}')}   # rewrites identical scores/summary.json",
        "```",
        "",
    ]


def _md_inputs(config: dict[str, Any], missing: dict[str, str]) -> list[str]:
    data = config.get("data") or {}
    env = config.get("environment") or {}
    lines = [
        "## 2. Same evaluator, same data",
        "",
        f"- Evaluator {env.get('evaluator_version')}, git commit `{env.get('git_commit')}`, Python "
        f"{env.get('python')}; Python packages pinned in `requirements.lock`; versions in `environment.json`.",
    ]
    images = {k: v for k, v in (env.get("containers") or {}).items() if k.startswith("DOCCOUNT_IMAGE_")}
    if images:
        lines.append(
            "- Container images: " + ", ".join(f"{k} `{v}`" for k, v in sorted(images.items())) + "."
        )
    if data.get("source") == "hub":
        lines.append(
            f"- Data: Hugging Face dataset `{data.get('dataset')}` at revision `{data.get('revision')}` "
            "(downloaded automatically)."
        )
    else:
        lines.append("- Data: local parquet files with exactly these SHA-256s (put them in `data/`):")
        lines += [f"  - `{f.get('name')}` `{f.get('sha256')}`" for f in data.get("files") or []]
    lines.append(
        f"- Question set: {data.get('questions')} questions, manifest SHA-256 `{data.get('manifest_sha256')}`; "
        "sample ids and image SHA-256s in `dataset.json`."
    )
    if missing:
        lines.append(
            "- Not archived (absent when the archive was made): "
            + ", ".join(f"`{m}`" for m in sorted(missing))
            + "."
        )
    return lines


def _md_rerun(config: dict[str, Any], typed: RunConfig, run_name: str) -> list[str]:
    new_root = f"runs/{run_name}-reproduce"
    data_args = data_args_for(config)
    eval_cmd = format_command(["doccount", "evaluate", *evaluate_args(typed, data_args, ["URL"], new_root)])
    repro = ["doccount", "reproduce", "ARCHIVE.tar.gz", "--base-url", "URL"]
    if (config.get("data") or {}).get("source") != "hub":
        repro += data_args
    try:
        serve = serve_commands(typed)
    except ArchiveError:  # a serving value no make line can carry: the recorded values are in run_config.json
        serve = []
    return [
        "",
        "## 3. Re-run and compare",
        "",
        *(
            [
                "Serve the same weights first (on a GPU host with this bundle; the run recorded them in "
                "run_config.json `serving`), then use `--base-url http://127.0.0.1:8000/v1`:",
                "",
                "```sh",
                *serve,
                "```",
                "",
            ]
            if serve
            else []
        ),
        "```sh",
        format_command(repro),
        "```",
        "",
        "This verifies the archive, checks the data against `dataset.json`, uses the archived prompt files, "
        f"evaluates into `{new_root}`, scores it and prints the paired comparison with the original "
        "(exact McNemar p). The same by hand, from the extracted folder:",
        "",
        "```sh",
        'export DOCCOUNT_PROMPTS_DIR="$PWD/prompts"',
        eval_cmd,
        f"doccount score --run-root {shlex.quote(new_root)}",
        "```",
        "",
    ]
