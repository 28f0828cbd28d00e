"""The sweep file: a TOML study of many `evaluate` runs, read and checked before anything is sent.

A sweep file names each run's model, endpoint and the environment variable that holds its key; every
other key is an `evaluate` option by its long flag name (`_` for `-`). The option names and their
checks come from the evaluate command's own click parameters (`option_specs`), so the file accepts
exactly what `evaluate` accepts, `--batch` included once evaluate has it, and nothing else.

Refused before anything is sent, each naming the file and line: a syntax error, an unknown key, a
value evaluate would refuse, a value that looks like a secret (the value is never repeated in the
message), and, for the runs about to start, a key variable that is not set.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import msgspec

from evaluator.core.values import MAX_PRICE, is_price
from evaluator.study.file_lines import LineIndex
from evaluator.study.key_hints import unknown_key
from evaluator.study.published_file import run_published
from evaluator.study.secrets import looks_like_secret, secret_problem
from evaluator.study.serve_file import RunServe, ServeTable, run_serve, serve_table

# option_specs and OptionSpec are re-exported: a caller loads a file with them
from evaluator.study.sweep_options import ALIASES, option_args
from evaluator.study.sweep_options import OptionSpec as OptionSpec
from evaluator.study.sweep_options import option_specs as option_specs

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

TOP_KEYS = ("name", "benchmark", "data_files", "dataset", "revision", "defaults", "pricing", "serve", "runs")
RUN_KEYS = (
    "name",
    "model",
    "base_url",
    "api_key_env",
    "serve",
    "served_model_name",
    "published",
)  # besides evaluate options
PRICE_KEYS = ("input", "output", "cached_input", "batch_input", "batch_output")
# evaluate options the sweep decides itself: the folder, the output, and re-sending finished rows
SWEEP_OWNED = {
    "run_root": "the sweep puts each run in <run-root>/<sweep name>/<run name>",
    "run_name": "the run's folder is its `name`",
    "quiet": "the sweep shows one progress line per run",
    "dry_run": "run `doccount evaluate --dry-run` on the data instead",
    "overwrite": "a sweep never re-sends finished rows; give the run a new name to start it afresh",
}
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")
ENV_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
RESERVED_RUN_NAMES = ("leaderboard", "logs", "sweep.json")


class SweepFileError(ValueError):
    """A sweep file that cannot be run (a user error: one line naming the file, the line and the fix)."""


class Price(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """USD per 1M tokens for one model id; cached_input defaults to input when not given."""

    input: float
    output: float
    cached_input: float | None = None
    batch_input: float | None = (
        None  # a --batch run's prices; default half the online ones (scoring.leaderboard)
    )
    batch_output: float | None = None


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


# ----------------------------------------------------------------------------- reading


def load_sweep(path: Path, specs: Mapping[str, OptionSpec]) -> SweepSpec:
    """The sweep file read and checked (everything but the key variables: see check_key_variables)."""
    raw = _read(path)
    text = raw.decode("utf-8")
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        at = re.search(r"at line (\d+)", str(exc))
        raise SweepFileError(f"{path}:{at.group(1) + ':' if at else ''} not valid TOML: {exc}") from None
    where = _Where(path, LineIndex(text))
    _check_keys(where, (), data, TOP_KEYS, "a sweep file's top level")
    name = _name(where, (), data, "name", "the sweep")
    top = {k: data[k] for k in ("benchmark", "data_files", "dataset", "revision") if k in data}
    _check_options(where, (), 0, top, specs)
    defaults = dict(_table(where, (), data, "defaults"))
    # [defaults] may name the key variable for every run, as a run does for itself
    key_env = (
        _key_env(where, ("defaults",), defaults, 0, "[defaults]"),
        where.lines.line_of(("defaults",), "api_key_env"),
    )
    defaults.pop("api_key_env", None)
    _check_options(where, ("defaults",), 0, defaults, specs)
    pricing = _pricing(where, _table(where, (), data, "pricing"))
    runs = [
        _run(where, i, table, {**top, **defaults}, specs, key_env)
        for i, table in enumerate(_runs_list(where, data))
    ]
    _check_unique(where, runs)
    serve = serve_table(where, data)
    return SweepSpec(name, str(path), hashlib.sha256(raw).hexdigest(), runs, pricing, raw, serve)


def _read(path: Path) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise SweepFileError(f"cannot read the sweep file {path}: {exc.strerror or exc}") from None


class _Where:
    def __init__(self, path: Path, lines: LineIndex) -> None:
        self.path, self.lines = path, lines

    def fail(self, table: tuple[str, ...], key: str | None, message: str, index: int = 0) -> SweepFileError:
        line = self.lines.line_of(table, key, index)
        return SweepFileError(f"{self.path}:{line}: {message}" if line else f"{self.path}: {message}")


def _check_keys(where: _Where, table: tuple[str, ...], data: dict, allowed: Iterable[str], what: str) -> None:
    for key in data:
        if key not in allowed:
            raise where.fail(table, key, unknown_key(key, what, list(allowed)))


def _table(where: _Where, table: tuple[str, ...], data: dict, key: str) -> dict[str, Any]:
    value = data.get(key, {})
    if not isinstance(value, dict):
        raise where.fail(table, key, f"`{key}` must be a table ([{key}])")
    return value


def _name(where: _Where, table: tuple[str, ...], data: dict, key: str, what: str, index: int = 0) -> str:
    value = data.get(key)
    if not isinstance(value, str) or not NAME_RE.match(value) or value in RESERVED_RUN_NAMES:
        if isinstance(value, str) and looks_like_secret(value):
            raise where.fail(table, key, f"the value of `{key}` looks like a secret", index)
        raise where.fail(
            table,
            key,
            f"{what} needs `{key} = \"...\"`: letters, digits, '.', '_' or '-' (it names a folder; not "
            f"{', '.join(RESERVED_RUN_NAMES)})",
            index,
        )
    return value


def _pricing(where: _Where, table: dict[str, Any]) -> dict[str, Price]:
    out = {}
    for model, price in table.items():
        here = ("pricing", model)
        if not isinstance(price, dict):
            raise where.fail(("pricing",), model, f'[pricing."{model}"] must be a table of USD per 1M tokens')
        _check_keys(where, here, price, PRICE_KEYS, f'[pricing."{model}"]')
        for key, value in price.items():
            if not is_price(value):
                raise where.fail(
                    here, key, f"`{key}` must be a finite number from 0 to {MAX_PRICE:g} (USD per 1M tokens)"
                )
        if "input" not in price or "output" not in price:
            raise where.fail(
                here, None, f'[pricing."{model}"] needs `input` and `output` (USD per 1M tokens)'
            )
        out[model] = msgspec.convert(price, Price)
    return out


def _runs_list(where: _Where, data: dict) -> list[dict[str, Any]]:
    runs = data.get("runs")
    if not isinstance(runs, list) or not runs or not all(isinstance(r, dict) for r in runs):
        raise where.fail((), "runs", "a sweep needs at least one [[runs]] table")
    return runs


def _key_env(where: _Where, here: tuple[str, ...], table: dict, i: int, what: str) -> str | None:
    """A table's `api_key_env`: the name of an environment variable (never a key), or None."""
    env = table.get("api_key_env")
    if env is not None and (not isinstance(env, str) or not ENV_RE.match(env)):
        problem = (
            "looks like a secret: put the key in an environment variable"
            if (isinstance(env, str) and looks_like_secret(env))
            else "must name an environment variable (letters, digits, _)"
        )
        raise where.fail(here, "api_key_env", f"{what}: `api_key_env` {problem} and name that variable", i)
    return env


