"""The sweep file: a TOML study of many `evaluate` runs, declared as Structs and checked before anything
is sent. A run names its model, endpoint and key variable; its other keys are evaluate's options by their
long flag (`_` for `-`), typed from evaluate's own click parameters and checked by them. Refused, naming
the file and line: bad TOML, an unknown key (with the closest valid one), a value of the wrong type or
one evaluate refuses, a value that looks like a secret (never repeated), and an unset key variable.
A run's `published` result is declared here too (`published = { correct = 322, questions = 442, source =
"...", reasoning = "on", per_class = { "Table" = [44, 75] }, note = "..." }`), and the runs one
invocation starts: those --only names, each with its key variable set (`select_runs`, `check_key_variables`).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any

import msgspec
import tomllib
from msgspec import Meta

from evaluator.core.errors import UserError
from evaluator.core.jsonl import MAX_PRICE
from evaluator.core.vocab import ReasoningMode
from evaluator.study.schema_errors import LineIndex, Problem, problem, unknown_key
from evaluator.study.secrets import secret_places
from evaluator.study.serve_file import RunServe, ServeRequest, ServeTable, checked_serve, gpu_id, run_serve
from evaluator.study.sweep_options import SWEEP_OWNED, option_problems, option_types
from evaluator.study.sweep_options import OptionSpec as OptionSpec
from evaluator.study.sweep_options import option_specs as option_specs
from evaluator.study.sweep_options import run_args as run_args

NAME_RE = re.compile(r"^(?!(?:leaderboard|logs|sweep\.json)$)[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")
ENV_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
TOP_OPTIONS = ("benchmark", "data_files", "dataset", "revision")
RUN_ONLY = ("name", "api_key_env", "serve", "served_model_name", "published")  # not evaluate options
# a key goes only to the endpoint named beside it (a run's, or [defaults]' for the runs naming none)
KEY_WITH_URL = "a key goes only to the endpoint named beside it; add that `base_url` next to `api_key_env`"
FOLDER = "letters, digits, '.', '_' or '-' (it names a folder; not leaderboard, logs, sweep.json)"
Name = Annotated[str, Meta(pattern=NAME_RE.pattern, description=FOLDER)]
EnvName = Annotated[str, Meta(pattern=ENV_RE.pattern, description="a variable's name (letters, digits, _)")]
USD = f"a finite number from 0 to {MAX_PRICE:g} (USD per 1M tokens)"
PriceValue = Annotated[float, Meta(ge=0, le=MAX_PRICE, description=USD)]


class SweepFileError(UserError):
    """A sweep file that cannot be run (a user error: one line naming the file, the line and the fix)."""


class Price(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """USD per 1M tokens for one model id; cached_input defaults to input when not given."""

    input: PriceValue
    output: PriceValue
    cached_input: PriceValue | None = None
    batch_input: PriceValue | None = None  # a --batch run's prices; default half the online ones
    batch_output: PriceValue | None = None


# a run's `published` result: the number the run reproduces. `reasoning` is the mode the source ran in
# (a run in the other mode is not comparable); the leaderboard shows it beside the reproduced accuracy;
# it never reaches a request
Count = Annotated[int, Meta(ge=0)]
Text = Annotated[str, Meta(max_length=2000, description="a short text")]
PAIR = "[correct, questions] with 0 <= correct <= questions"
PER_CLASS = f'a table: {{ "<class>" = {PAIR}, ... }}'


class Published(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    correct: Annotated[Count, Meta(description="an integer from 0 to `questions`")]
    questions: Annotated[int, Meta(ge=1, description="an integer >= 1")]
    source: Text = ""
    reasoning: ReasoningMode | None = None
    per_class: Annotated[dict[str, tuple[Count, Count]], Meta(description=PER_CLASS)] = {}
    note: Text = ""


PUBLISHED_TYPE = Annotated[Published, Meta(description="a table: { correct = 3, questions = 4, ... }")]


def published_problem(pub: Published) -> str | None:
    """What a schema cannot say: each count of correct answers is at most its count of questions."""
    if pub.correct > pub.questions:
        return "needs integers `correct` and `questions` with 0 <= correct <= questions"
    for cls, (correct, questions) in pub.per_class.items():
        if not questions > 0 or correct > questions:
            return f'`per_class."{cls}"` must be {PAIR}'
    return None


class RunSpec(msgspec.Struct, frozen=True):
    name: str
    model: str
    api_key_env: str | None
    options: dict[str, Any]  # evaluate options by key (defaults merged), base_url and model included
    line: int | None  # of its name
    key_line: int | None  # of its api_key_env
    serve: RunServe | None = None  # a run the sweep serves itself (no base_url)
    published: dict[str, Any] | None = None  # the result it reproduces (shown on the leaderboard)


class SweepSpec(msgspec.Struct, frozen=True):
    name: str
    path: str
    sha256: str  # of the file's bytes, recorded in sweep.json
    runs: list[RunSpec]
    pricing: dict[str, Price]
    raw: bytes = b""  # the file's bytes (no key can be in them: load_sweep refuses one)
    serve: ServeTable = msgspec.field(default_factory=ServeTable)


def _schema(options: dict[str, Any]) -> Any:
    """The whole file as Structs: a run's and [defaults]' keys besides their own are evaluate's options."""
    kw: Any = {"forbid_unknown_fields": True, "frozen": True, "kw_only": True}
    opt = [(k, t | None, None) for k, t in options.items()]
    model = Annotated[str, Meta(pattern=r"\S", description='a model id: model = "..."')]
    served = Annotated[str, Meta(pattern=r"\S", description="a non-empty string")]
    run = msgspec.defstruct("Run", [
        ("name", Name), ("model", model), ("base_url", options["base_url"] | None, None),
        ("api_key_env", EnvName | None, None),
        ("serve", Annotated[ServeRequest, Meta(description="a table: serve = { revision, gpus, args }")] | None, None),
        ("served_model_name", served | None, None), ("published", PUBLISHED_TYPE | None, None),
        *(o for o in opt if o[0] not in ("model", "base_url")),
    ], **kw)  # fmt: skip
    defaults = msgspec.defstruct("Defaults", [("api_key_env", EnvName | None, None), *opt], **kw)
    return msgspec.defstruct("Sweep", [
        ("name", Name), *((k, options[k] | None, None) for k in TOP_OPTIONS),
        ("defaults", Annotated[defaults, Meta(description="a table ([defaults])")] | None, None),
        ("pricing", Annotated[dict[str, Price], Meta(description="a table of USD per 1M tokens by model id")], {}),
        ("serve", Annotated[ServeTable, Meta(description="a table ([serve])")], msgspec.field(default_factory=ServeTable)),
        ("runs", Annotated[list[run], Meta(min_length=1, description="at least one [[runs]] table")]),  # type: ignore[valid-type]
    ], **kw)  # fmt: skip


