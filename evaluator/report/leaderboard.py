"""The leaderboard files of a sweep or of any run folders: index.html, leaderboard.md, leaderboard.json.

`write_leaderboard(dirs)` reads each run folder as `score` does (`merge_run`: the records, never a stale
summary), takes each run's state and the pricing table from the sweep's `sweep.json` when there is one,
builds the numbers with `evaluator.scoring.leaderboard` and writes the three files atomically. The
page is one self-contained file (the report's stylesheet inline, no script, nothing loaded from the
network); each run links to its own scores/report.html. A run the sweep file gives a `published` result
(kept in sweep.json) is shown beside it (evaluator.scoring.published).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from evaluator.core.atomic import write_atomic
from evaluator.core.jsonl import JSONObject, utf8_json
from evaluator.report.leaderboard_markdown import leaderboard_markdown
from evaluator.report.leaderboard_page import render_page
from evaluator.scoring import ScoreError, merge_run
from evaluator.scoring.board import Board
from evaluator.scoring.leaderboard import BoardRun, build_board

SWEEP_STATE = "sweep.json"
BOARD_DIR = "leaderboard"
RUN_CONFIG = "run_config.json"


def find_runs(dirs: list[Path]) -> tuple[list[tuple[str, Path]], JSONObject]:
    """(name, folder) of every run under the given folders, and the sweep state of a single sweep folder.

    A folder with run_config.json is a run; otherwise each of its sub-folders that has one is (a sweep
    folder). Names are folder names, made unique with the parent's name when two collide.
    """
    found: list[Path] = []
    state: JSONObject = {}
    for d in dirs:
        if (d / RUN_CONFIG).is_file():
            found.append(d)
            continue
        if not d.is_dir():
            raise ScoreError(f"{d} is not a folder; pass run folders or a sweep folder (runs/<sweep>)")
        subs = sorted(p for p in d.iterdir() if (p / RUN_CONFIG).is_file())
        if not subs:
            raise ScoreError(f"{d} holds no run folder (no */{RUN_CONFIG}); nothing to rank")
        found += subs
        if len(dirs) == 1 and (d / SWEEP_STATE).is_file():
            state = read_sweep_state(d / SWEEP_STATE)
    names = [p.name for p in found]
    labelled = [
        (n if names.count(n) == 1 else f"{p.parent.name}/{n}", p) for n, p in zip(names, found, strict=True)
    ]
    return labelled, state


def read_sweep_state(path: Path) -> JSONObject:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ScoreError(f"cannot read {path}: {exc}") from None
    return data if isinstance(data, dict) else {}


def board_runs(found: list[tuple[str, Path]], state: JSONObject, out_dir: Path) -> list[BoardRun]:
    runs = []
    states = state.get("runs") if isinstance(state.get("runs"), dict) else {}
    for name, folder in found:
        try:
            merged = merge_run(folder)
        except ScoreError as exc:
            raise ScoreError(f"cannot read run {folder}: {exc}") from None
        report = folder / "scores" / "report.html"
        link = Path(os.path.relpath(report, out_dir)).as_posix() if report.is_file() else None
        run_state = (states.get(name) or {}).get("state") if states else None
        published = (
            (state.get("published") or {}).get(name) if isinstance(state.get("published"), dict) else None
        )
        runs.append(BoardRun(name, merged, link, run_state, published))
    return runs


def write_leaderboard(dirs: list[Path], out_dir: Path | None = None, title: str | None = None) -> Path:
    """Write the three leaderboard files; return their folder."""
    dirs = [Path(d) for d in dirs]
    found, state = find_runs(dirs)
    if out_dir is None:
        if len(dirs) != 1 or (dirs[0] / RUN_CONFIG).is_file():
            raise ScoreError("pass --output DIR when the folders are not one sweep folder")
        out_dir = dirs[0] / BOARD_DIR
    out_dir.mkdir(parents=True, exist_ok=True)
    board = build_board(board_runs(found, state, out_dir.resolve()), state.get("pricing") or {})
    board["title"] = title or state.get("sweep") or dirs[0].resolve().name
    if state.get("sha256"):
        board["sweep"] = {"name": state.get("sweep"), "file": state.get("file"), "sha256": state["sha256"]}
    write_atomic(out_dir / "leaderboard.json", leaderboard_json(board))
    write_atomic(out_dir / "leaderboard.md", leaderboard_markdown(board).encode("utf-8"))
    write_atomic(out_dir / "index.html", render_page(board).encode("utf-8"))
    return out_dir


def leaderboard_json(board: Board) -> bytes:
    return utf8_json(board, indent=2) + b"\n"
