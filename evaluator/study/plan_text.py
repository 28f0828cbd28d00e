"""`doccount sweep FILE --plan` as a person reads it: a header (the executor, its pool or partition,
`--parallel`, what the start order assumes), one row per run (start order, GPUs, the run it waits for)
with its server command under it, shell-quoted so that it pastes; then the request side (docs/sweeps.md,
"The plan"): per run the output limit as sent (evaluator.request.shape.resolve_sampling), the reasoning
mode, preset, extra body, strip tokens, concurrency, timeout, and the tokens/s one request must sustain
(max_tokens / timeout), so that what decides comparability is seen before a GPU hour is spent. Pure.
"""

from __future__ import annotations

import json
import shlex
import textwrap
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import urlsplit

import msgspec

from evaluator.data.benchmarks import DEFAULT_BENCHMARK, get_benchmark
from evaluator.request.endpoint import VLLM_DEFAULT_BASE_URL
from evaluator.request.shape import RequestShapeError, load_preset, resolve_sampling
from evaluator.study.launch import PORT_PLACEHOLDER

WIDTH = 100
INDENT = "    "


def shell_words(argv: Sequence[str]) -> list[str]:
    """Each argument quoted for a POSIX shell (shlex), `$PORT` left for the shell to expand."""
    out = []
    for a in argv:
        bare = a.replace(PORT_PLACEHOLDER, "0")  # when nothing else in it needs quoting: "...$PORT..."
        out.append(f'"{a}"' if PORT_PLACEHOLDER in a and shlex.quote(bare) == bare else shlex.quote(a))
    return out


def shell_lines(argv: Sequence[str], width: int = WIDTH, indent: str = INDENT) -> list[str]:
    """The command wrapped between arguments (a flag kept with its value), each line but the last ending
    in ` \\`, so that the lines pasted together are the one command."""
    words = shell_words(argv)
    groups: list[str] = []
    for w in words:
        if groups and groups[-1].startswith("-") and " " not in groups[-1] and not w.startswith("-"):
            groups[-1] += f" {w}"  # `--flag value` stays on one line
        else:
            groups.append(w)
    lines, current = [], indent
    for g in groups:
        if current.strip() and len(current) + 1 + len(g) + 2 > width:
            lines.append(current + " \\")
            current = indent + "  " + g
        else:
            current = f"{current} {g}" if current.strip() else current + g
    lines.append(current)
    return lines


def wait_text(row: Any, parallel_note: str) -> str:
    if row.after:
        return f"waits for {' and '.join(row.after)}" + ("'s GPUs" if len(row.after) == 1 else ": their GPUs")
    return f"waits for a free slot ({parallel_note})" if row.slot else ""


def key_text(run: Any) -> str:
    """Which key a run sends, and to which host (sweep_file.RunSpec): never the key itself."""
    if run.serve is not None:
        return "key: its server's own fresh token (none of yours)"
    urls = str(run.options.get("base_url") or VLLM_DEFAULT_BASE_URL).split(",")
    hosts = ", ".join(_host(u.strip()) for u in urls if u.strip())
    return f"key: ${run.api_key_env} to {hosts}" if run.api_key_env else f"key: none (EMPTY) to {hosts}"


def _host(url: str) -> str:
    """host[:port] of a URL (no user or password part)."""
    try:
        parts = urlsplit(url)
        port = f":{parts.port}" if parts.port else ""
    except ValueError:
        return "(an unreadable URL)"
    host = parts.hostname or "?"
    return f"[{host}]{port}" if ":" in host else f"{host}{port}"


def plan_lines(
    sweep: Any,
    rows: list[Any],
    finished: list[str],
    header: Sequence[str] = (),
    parallel: int | None = None,
    requests: Sequence[str] = (),
) -> list[str]:
    """`--plan`: the header, each run's row and its server command (executors.base.PlanRow), then the
    request side of each run (request_lines)."""
    out = [f"sweep {sweep.name}: plan; nothing is started"]
    for line in header:
        out += textwrap.wrap(line, WIDTH, initial_indent="  ", subsequent_indent="    ")
    if any(r.command for r in rows):
        out.append(
            f"  {PORT_PLACEHOLDER} in a command: the sweep picks a free port; set PORT before pasting one"
        )
    out.append("")
    pad = max([len(r.run) for r in rows] + [len(n) for n in finished] + [3])
    width = max([len(",".join(r.gpus)) for r in rows] + [4])
    out.append(f"{'run':<{pad}}  {'start':>5}  {'gpus':<{width}}  endpoint, or when its server starts")
    note = f"--parallel {parallel}" if parallel else "--parallel"
    specs = {run.name: run for run in sweep.runs}
    for r in rows:
        order = "" if r.order is None else str(r.order)
        gpus = ",".join(r.gpus) or "-"
        what = r.where or wait_text(r, note) or "starts at once"
        tail = f"  [{r.note}]" if r.note else ""
        out.append(f"{r.run:<{pad}}  {order:>5}  {gpus:<{width}}  {what}{tail}".rstrip())
        if r.run in specs:
            out.append(f"{INDENT}{key_text(specs[r.run])}")
        if r.command:
            out += shell_lines(r.command)
    for name in finished:
        out.append(
            f"{name:<{pad}}  {'':>5}  {'-':<{width}}  finished earlier with the same settings: not started"
        )
    return out + ([""] + list(requests) if requests else [])


