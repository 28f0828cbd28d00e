"""The sweep file's serving parts, read and checked: the `[serve]` table (how the sweep starts servers)
and a run's `serve = { revision, gpus, args }` and `served_model_name` (docs/serving.md).

[serve]: `executor` (local, slurm), `gpus` (the local pool: a list of GPU ids; default every GPU
nvidia-smi lists), `command` (the server program as a list; default ["vllm", "serve"]) or
`launcher = "container"` with `image` and `runtime` (docker or podman; default docker when it is on
PATH, else podman); for slurm also `partition`, `account`, `qos`, `constraint`,
`reservation`, `time`, `gpus_per_node`, `cpus_per_gpu`, `mem_per_gpu`, `setup` (their meaning is the
Slurm executor's, evaluator/study/executors/slurm.py). Any other key is an error naming the line.
"""

from __future__ import annotations

from typing import Any, Protocol

import msgspec

from evaluator.core.vocab import EXECUTORS, LAUNCHERS, ExecutorName, Launcher
from evaluator.study.launch import DEFAULT_COMMAND, DEFAULT_IMAGE
from evaluator.study.secrets import secret_problem
from evaluator.study.slurm_settings import SlurmSettings


class _Where(Protocol):
    """Where a key is in the file (sweep_file's): an error naming the file and line."""

    def fail(self, table: tuple[str, ...], key: str | None, message: str, index: int = 0) -> Exception: ...


SERVE_KEYS = ("executor", "gpus", "command", "launcher", "image", "runtime")
SLURM_KEYS = (
    "partition",
    "account",
    "qos",
    "constraint",
    "reservation",
    "time",
    "gpus_per_node",
    "cpus_per_gpu",
    "mem_per_gpu",
    "setup",
)
RUN_SERVE_KEYS = ("revision", "gpus", "args")


class ServeTable(msgspec.Struct, frozen=True, kw_only=True):
    """[serve], checked. `gpus` None: every GPU nvidia-smi lists (asked only when a run is served)."""

    executor: ExecutorName = "local"
    gpus: list[str] | None = None
    command: list[str] = msgspec.field(default_factory=lambda: list(DEFAULT_COMMAND))
    launcher: Launcher = "process"
    image: str = DEFAULT_IMAGE
    runtime: str | None = None
    """The container program (docker, podman or a path to one); None: docker when it is on PATH, else podman."""
    slurm: SlurmSettings = msgspec.field(default_factory=SlurmSettings)
    """The Slurm executor's settings (their defaults when executor is local: none may be given then)."""


class RunServe(msgspec.Struct, frozen=True, kw_only=True):
    """A run's `serve = { revision, gpus, args }` and its served name."""

    served_name: str
    revision: str | None = None
    gpus: int = 1
    args: list[str] = msgspec.field(default_factory=list)


