"""`doccount sweep FILE --plan` as a person reads it: a header (the executor, its GPU pool or partition,
`--parallel`, what the start order assumes), then one row per run (start order, GPUs, the run whose
GPUs it waits for) with its server command under it, shell-quoted and wrapped so that it pastes; then
what each run's requests carry (plan_requests).
"""

from __future__ import annotations

import shlex
import textwrap
from collections.abc import Sequence
from typing import Any

from evaluator.study.launch import PORT_PLACEHOLDER

WIDTH = 100
INDENT = "    "


def shell_words(argv: Sequence[str]) -> list[str]:
    """Each argument quoted for a POSIX shell (shlex), `$PORT` left for the shell to expand."""
    out = []
    for a in argv:
        if PORT_PLACEHOLDER in a and shlex.quote(a.replace(PORT_PLACEHOLDER, "0")) == a.replace(
            PORT_PLACEHOLDER, "0"
        ):
            out.append(f'"{a}"')  # nothing else in it needs quoting: the shell expands $PORT only
        else:
            out.append(shlex.quote(a))
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


def plan_lines(
    sweep: Any,
    rows: list[Any],
    finished: list[str],
    header: Sequence[str] = (),
    parallel: int | None = None,
    requests: Sequence[str] = (),
) -> list[str]:
    """`--plan`: the header, each run's row and its server command (executors.base.PlanRow), then the
    request side of each run (plan_requests.request_lines)."""
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
    for r in rows:
        order = "" if r.order is None else str(r.order)
        gpus = ",".join(r.gpus) or "-"
        what = r.where or wait_text(r, note) or "starts at once"
        tail = f"  [{r.note}]" if r.note else ""
        out.append(f"{r.run:<{pad}}  {order:>5}  {gpus:<{width}}  {what}{tail}".rstrip())
        if r.command:
            out += shell_lines(r.command)
    for name in finished:
        out.append(
            f"{name:<{pad}}  {'':>5}  {'-':<{width}}  finished earlier with the same settings: not started"
        )
    return out + ([""] + list(requests) if requests else [])
