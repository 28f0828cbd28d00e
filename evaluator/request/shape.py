"""The request shape chosen on the command line: `none` values, the output-limit field's name, presets.

Pure apart from reading the preset files shipped in evaluator/request/presets/. Nothing here looks at a model
name: a preset is applied only when the user names it, and the run records it.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass, field
from importlib import resources
from typing import Any, NotRequired, TypedDict

import click

from evaluator.core.errors import UserError
from evaluator.core.jsonl import JSONObject
from evaluator.core.records import MAX_TOKENS_FIELDS, Sampling
from evaluator.data.parsing import strip_token_problem

NONE = "none"  # the value that leaves a field out of every request
PRESET_FLAGS = ("temperature", "top_p", "max_tokens", "max_tokens_field")


class RequestShapeError(UserError):
    pass


def _finite(number: float) -> bool:
    return not isinstance(number, float) or math.isfinite(number)


class FiniteRange(click.FloatRange):
    """click's FloatRange without NaN and the infinities (NaN passes every range check, and is not JSON)."""

    def convert(self, value: Any, param: Any, ctx: Any) -> Any:
        number = super().convert(value, param, ctx)
        if not _finite(number):
            self.fail(f"{value!r} is not a finite number", param, ctx)
        return number


class NumberOrNone(click.ParamType):
    """A number in a range, or `none` (leave the field out of requests)."""

    def __init__(self, kind: type, low: float, high: float | None = None, low_open: bool = False) -> None:
        self.kind, self.low, self.high, self.low_open = kind, low, high, low_open
        self.name = f"{kind.__name__}|none"

    def convert(self, value: Any, param: Any, ctx: Any) -> Any:
        if value is None or value == NONE:
            return value
        if isinstance(value, str) and value.strip().lower() == NONE:
            return NONE
        try:
            number = self.kind(value)
        except (TypeError, ValueError):
            self.fail(f"{value!r} is not a valid {self.kind.__name__} or 'none'", param, ctx)
        if not _finite(number):  # NaN passes every range check below, and is not JSON
            self.fail(f"{value!r} is not a finite number: give one in range, or 'none'", param, ctx)
        too_low = number <= self.low if self.low_open else number < self.low
        if too_low or (self.high is not None and number > self.high):
            bound = f"{'>' if self.low_open else '>='} {self.low}" + (
                f" and <= {self.high}" if self.high is not None else ""
            )
            self.fail(f"{value!r} is out of range: it must be {bound}, or 'none'", param, ctx)
        return number


class StripToken(click.ParamType):
    """A --strip-token value: refused when removing it could change a count (data.parsing)."""

    name = "token"

    def convert(self, value: Any, param: Any, ctx: Any) -> Any:
        problem = strip_token_problem(str(value))
        if problem is not None:
            self.fail(
                f"{problem}; strip only the markers around the answer (e.g. '<|end_of_box|>')", param, ctx
            )
        return str(value)


class PresetFlags(TypedDict, total=False):
    """A shipped preset's flags (PRESET_FLAGS): a value, or 'none' to leave the field out."""

    temperature: float | str
    top_p: float | str
    max_tokens: int | str
    max_tokens_field: str


class PresetRecord(TypedDict):
    """run_config.json `preset`: which preset shaped the requests, by name and file hash; and, only when
    false, whether its provider can show reasoning at all."""

    name: str
    sha256: str
    flags: PresetFlags
    reasoning_observable: NotRequired[bool]


@dataclass(frozen=True)
class Preset:
    name: str
    sha256: str  # of the preset file's bytes
    flags: PresetFlags = field(default_factory=lambda: PresetFlags())
    # False: the provider returns no reasoning text and no reasoning tokens (a run declared on through it
    # is never stopped for want of a signal; its summary says the mode cannot be observed)
    reasoning_observable: bool = True

    def record(self) -> PresetRecord:
        out: PresetRecord = {"name": self.name, "sha256": self.sha256, "flags": self.flags.copy()}
        if not self.reasoning_observable:
            out["reasoning_observable"] = False
        return out


def preset_names() -> list[str]:
    folder = resources.files("evaluator.request") / "presets"
    return sorted(p.name[: -len(".json")] for p in folder.iterdir() if p.name.endswith(".json"))


def load_preset(name: str) -> Preset:
    names = preset_names()
    if name not in names:
        raise RequestShapeError(
            f"--preset {name!r} is not a shipped preset; choose one of: {', '.join(names)}"
        )
    raw = (resources.files("evaluator.request") / "presets" / f"{name}.json").read_bytes()
    data = json.loads(raw)
    flags: PresetFlags = data.get("flags") or PresetFlags()  # checked against PRESET_FLAGS below
    unknown = sorted(set(flags) - set(PRESET_FLAGS))
    if unknown:
        raise RequestShapeError(
            f"preset {name} sets {', '.join(unknown)}; a preset may set only {PRESET_FLAGS}"
        )
    observable = data.get("reasoning_observable", True)
    if not isinstance(observable, bool):
        raise RequestShapeError(f"preset {name}: reasoning_observable is true or false, not {observable!r}")
    # "description" is for people reading the file
    return Preset(name, hashlib.sha256(raw).hexdigest(), flags, observable)


def resolve_sampling(
    default: Sampling,
    extra_body: JSONObject,
    *,
    temperature: Any = None,
    top_p: Any = None,
    max_tokens: Any = None,
    max_tokens_field: str | None = None,
    preset: Preset | None = None,
) -> Sampling:
    """Explicit flags win over the preset, the preset over the benchmark's defaults; `none` becomes None."""
    given = {"temperature": temperature, "top_p": top_p, "max_tokens": max_tokens}
    given["max_tokens_field"] = max_tokens_field
    chosen: dict[str, Any] = {}
    for key in PRESET_FLAGS:
        value = given[key]
        if value is None and preset is not None:
            value = preset.flags.get(key)
        chosen[key] = getattr(default, key) if value is None else value
    if chosen["max_tokens_field"] not in MAX_TOKENS_FIELDS:
        raise RequestShapeError(
            f"max_tokens_field {chosen['max_tokens_field']!r} is not one of {', '.join(MAX_TOKENS_FIELDS)}"
        )
    return Sampling(
        temperature=_number(chosen["temperature"], float),
        top_p=_number(chosen["top_p"], float),
        max_tokens=_number(chosen["max_tokens"], int),
        extra_body=extra_body,
        max_tokens_field=chosen["max_tokens_field"],
    )


def _number(value: Any, kind: type) -> Any:
    return None if value is None or value == NONE else kind(value)


def shape_flags(sampling: dict[str, Any], with_preset: bool = False) -> list[str]:
    """The evaluate flags that reproduce a recorded sampling dict (run_config.json `sampling`). With a
    preset every field is spelled out, the default field name too: the preset's own would win over it."""
    args: list[str] = []
    for flag, key in (("--temperature", "temperature"), ("--top-p", "top_p"), ("--max-tokens", "max_tokens")):
        if key in sampling:
            args += [flag, NONE if sampling[key] is None else repr(sampling[key])]
    if with_preset or sampling.get("max_tokens_field", "max_tokens") != "max_tokens":
        args += ["--max-tokens-field", str(sampling.get("max_tokens_field", "max_tokens"))]
    return args