DEFAULT_CONCURRENCY, DEFAULT_TIMEOUT = 16, 600.0  # evaluate's (evaluation.options), when not given


class RequestSide(msgspec.Struct, frozen=True):
    """What one run's requests carry, and the rate each must sustain."""

    run: str
    max_tokens: int | None  # None: no output limit is sent
    max_tokens_field: str
    reasoning: str | None  # declared mode; None: not declared
    preset: str | None
    extra_body: dict[str, Any]
    strip_token: list[str]
    concurrency: int
    timeout_s: float

    @property
    def tokens_per_s(self) -> float | None:
        """What one request must generate per second to finish max_tokens within the timeout."""
        return None if self.max_tokens is None else self.max_tokens / self.timeout_s


def _extra_body(value: Any) -> dict[str, Any]:
    if isinstance(value, str):  # `extra_body_json = "{...}"`: already checked by evaluate's own type
        try:
            value = json.loads(value)
        except ValueError:
            return {}
    return dict(value) if isinstance(value, dict) else {}


def request_side(name: str, options: Mapping[str, Any]) -> RequestSide:
    """The request side of one run from its evaluate options (the sweep file's keys, defaults merged)."""
    bench = get_benchmark(str(options.get("benchmark", DEFAULT_BENCHMARK)))
    preset_name = options.get("preset")
    try:
        preset = load_preset(preset_name) if isinstance(preset_name, str) else None
    except RequestShapeError:  # the file's checks refuse an unknown preset first
        preset = None
    body = _extra_body(options.get("extra_body", options.get("extra_body_json")))
    sampling = resolve_sampling(
        bench.default_sampling,
        body,
        temperature=options.get("temperature"),
        top_p=options.get("top_p"),
        max_tokens=options.get("max_tokens"),
        max_tokens_field=options.get("max_tokens_field"),
        preset=preset,
    )
    strip = options.get("strip_token", [])
    return RequestSide(
        run=name,
        max_tokens=sampling.max_tokens,
        max_tokens_field=sampling.max_tokens_field,
        reasoning=options.get("reasoning"),
        preset=preset.name if preset else None,
        extra_body=body,
        strip_token=[str(t) for t in (strip if isinstance(strip, list) else [strip])],
        concurrency=int(options.get("concurrency", DEFAULT_CONCURRENCY)),
        timeout_s=float(options.get("timeout", DEFAULT_TIMEOUT)),
    )


def _json(value: Any) -> str:
    """A value as compact JSON, escaped for a terminal (no control character, ASCII only)."""
    return json.dumps(value, ensure_ascii=True, separators=(",", ":"))


def _cells(side: RequestSide) -> list[str]:
    limit = "none" if side.max_tokens is None else str(side.max_tokens)
    rate = side.tokens_per_s
    return [
        side.run,
        limit,
        side.reasoning or "undeclared",
        side.preset or "-",
        str(side.concurrency),
        f"{side.timeout_s:g} s",
        "-" if rate is None else f"{rate:,.1f}",
        "-" if rate is None else f"{rate * side.concurrency:,.0f}",
    ]


HEAD = ["run", "max_tokens", "reasoning", "preset", "at once", "timeout", "tokens/s", "all"]
RIGHT = {4, 5, 6, 7}  # numbers, right-aligned


def request_lines(sides: Sequence[RequestSide]) -> list[str]:
    """The plan's request section: one row per run, indented (a line that starts with a run's name is its
    server row above), its output limit's field, extra body and strip tokens under it when it has them."""
    if not sides:
        return []
    rows = [HEAD] + [_cells(s) for s in sides]
    widths = [max(len(r[i]) for r in rows) for i in range(len(HEAD))]

    def line(cells: list[str]) -> str:
        aligned = [
            c.rjust(w) if i in RIGHT else c.ljust(w)
            for i, (c, w) in enumerate(zip(cells, widths, strict=True))
        ]
        return "  " + "  ".join(aligned).rstrip()

    out = textwrap.wrap(
        "requests: what each run sends; tokens/s: what one request must generate per second to finish "
        "max_tokens within the timeout (all: over the requests at once)",
        WIDTH,
    )
    out.append(line(HEAD))
    for side, cells in zip(sides, rows[1:], strict=True):
        out.append(line(cells))
        body = _json(side.extra_body) if side.extra_body else ""
        renamed = side.max_tokens is not None and side.max_tokens_field != "max_tokens"
        field = side.max_tokens_field if renamed else ""
        strip = " ".join(map(_json, side.strip_token))
        for label, text in (("max_tokens sent as", field), ("extra body", body), ("strip tokens", strip)):
            if text:
                out += textwrap.wrap(
                    f"{label}: {text}", WIDTH, initial_indent="      ", subsequent_indent="        ",
                    break_on_hyphens=False,
                )  # fmt: skip
    return out