def load_sweep(path: Path, specs: Mapping[str, OptionSpec]) -> SweepSpec:
    """The sweep file read and checked (everything but the key variables: check_key_variables)."""
    try:
        raw = Path(path).read_bytes()
    except OSError as exc:
        raise SweepFileError(f"cannot read the sweep file {path}: {exc.strerror or exc}") from None
    try:
        data = tomllib.loads(text := raw.decode("utf-8"))
    except tomllib.TOMLDecodeError as exc:
        at = re.search(r"at line (\d+)", str(exc))
        raise SweepFileError(f"{path}:{at.group(1) + ':' if at else ''} not valid TOML: {exc}") from None
    fail = _Fail(path, LineIndex(text))
    for parts, found in secret_places(data, [], skip=["pricing"]):  # before a message could show it
        raise fail(parts, f'{found}; a sweep file names the variable that holds a key (api_key_env = "...")')
    options = option_types(specs)
    schema = _schema(options)
    try:
        doc = msgspec.convert(data, schema, dec_hook=gpu_id)
    except msgspec.ValidationError as exc:
        p = problem(exc, schema, data)
        raise fail([*p.path, str(p.key)] if p.kind == "unknown" else p.path, _message(p, data)) from None
    for parts, message in option_problems(data, specs, options):  # as evaluate's click types take them
        raise fail(parts, message)
    defaults = {k: v for k, v in data.get("defaults", {}).items() if k != "api_key_env"}
    if doc.defaults and doc.defaults.api_key_env and "base_url" not in defaults:
        raise fail(
            ["defaults", "api_key_env"], f"[defaults] names `api_key_env` but not `base_url`: {KEY_WITH_URL}"
        )
    inherited = {**{k: data[k] for k in TOP_OPTIONS if k in data}, **defaults}
    env = doc.defaults.api_key_env if doc.defaults else None
    runs = [_run(fail, i, run, data["runs"][i], inherited, env) for i, run in enumerate(doc.runs)]
    folded = [r.name.lower() for r in runs]  # one folder on a case-insensitive file system
    if (dup := next((i for i, n in enumerate(folded) if n in folded[:i]), 0)) > 0:
        raise fail(["runs", dup, "name"], f"two runs are named {runs[dup].name}: run names name folders")
    serve = checked_serve(doc.serve, data.get("serve", {}), lambda k, m: fail(["serve", k], m))
    return SweepSpec(doc.name, str(path), hashlib.sha256(raw).hexdigest(), runs, doc.pricing, raw, serve)


class _Fail:
    """An error naming the file and the line of a value by its path (runs, 1, serve)."""

    def __init__(self, path: Path, lines: LineIndex) -> None:
        self.path, self.lines = path, lines

    def __call__(self, parts: Sequence[str | int], message: str) -> SweepFileError:
        line = self.lines.line_of_path(parts)
        return SweepFileError(f"{self.path}:{line}: {message}" if line else f"{self.path}: {message}")


