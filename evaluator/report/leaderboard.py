"""The leaderboard files of a sweep or of any run folders: index.html, leaderboard.md, leaderboard.json.

`write_leaderboard(dirs)` reads each run folder as `score` does (`merge_run`: the records, never a stale
summary), takes each run's state and the pricing table from the sweep's `sweep.json` when there is one,
builds the numbers with `evaluator.scoring.leaderboard` and writes the three files atomically. The
page is one self-contained file (the report's stylesheet inline, no script, nothing loaded from the
network); each run links to its own scores/report.html. A run the sweep file gives a `published` result
(kept in sweep.json) is shown beside it (evaluator.scoring.published).

leaderboard.md holds the table (report.board_columns, shared with the page), the published results and
the pairs. Every text it takes from a run folder, the data, a sweep file or a server (run names, models,
hosts, group values, published `source` and `note`) goes through core.text.md_text: one line, no table
break, no link and no HTML; the report links are core.text.safe_href paths.
"""

from __future__ import annotations

import os
from pathlib import Path

from evaluator.core.atomic import write_atomic
from evaluator.core.jsonl import utf8_json
from evaluator.core.text import md_text
from evaluator.core.vocab import NOT_COMPARABLE
from evaluator.report.base import REPORT_FILE
from evaluator.report.board_columns import markdown_table, md_row, p_text, pct, verdict_detail
from evaluator.report.leaderboard_page import render_page
from evaluator.runfolder.files import CONFIG as RUN_CONFIG
from evaluator.runfolder.handoff import SWEEP_STATE, SweepState, read_sweep_state
from evaluator.scoring import ScoreError, merge_run
from evaluator.scoring.base import BOARD_DIR, BOARD_PAGE, LEADERBOARD_JSON, LEADERBOARD_MD, SCORES_DIR
from evaluator.scoring.board import Board, BoardPair, PublishedBlock
from evaluator.scoring.leaderboard import BoardRun, build_leaderboard


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
    board = build_leaderboard(board_runs(found, state, out_dir.resolve()), state.pricing if state else {})
    board["title"] = title or (state.sweep if state else None) or dirs[0].resolve().name
    if state and state.sha256:
        board["sweep"] = {"name": state.sweep, "file": state.file, "sha256": state.sha256}
    write_atomic(out_dir / LEADERBOARD_JSON, leaderboard_json(board))
    write_atomic(out_dir / LEADERBOARD_MD, leaderboard_markdown(board).encode("utf-8"))
    write_atomic(out_dir / BOARD_PAGE, render_page(board).encode("utf-8"))
    return out_dir


def leaderboard_json(board: Board) -> bytes:
    return utf8_json(board, indent=2) + b"\n"


def pair_cells(p: BoardPair) -> list[str]:
    if not p["comparable"]:
        return [md_text(p["a"]), md_text(p["b"]), "", md_text(f"not comparable: {p['reason']}"), "", ""]
    lo, hi = p["difference_ci95"] or (None, None)
    diff = f"{100 * p['difference']:+.2f}" + (
        f" [{100 * lo:+.1f}, {100 * hi:+.1f}]" if lo is not None and hi is not None else ""
    )
    mark = SIGN_FLIP_MARK.get(str(p.get("p_test")), "")
    pv = "n/a" if p["p_value"] is None else f"{p['p_value']:.4g}{mark}"
    ph = "" if p["p_holm"] is None else f"{p['p_holm']:.4g}"
    return [md_text(p["a"]), md_text(p["b"]), str(p["questions"]), diff, pv, ph]


PAIR_HEADERS = ["A", "B", "Questions", "A - B, points [95% CI]", "p (McNemar; † sign-flip)", "p (Holm)"]
SIGN_FLIP_MARK = {"sign_flip": " †"}  # runs with repeats: the sign-flip test on per-question means