def _strings(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


def _positive_int(value: Any, zero: bool = False) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= (0 if zero else 1)


def serve_table(where: _Where, data: dict[str, Any]) -> ServeTable:
    """The top-level [serve] table (absent: the defaults)."""
    table = data.get("serve", {})
    here = ("serve",)
    if not isinstance(table, dict):
        raise where.fail((), "serve", "`serve` must be a table ([serve])")
    allowed = SERVE_KEYS + SLURM_KEYS
    for key, value in table.items():
        if key not in allowed:
            raise where.fail(here, key, f"unknown key `{key}` in [serve]; allowed: {', '.join(allowed)}")
        problem = secret_problem(key, value)
        if problem:
            raise where.fail(here, key, f"{problem}; a sweep file never holds a secret")
    _check_serve_values(where, table)
    slurm = {k: v for k, v in table.items() if k in SLURM_KEYS}
    if slurm and table.get("executor", "local") != "slurm":
        raise where.fail(
            here, next(iter(slurm)), f'`{next(iter(slurm))}` is a Slurm setting: set executor = "slurm"'
        )
    return ServeTable(
        executor=table.get("executor", "local"),
        gpus=[str(g) for g in table["gpus"]] if "gpus" in table else None,
        command=list(table.get("command", DEFAULT_COMMAND)),
        launcher=table.get("launcher", "process"),
        image=table.get("image", DEFAULT_IMAGE),
        runtime=table.get("runtime"),
        slurm=msgspec.convert(slurm, SlurmSettings),  # each value's type is checked above
    )


def _check_serve_values(where: _Where, table: dict[str, Any]) -> None:
    here = ("serve",)
    checks = {
        "executor": (lambda v: v in EXECUTORS, f"one of {', '.join(EXECUTORS)}"),
        "gpus": (
            lambda v: isinstance(v, list) and all(_positive_int(g, zero=True) or (isinstance(g, str) and g.strip()) for g in v) and len(set(map(str, v))) == len(v),
            "a list of distinct GPU ids, e.g. [0, 1, 2, 3]",
        ),
        "command": (lambda v: _strings(v) and len(v) > 0, 'a non-empty list of strings, e.g. ["vllm", "serve"]'),
        "launcher": (lambda v: v in LAUNCHERS, f"one of {', '.join(LAUNCHERS)}"),
        "image": (lambda v: isinstance(v, str) and v.strip(), "an image name"),
        "runtime": (lambda v: isinstance(v, str) and v.strip(), 'a container program, e.g. "podman"'),
        "partition": (lambda v: isinstance(v, str), "a string"),
        "account": (lambda v: isinstance(v, str), "a string"),
        "qos": (lambda v: isinstance(v, str), "a string"),
        "constraint": (lambda v: isinstance(v, str), 'a Slurm feature expression, e.g. "a100|h100"'),
        "reservation": (lambda v: isinstance(v, str), "a string"),
        "time": (lambda v: isinstance(v, str), 'a Slurm time limit string, e.g. "04:00:00"'),
        "gpus_per_node": (_positive_int, "an integer >= 1"),
        "cpus_per_gpu": (_positive_int, "an integer >= 1"),
        "mem_per_gpu": (lambda v: isinstance(v, str) or _positive_int(v), 'a Slurm memory size, e.g. "64G"'),
        "setup": (_strings, "a list of shell lines"),
    }  # fmt: skip
    for key, value in table.items():
        ok, what = checks[key]
        if not ok(value):
            raise where.fail(here, key, f"[serve] `{key}` must be {what}")
    if "command" in table and table.get("launcher") == "container":
        raise where.fail(
            here, "command", '[serve] has `command` and launcher = "container": give one of them'
        )
    for key in ("image", "runtime"):
        if key in table and table.get("launcher") != "container":
            raise where.fail(here, key, f'[serve] `{key}` needs launcher = "container"')


def run_serve(where: _Where, i: int, name: str, table: dict[str, Any]) -> RunServe | None:
    """A run's serve section (None: the run has an endpoint); removed from `table` by the caller."""
    here = ("runs",)
    served = table.get("served_model_name")
    if "serve" not in table:
        if served is not None:
            raise where.fail(
                here, "served_model_name", f"run {name}: `served_model_name` needs `serve = {{...}}`", i
            )
        return None
    serve = table["serve"]
    if not isinstance(serve, dict):
        raise where.fail(
            here, "serve", f"run {name}: `serve` must be a table: serve = {{ revision, gpus, args }}", i
        )
    if "base_url" in table:
        raise where.fail(
            here, "base_url", f"run {name} has `serve` and `base_url`: a served run's URL is its server's", i
        )
    for key, value in serve.items():
        if key not in RUN_SERVE_KEYS:
            raise where.fail(
                here,
                "serve",
                f"run {name}: unknown key `{key}` in serve; allowed: {', '.join(RUN_SERVE_KEYS)}",
                i,
            )
        problem = secret_problem(key, value, ("args",))
        if problem:
            raise where.fail(here, "serve", f"run {name}: {problem}; a sweep file never holds a secret", i)
    _check_run_serve(where, i, name, serve, served)
    return RunServe(
        served_name=served if served is not None else table["model"],
        revision=serve.get("revision"),
        gpus=serve.get("gpus", 1),
        args=list(serve.get("args", [])),
    )


def _check_run_serve(where: _Where, i: int, name: str, serve: dict[str, Any], served: Any) -> None:
    here = ("runs",)
    if "revision" in serve and (not isinstance(serve["revision"], str) or not serve["revision"].strip()):
        raise where.fail(here, "serve", f"run {name}: serve.revision must be a branch, tag or commit", i)
    if "gpus" in serve and not _positive_int(serve["gpus"], zero=True):
        raise where.fail(
            here, "serve", f"run {name}: serve.gpus must be an integer >= 0 (GPUs of its server)", i
        )
    if "args" in serve and not _strings(serve["args"]):
        raise where.fail(
            here,
            "serve",
            f'run {name}: serve.args must be a list of strings, e.g. ["--max-model-len", "32768"]',
            i,
        )
    if served is not None and (not isinstance(served, str) or not served.strip()):
        raise where.fail(
            here, "served_model_name", f"run {name}: `served_model_name` must be a non-empty string", i
        )
