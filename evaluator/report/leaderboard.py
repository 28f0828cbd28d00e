"""The leaderboard files of a sweep or of any run folders: index.html, leaderboard.md, leaderboard.json.

`write_leaderboard(dirs)` reads each run folder as `score` does (`merge_run`: the records, never a stale
summary), takes each run's state and the pricing table from the sweep's `sweep.json` when there is one,
builds the numbers with `evaluator.scoring.leaderboard` and writes the three files atomically. The
page is one self-contained file (the report's stylesheet inline, no script, nothing loaded from the
network); each run links to its own scores/report.html. A run the sweep file gives a `published` result
(kept in sweep.json) is shown beside it (evaluator.scoring.published).
"""

from __future__ import annotations

import os
from pathlib import Path

from evaluator.core.atomic import write_atomic
from evaluator.core.jsonl import utf8_json
from evaluator.report.base import REPORT_FILE
from evaluator.report.leaderboard_markdown import leaderboard_markdown
from evaluator.report.leaderboard_page import render_page
from evaluator.runfolder.files import CONFIG as RUN_CONFIG
from evaluator.runfolder.sweep_state import SWEEP_STATE, SweepState, read_sweep_state
from evaluator.scoring import ScoreError, merge_run
from evaluator.scoring.base import BOARD_DIR, BOARD_PAGE, LEADERBOARD_JSON, LEADERBOARD_MD, SCORES_DIR
from evaluator.scoring.board import Board
from evaluator.scoring.leaderboard import BoardRun, build_board


def find_runs(dirs: list[Path]) -> tuple[list[tuple[str, Path]], SweepState | None]:
    """(name, folder) of every run under the given folders, and the sweep state of a single sweep folder.

    A folder with run_config.json is a run; otherwise each of its sub-folders that has one is (a sweep
    folder). Names are folder names, made unique with the parent's name when two collide.
    """
    found: list[Path] = []
    state: SweepState | None = None
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
            state = _sweep_state(d / SWEEP_STATE)
    names = [p.name for p in found]
    labelled = [
        (n if names.count(n) == 1 else f"{p.parent.name}/{n}", p) for n, p in zip(names, found, strict=True)
    ]
    return labelled, state


def _sweep_state(path: Path) -> SweepState:
    try:
        return read_sweep_state(path)
    except (OSError, ValueError) as exc:
        raise ScoreError(
            f"cannot read {path}: {exc}; repair or remove it (the run folders are the truth: the sweep run "
            "again writes it afresh)"
        ) from None


def board_runs(found: list[tuple[str, Path]], state: SweepState | None, out_dir: Path) -> list[BoardRun]:
    runs = []
    for name, folder in found:
        try:
            merged = merge_run(folder)
        except ScoreError as exc:
            raise ScoreError(f"cannot read run {folder}: {exc}") from None
        report = folder / SCORES_DIR / REPORT_FILE
        link = Path(os.path.relpath(report, out_dir)).as_posix() if report.is_file() else None
        run_state = state.run_state(name) if state else None
        published = state.published.get(name) if state else None
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
    board = build_board(board_runs(found, state, out_dir.resolve()), state.pricing if state else {})
    board["title"] = title or (state.sweep if state else None) or dirs[0].resolve().name
    if state and state.sha256:
        board["sweep"] = {"name": state.sweep, "file": state.file, "sha256": state.sha256}
    write_atomic(out_dir / LEADERBOARD_JSON, leaderboard_json(board))
    write_atomic(out_dir / LEADERBOARD_MD, leaderboard_markdown(board).encode("utf-8"))
    write_atomic(out_dir / BOARD_PAGE, render_page(board).encode("utf-8"))
    return out_dir


def leaderboard_json(board: Board) -> bytes:
    return utf8_json(board, indent=2) + b"\n"
