"""The evaluate options a sweep file may set: their specs, taken from evaluate's own click parameters, and
how one sweep-file value becomes evaluate arguments (checked by the option's own click type)."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Annotated, Any, Protocol

from msgspec import Meta

from evaluator.evaluation.recorded import OptionSpec, option_args
from evaluator.evaluation.recorded import option_specs as option_specs


class HasOptions(Protocol):
    """A run's evaluate options by sweep-file key (sweep_file.RunSpec)."""

    @property
    def options(self) -> Mapping[str, Any]: ...


ALIASES = {"extra_body": "extra_body_json"}  # a TOML table, sent as the JSON of --extra-body-json
# evaluate options the sweep decides itself: the folder, the output, and re-sending finished rows
SWEEP_OWNED = {
    "run_root": "the sweep puts each run in <run-root>/<sweep name>/<run name>",
    "run_name": "the run's folder is its `name`",
    "quiet": "the sweep shows one progress line per run",
    "dry_run": "run `doccount evaluate --dry-run` on the data instead",
    "overwrite": "a sweep never re-sends finished rows; give the run a new name to start it afresh",
}
Scalar = str | int | float


def sweep_option_args(spec: OptionSpec, value: Any, key: str) -> list[str]:
    """The evaluate arguments of one sweep-file value (a table, extra_body, as its JSON)."""
    if isinstance(value, dict):
        if key not in ALIASES:
            raise ValueError(f"a table is allowed only for {', '.join(ALIASES)}")
        value = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    return option_args(spec, value)


def run_args(run: HasOptions, specs: Mapping[str, OptionSpec], folder: Path) -> list[str]:
    """The whole `evaluate` argument list of a run, its folder given by the sweep."""
    args: list[str] = []
    for key, value in run.options.items():
        args += sweep_option_args(specs[ALIASES.get(key, key)], value, key)
    return args + ["--run-root", str(folder)]


def _option_type(key: str, spec: OptionSpec) -> Any:
    """An evaluate option's type in the file (its value is then checked by the option's click type)."""
    if spec.is_flag:
        return Annotated[bool, Meta(description="true or false")]
    if key in ALIASES:
        return Annotated[dict[str, Any] | str, Meta(description="a table")]
    if spec.multiple:
        return Annotated[Scalar | list[Scalar], Meta(description="a string or a number (or a list of them)")]
    return Annotated[Scalar, Meta(description="a string or a number")]


def option_types(specs: Mapping[str, OptionSpec]) -> dict[str, Any]:
    """Each key of a sweep file that is an evaluate option, and its type there."""
    keys = [*ALIASES, *(k for k in specs if k not in SWEEP_OWNED and k not in ALIASES.values())]
    return {k: _option_type(k, specs[ALIASES.get(k, k)]) for k in sorted(keys)}


def option_problems(
    data: dict[str, Any], specs: Mapping[str, OptionSpec], types: Mapping[str, Any]
) -> Iterator[tuple[list[Any], str]]:
    """Each option value in a sweep file (by its path) that evaluate's own click type refuses, and why."""
    tables: list[tuple[list[Any], dict[str, Any]]] = [([], data), (["defaults"], data.get("defaults", {}))]
    for at, table in tables + [(["runs", i], run) for i, run in enumerate(data.get("runs", []))]:
        for key, value in table.items():
            if key in types:
                try:
                    sweep_option_args(specs[ALIASES.get(key, key)], value, key)
                except ValueError as exc:
                    yield [*at, key], f"`{key}`: {exc}"