def _run(
    where: _Where,
    i: int,
    table: dict,
    inherited: dict,
    specs: Mapping[str, OptionSpec],
    default_key: tuple[str | None, int | None] = (None, None),
) -> RunSpec:
    here = ("runs",)
    name = _name(where, here, table, "name", f"run #{i + 1}", i)
    own = {k: v for k, v in table.items() if k not in RUN_KEYS or k in ("model", "base_url")}
    # unknown keys first: `modle = ...` gets its did-you-mean, not "needs `model`"
    _check_options(where, here, i, own, specs, RUN_KEYS)
    if not isinstance(table.get("model"), str) or not table["model"].strip():
        raise where.fail(here, "model" if "model" in table else None, f'run {name} needs `model = "..."`', i)
    env = _key_env(where, here, table, i, f"run {name}")
    key_line = where.lines.line_of(here, "api_key_env", i)
    serve = run_serve(where, i, name, table)
    if env is None and serve is None:  # [defaults]' variable (never a served run's), and its line
        env, key_line = default_key
    if serve is not None and env is not None:  # its requests carry its own server's token (study.unit)
        raise where.fail(
            here,
            "api_key_env",
            f"run {name}: a served run sends its own server's fresh token, never a key of yours; "
            "remove `api_key_env`",
            i,
        )
    published = run_published(where, i, name, table)
    options = {**inherited, **own}
    if serve is not None:  # its server's URL is added when it is ready; requests name the served model
        options = {"backend": "vllm", **options, "model": serve.served_name}
        options.pop("base_url", None)
    elif "base_url" not in options and options.get("backend") != "vllm":
        raise where.fail(
            here,
            None,
            f'run {name} needs `base_url = "https://..."`, `serve = {{...}}` or backend = "vllm"',
            i,
        )
    lines = where.lines
    return RunSpec(
        name,
        table["model"],
        env,
        options,
        lines.line_of(here, "name", i),
        key_line,
        serve,
        published,
    )