def leaderboard_markdown(board: Board) -> str:
    """leaderboard.md of a board built here, or of a leaderboard.json read back (scoring.board.is_board)."""
    m = board["methods"]
    out = [
        f"# Leaderboard: {md_text(board['title'])} ({md_text(board['benchmark'])}, {len(board['runs'])} runs)",
        "",
        "Ranked by exact-count accuracy over every question of each run (missing, unparsed and failed "
        "answers count as wrong); 95% Wilson intervals (with repeats: question-cluster bootstrap). Group "
        "columns are accuracies in %. Cut off: no parsable answer because the output limit was reached, "
        "counted apart from parse (format) failures. Tokens and cost include failed attempts.",
        "",
        *markdown_table(board),
        "",
    ]
    out += published_markdown(board)
    if board["pairwise"]:
        out += [
            "## Pairwise",
            "",
            f"A is the better-ranked run. Interval: paired bootstrap over questions ({m['bootstrap_resamples']} "
            f"resamples, seed {m['bootstrap_seed']}); p: exact McNemar, two-sided († with repeats: a paired sign-flip test on per-question means), Holm-adjusted across the "
            f"{sum(p['p_value'] is not None for p in board['pairwise'])} tested pairs.",
            "",
            md_row(PAIR_HEADERS),
            md_row(["---", "---", "---:", "---:", "---:", "---:"]),
        ]
        out += [md_row(pair_cells(p)) for p in board["pairwise"]]
        out.append("")
    return "\n".join(out)


PUBLISHED_HEADERS = [
    "Run",
    "Source",
    "Published % (correct / questions)",
    "Reproduced %",
    "Reproduced - published, points [95% CI]",
    "p",
    "p (Holm, per class)",
    "Verdict (smallest difference detectable at 80% power)",
]


def verdict_text(block: PublishedBlock) -> str:
    """The verdict with its detail: "differs (smallest detectable: 9.0 points)", "not comparable: why"."""
    word, detail = block.get("verdict") or NOT_COMPARABLE, verdict_detail(block)
    if word == NOT_COMPARABLE:
        return f"{word}: {detail}"
    return f"{word} ({detail})" if detail else word


def _difference(block: PublishedBlock) -> str:
    d, c = block.get("difference"), block.get("difference_ci95")
    if d is None:
        return ""
    return f"{100 * d:+.2f}" + (f" [{100 * c[0]:+.1f}, {100 * c[1]:+.1f}]" if c else "")


def _published_line(name: str, source: str, b: PublishedBlock) -> list[str]:
    return [
        name,
        md_text(source),
        f"{pct(b['accuracy'])} ({b['correct']} / {b['questions']})",
        f"{pct(b['reproduced_accuracy'])} ({b['reproduced_correct']} / {b['reproduced_questions']})",
        _difference(b),
        p_text(b.get("p_value")),
        p_text(b.get("p_holm")),
        verdict_text(b),
    ]


def published_markdown(board: Board) -> list[str]:
    """Published beside reproduced, per run (and per class where the sweep file gives class counts)."""
    runs = [e for e in board["runs"] if e.get("published")]
    if not runs:
        return []
    m = board["methods"]
    out = [
        "## Published and reproduced",
        "",
        f"Difference: reproduced minus published, with the {m['published_interval']}; p: {m['published_test']}. "
        'Verdict: "differs" when p < 0.05, otherwise "no detectable difference", which is not evidence that '
        "the two agree: beside it, the smallest difference in accuracy points the test detects with 80% "
        "power (two-sided 5%) at these sizes; at 442 against 442 questions it is about 9 points. A run whose "
        "declared reasoning mode differs from the source's is not comparable (no test). Per class: p-values "
        "Holm-adjusted within the run, a class differs when p (Holm) < 0.05 (named on the run's row above); "
        "the data's class sizes are compared with the published denominators (a mismatch: another release "
        "of the data).",
        "",
        md_row(PUBLISHED_HEADERS),
        md_row(["---", "---", "---:", "---:", "---:", "---:", "---:", "---"]),
    ]
    notes = []
    for e in runs:
        pub = e["published"]
        name = md_text(e["name"])
        out.append(md_row(_published_line(name, pub.get("source") or "", pub)))
        for cls, b in (pub.get("per_class") or {}).items():
            out.append(md_row(_published_line(f"{name} · {md_text(cls)}", "", b)))
        notes += [
            f"- {name}: class sizes differ ({md_text(m)})" for m in pub.get("class_size_mismatches") or []
        ]
        notes += [f"- {name}: {md_text(pub['reasoning_note'])}"] if pub.get("reasoning_note") else []
        notes += [f"- {name}: {md_text(pub['note'])}"] if pub.get("note") else []
    return [*out, "", *notes, *([""] if notes else [])]