def _message(p: Problem, data: dict[str, Any]) -> str:
    """The one-line message of a schema error: the table or value, and what it must be."""
    if p.kind == "unknown" and p.key in SWEEP_OWNED and len(p.path) <= 2:
        return f"`{p.key}` is set by the sweep: {SWEEP_OWNED[p.key]}"
    if p.kind == "unknown" and p.path[:1] == ["runs"] and len(p.path) > 2:
        sub = ".".join(map(str, p.path[2:]))
        return f"{_label(p.path, data)}: {unknown_key(str(p.key), sub, p.valid)}"
    if p.kind == "unknown":
        at = [*p.path, 0]  # [] top level, [defaults], [runs, i], [pricing, model]
        what = {1: "a sweep file's top level", 2: f"[{at[0]}]"}.get(len(at)) or _label(p.path, data)
        return unknown_key(str(p.key), f"run #{int(at[1]) + 1}" if at[0] == "runs" else what, p.valid)
    if p.kind == "missing":
        return f"{_label(p.path, data)} needs `{p.key}`: {p.must}"
    return f"{_label(p.path[: max(p.depth, 1)], data)} must be {p.must or 'of another type'}"


def _label(path: list[Any], data: dict[str, Any]) -> str:
    """A value by its place: run a: serve.gpus, [serve] `gpus`, [pricing."m"] `input`, `name`."""
    if not path:
        return "the sweep file"
    head, rest = path[0], [str(r) for r in path[1:]]
    if head == "runs" and rest:
        entry = data["runs"][path[1]]  # a run that is not a table has no name
        name = entry.get("name") if isinstance(entry, dict) else None
        run = f"run {name if isinstance(name, str) and NAME_RE.match(name) else f'#{path[1] + 1}'}"
        if rest[1:2] == ["serve"] and rest[2:]:
            return f"{run}: serve.{'.'.join(rest[2:])}"
        return f"{run}: " + " ".join(f"`{r}`" for r in rest[1:]) if rest[1:] else run
    if head == "pricing" and rest:
        return f'[pricing."{rest[0]}"]' + "".join(f" `{r}`" for r in rest[1:2])
    return f"[{head}] `{'.'.join(rest)}`" if rest else f"`{head}`"


def _run(fail: _Fail, i: int, run: Any, table: dict, inherited: dict, default_env: str | None) -> RunSpec:
    """A run's spec: its own options over the inherited ones, its server or endpoint, its key variable."""
    at = lambda k, m: fail(["runs", i, k], m)  # noqa: E731
    serve = run_serve(run.name, run.model, run.serve, run.served_model_name, table, at)
    env, key_line = run.api_key_env, fail.lines.line_of(("runs",), "api_key_env", i)
    if env is not None and serve is None and "base_url" not in table:
        raise at("api_key_env", f"run {run.name} names `api_key_env` but not its `base_url`: {KEY_WITH_URL}")
    if env is None and serve is None and "base_url" not in table:  # its endpoint is [defaults]' own
        env, key_line = default_env, fail.lines.line_of(("defaults",), "api_key_env")
    wrong = published_problem(run.published) if run.published else None
    if wrong:
        raise at("published", f"run {run.name}: `published` {wrong}")
    options = {**inherited, **{k: v for k, v in table.items() if k not in RUN_ONLY}}
    if serve is not None:  # its server's URL is added when it is ready; requests name the served model
        options = {"backend": "vllm", **options, "model": serve.served_name}
        options.pop("base_url", None)
    elif "base_url" not in options and options.get("backend") != "vllm":
        needs = '`base_url = "https://..."`, `serve = {...}` or backend = "vllm"'
        raise fail(["runs", i], f"run {run.name} needs {needs}")
    line = fail.lines.line_of(("runs",), "name", i)
    published = dict(table["published"]) if run.published else None
    return RunSpec(run.name, run.model, env, options, line, key_line, serve, published)


def select_runs(sweep: SweepSpec, only: Iterable[str]) -> list[RunSpec]:
    """The runs named by --only (all when none is named), in file order."""
    wanted = list(only)
    known = {r.name for r in sweep.runs}
    unknown = [n for n in wanted if n not in known]
    if unknown:
        raise SweepFileError(
            f"--only names no run of {sweep.path}: {', '.join(unknown)} (runs: {', '.join(sorted(known))})"
        )
    return [r for r in sweep.runs if not wanted or r.name in wanted]


def check_key_variables(sweep: SweepSpec, runs: Iterable[RunSpec], env: Mapping[str, str]) -> None:
    """Every run about to start has its key variable set (a run without api_key_env sends no key)."""
    missing: dict[tuple[str, int | None], list[str]] = {}
    for r in runs:
        if r.api_key_env and not env.get(r.api_key_env, "").strip():
            missing.setdefault((r.api_key_env, r.key_line), []).append(r.name)
    if missing:  # one line, each unset variable once, with the line that names it and its runs
        where = "; ".join(
            f"{', '.join(names)} (line {line}: {var})" for (var, line), names in missing.items()
        )
        count = sum(len(names) for names in missing.values())
        raise SweepFileError(
            f"{sweep.path}: the key variable of {count} run(s) is not set: {where}; export it "
            "(read -rsp 'key: ' VAR; export VAR) or leave the run out with --only"
        )