def _check_unique(where: _Where, runs: list[RunSpec]) -> None:
    seen: dict[str, int] = {}
    for i, run in enumerate(runs):
        folded = run.name.lower()  # one folder on a case-insensitive file system
        if folded in seen:
            raise where.fail(("runs",), "name", f"two runs are named {run.name}: run names name folders", i)
        seen[folded] = i


def _check_options(
    where: _Where,
    table: tuple[str, ...],
    index: int,
    options: dict,
    specs: Mapping[str, OptionSpec],
    own_keys: Iterable[str] = (),
) -> None:
    """Each key an evaluate option the sweep passes on, with a value evaluate accepts and no secret."""
    for key, value in options.items():
        problem = secret_problem(key, value)
        if problem:
            raise where.fail(
                table,
                key,
                f"{problem}; a sweep file names the variable that holds a key "
                '(api_key_env = "..."), never the key itself',
                index,
            )
        if key in SWEEP_OWNED:
            raise where.fail(table, key, f"`{key}` is set by the sweep: {SWEEP_OWNED[key]}", index)
        spec = specs.get(ALIASES.get(key, key))
        if spec is None:
            options_ = [*ALIASES, *(k for k in specs if k not in SWEEP_OWNED and k not in ALIASES.values())]
            valid = list(dict.fromkeys([*own_keys, *sorted(options_)]))  # a run's model, base_url once
            what = {(): "the top level", ("defaults",): "[defaults]"}.get(table, f"run #{index + 1}")
            raise where.fail(table, key, unknown_key(key, what, valid), index)
        try:
            option_args(spec, value, key)
        except ValueError as exc:
            raise where.fail(table, key, f"`{key}`: {exc}", index) from None


# ----------------------------------------------------------------------------- to argv


def run_args(run: RunSpec, specs: Mapping[str, OptionSpec], folder: Path) -> list[str]:
    """The whole `evaluate` argument list of a run, its folder given by the sweep."""
    args: list[str] = []
    for key, value in run.options.items():
        args += option_args(specs[ALIASES.get(key, key)], value, key)
    return args + ["--run-root", str(folder)]


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
