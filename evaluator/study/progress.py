"""The sweep's progress display (one line per run) and its closing table of every run's state.

On a terminal the block of lines is redrawn in place; elsewhere (CI logs, a pipe) a run's line is
printed when its state changes, and its latest progress line at most every `interval_s` seconds.
"""

from __future__ import annotations

import shutil
import threading
import time
from pathlib import Path
from typing import Any

WIDTH = 110


class SweepProgress:
    def __init__(self, names: list[str], out: Any, interval_s: float = 30.0) -> None:
        self.names = names
        self.out = out
        self.tty = bool(getattr(out, "isatty", lambda: False)())
        self.lines = {n: ("pending", "") for n in names}
        self.printed: dict[str, float] = {}
        self.interval_s = interval_s
        self.lock = threading.Lock()
        self.drawn = 0
        self.pad = max((len(n) for n in names), default=0)

    def text(self, name: str) -> str:
        state, detail = self.lines[name]
        width = shutil.get_terminal_size((WIDTH, 24)).columns - 1 if self.tty else 2 * WIDTH
        return f"{name:<{self.pad}}  {state:<11} {detail}"[:width]  # one screen line each, for the redraw

    def update(self, name: str, state: str, detail: str) -> None:
        with self.lock:
            old_state = self.lines.get(name, ("", ""))[0]
            self.lines[name] = (state, detail)
            if self.tty:
                self._redraw()
                return
            now = time.monotonic()
            if state != old_state or now - self.printed.get(name, 0.0) >= self.interval_s:
                self.printed[name] = now
                print(f"[sweep] {self.text(name)}", file=self.out, flush=True)

    def _redraw(self) -> None:
        up = f"\x1b[{self.drawn}F" if self.drawn else ""
        body = "".join(f"\x1b[2K{self.text(n)}\n" for n in self.names)
        self.out.write(up + body)
        self.out.flush()
        self.drawn = len(self.names)

    def close(self) -> None:
        with self.lock:
            if self.tty:
                self._redraw()


def end_table(sweep: Any, state: Any, selected: list[Any], board: Path | None) -> list[str]:
    """Every run of the file with its state; the runs left out by --only say so."""
    chosen = {r.name for r in selected}
    pad = max(len(r.name) for r in sweep.runs)
    out = ["", f"sweep {sweep.name}: {len(sweep.runs)} run(s)", ""]
    out.append(f"{'run':<{pad}}  {'state':<11} {'exit':>4}  detail")
    for r in sweep.runs:
        st = state.runs.get(r.name)
        name_state = st.state if st else "pending"
        if r.name not in chosen:
            name_state += " (not selected)" if not st else ""
        code = "" if not st or st.exit_code is None else str(st.exit_code)
        detail = st.message if st and st.message else ""
        out.append(f"{r.name:<{pad}}  {name_state:<11} {code:>4}  {detail}")
    unfinished = [
        r.name for r in selected if not state.runs.get(r.name) or state.runs[r.name].state != "done"
    ]
    out.append("")
    if unfinished:
        out.append(
            f"{len(unfinished)} run(s) did not finish ({', '.join(unfinished)}): re-run the same command to "
            "continue them (finished rows and runs are not sent again)"
        )
    if board is not None:  # the leaderboard was just written: scoring is imported already
        from evaluator.scoring.base import BOARD_PAGE

        out.append(f"leaderboard: {board / BOARD_PAGE} (and leaderboard.md, leaderboard.json)")
    return out


def status_lines(sweep_name: str, executor_name: str, rows: list[Any]) -> list[str]:
    """`--status`: a header, then one line per run (executors.base.StatusRow)."""
    pad = max([len(r.run) for r in rows] + [3])
    out = [f"sweep {sweep_name}: {len(rows)} run(s), {executor_name}", ""]
    out.append(f"{'run':<{pad}}  {'state':<10} {'job':>7}  detail")
    out += [f"{r.run:<{pad}}  {r.state:<10} {r.job:>7}  {r.detail}" for r in rows]
    return out
