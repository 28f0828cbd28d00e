"""An option value as evaluate's command-line words, and the options run_config.json records: declared
`Recorded` where the option is (evaluation.options), written by `recorded_settings` and read back as
words by `recorded_args` (reproduce, REPRODUCE.md); a sweep-file value becomes words by `option_args`."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any, Literal

import click
import msgspec

from evaluator.core.boundary import clip
from evaluator.core.jsonl import JSONObject


class Recorded(click.Option):
    """An evaluate option that run_config.json records, declared with the option: `record` is where (a
    RunConfig field, `request_policy.KEY`, `preset.name`), `omit` the values not written, `invert` a flag
    recorded as its opposite (--no-smoke-check: smoke_check false). `reproduce` is when a reproduction
    repeats it: `always` (how requests were sent, spelled out), `changed` (a value other than the
    default) or None (the reproducer's own choice: pacing, the spend guard). recorded_settings writes
    them, recorded_args reads them back as flags; adding one touches no other module."""

    def __init__(
        self,
        *decls: Any,
        record: str,
        omit: tuple[Any, ...] = (None,),
        invert: bool = False,
        reproduce: Literal["always", "changed"] | None = "changed",
        **attrs: Any,
    ) -> None:
        super().__init__(*decls, **attrs)
        self.record, self.omit, self.invert, self.reproduce = record, omit, invert, reproduce


class OptionSpec(msgspec.Struct, frozen=True):
    """One evaluate option: its key (the parameter's name), its long flag, and how a value becomes argv."""

    key: str
    flag: str
    is_flag: bool
    multiple: bool
    check: Callable[[str], Any] | None = None  # raises ValueError (click.BadParameter) on a bad value


def option_specs(params: Iterable[Any]) -> dict[str, OptionSpec]:
    """The keys of a click command's options (e.g. evaluate's params): `--max-tokens` -> max_tokens."""
    specs: dict[str, OptionSpec] = {}
    for p in params:
        longs = [o for o in getattr(p, "opts", []) if o.startswith("--")]
        if getattr(p, "param_type_name", "") != "option" or not longs:
            continue
        flag = longs[0]
        key = flag[2:].replace("-", "_")
        specs[key] = OptionSpec(key, flag, bool(p.is_flag), bool(p.multiple), _checker(p))
    return specs


def _checker(param: Any) -> Callable[[str], Any]:
    def check(value: str) -> Any:
        try:
            return param.type.convert(value, param, None)
        except Exception as exc:  # click.BadParameter: a UsageError, not a ValueError
            raise ValueError(getattr(exc, "message", None) or str(exc)) from None

    return check


def option_args(spec: OptionSpec, value: Any) -> list[str]:
    """The evaluate arguments of one option value, checked by the option's click type (else ValueError)."""
    if spec.is_flag:
        if not isinstance(value, bool):
            raise ValueError("must be true or false")
        return [spec.flag] if value else []
    values = value if isinstance(value, list) and spec.multiple else [value]
    out: list[str] = []
    for v in values:
        if isinstance(v, bool) or not isinstance(v, (str, int, float)):
            raise ValueError(
                "must be a string or a number" + (" (or a list of them)" if spec.multiple else "")
            )
        text = v if isinstance(v, str) else repr(v)
        if spec.check is not None:
            spec.check(text)
        out += [spec.flag, text]
    return out


def recorded_settings(opts: object, params: Iterable[click.Parameter]) -> JSONObject:
    """What run_config.json records of the options (`opts`: their values by name, an EvaluateOptions)
    declared Recorded among `params`, nested as written there (fields, and `request_policy` keys)."""
    out: JSONObject = {}
    for p in _recorded(params):
        value = getattr(opts, str(p.name))
        value = not value if p.invert else value
        if value in p.omit:
            continue
        *parents, last = p.record.split(".")
        table = out
        for part in parents:
            table = table.setdefault(part, {})
        table[last] = list(value) if isinstance(value, tuple) else value
    return out


def recorded_args(
    config: JSONObject, params: Iterable[click.Parameter], given: Mapping[str, Any] | None = None
) -> list[str]:
    """The evaluate arguments that repeat the options declared Recorded among `params` from a
    run_config.json object (`given`: values by option name that replace the recorded ones, e.g. another
    concurrency); ValueError names a recorded value the option refuses."""
    args: list[str] = []
    for p in _recorded(params):
        name = str(p.name)
        value = (given or {}).get(name)
        if value is None:
            value = _recorded_value(config, p.record)
        if p.reproduce is None or value is None or (p.reproduce == "changed" and value == p.default):
            continue
        value = (value is False) if p.invert else value
        (spec,) = option_specs([p]).values()
        try:
            args += option_args(spec, value)
        except ValueError as exc:
            shown = clip(repr(value), 80)
            raise ValueError(
                f"run_config.json `{p.record}` holds {shown}, which {spec.flag} refuses: {exc}"
            ) from None
    return args


def _recorded_value(config: JSONObject, path: str) -> Any:
    value: Any = config
    for part in path.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return value


def _recorded(params: Iterable[click.Parameter]) -> list[Recorded]:
    return [p for p in params if isinstance(p, Recorded)]
