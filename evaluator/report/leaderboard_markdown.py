"""The leaderboard as text: its table cells (shared with the page) and leaderboard.md.

Every text leaderboard.md takes from a run folder, the data, a sweep file or a server (run names, models,
hosts, group values, published `source` and `note`) goes through core.escape.md_text: one line, no table
break, no link and no HTML; the report links are core.escape.safe_href paths.
"""

from __future__ import annotations

from typing import Any

from evaluator.core.escape import md_text, safe_href
from evaluator.core.vocab import NOT_COMPARABLE
from evaluator.scoring.board import Board, BoardColumn, BoardEntry, BoardPair, PublishedBlock


def pct(x: Any) -> str:
    return "" if x is None else f"{100 * x:.2f}"


def ci(c: Any) -> str:
    return "" if not c else f"[{100 * c[0]:.1f}, {100 * c[1]:.1f}]"


def usd(x: Any) -> str:
    return "" if x is None else f"{x:.4f}" if x < 1 else f"{x:.2f}"


def cost_cell(e: BoardEntry) -> str:
    """The cost, marked for a batch run with the rate it was costed at (a default said as such)."""
    if not e.get("batch"):
        return usd(e["cost_usd"])
    price = e.get("price") or {}
    rate = "batch price, default half online" if price.get("batch_default") else "batch price"
    return f"{usd(e['cost_usd'])} ({rate})" if e["cost_usd"] is not None else "batch"


def latency(e: BoardEntry) -> str:
    """Median / p95 seconds per response."""
    lat = e.get("latency_s")
    median, p95 = (lat["median"], lat["p95"]) if lat else (None, None)
    if median is None or p95 is None:  # describe() gives both or neither
        return ""
    return f"{_seconds(median)} / {_seconds(p95)}"


def _seconds(x: float) -> str:
    return f"{x:.2f}" if x < 10 else f"{x:.1f}" if x < 100 else f"{x:.0f}"


def column_label(board: Board, col: BoardColumn) -> str:
    fields = {c["field"] for c in board["columns"]}
    return col["value"] if len(fields) == 1 else f"{col['field']}={col['value']}"


def extra_metric_names(board: Board) -> list[str]:
    """The benchmark's other metrics (CountQA: relaxed accuracy), a column each."""
    return sorted({k for e in board["runs"] for k in e.get("extra_metrics") or {}})


def board_headers(board: Board) -> list[str]:
    repeats = any("repeats" in e for e in board["runs"])
    head = ["Rank", "Run", "Model", "Provider", "Correct", "Accuracy % [95% CI]"]
    head += [f"{k.replace('_', ' ').capitalize()} %" for k in extra_metric_names(board)]
    head += ["Mean ± sd (repeats)"] if repeats else []
    head += [md_text(column_label(board, c)) for c in board["columns"]]
    head += [
        "Parse failures",
        "Cut off",
        "Request errors",
        "Missing",
        "Tokens prompt / completion / reasoning",
    ]
    return head + ["Cost USD", "Latency s median / p95", "Complete", "Report"]


def run_cells(board: Board, e: BoardEntry, link: bool = True) -> list[str]:
    """One run's cells in the order of board_headers (plain text; the report as a Markdown link)."""
    repeats = any("repeats" in x for x in board["runs"])
    o, t = e["outcomes"], e["tokens"]
    denom = e.get("responses", e["questions"])
    name = md_text(e["name"]) + (" (batch)" if e.get("batch") else "")
    cells = [str(e["rank"]), name, md_text(e["model"]), md_text(e["provider"]), f"{e['correct']} / {denom}"]
    differ = published_mark(e)[1]
    cells.append(
        f"{pct(e['accuracy'])} {ci(e['ci95'])}".strip()
        + (f" (against published, {md_text(differ)})" if differ else "")
    )
    cells += [pct((e.get("extra_metrics") or {}).get(k)) for k in extra_metric_names(board)]
    if repeats:
        r = e.get("repeats")
        sd = "" if not r or r["sd"] is None else f" ± {100 * r['sd']:.2f}"
        cells.append(f"{pct(r['mean'])}{sd} (K={r['k']})" if r else "")
    cells += [pct(e["per_group"][c["field"]][c["value"]]["accuracy"]) for c in board["columns"]]
    cells += [str(o["parse_failure"]), str(o["cut_off"]), str(o["request_error"]), str(o["missing"])]
    cells.append(f"{t['prompt']:,} / {t['completion']:,} / {t['reasoning']:,}")
    cells.append(cost_cell(e))
    cells.append(latency(e))
    cells.append("yes" if e["complete"] else f"no ({e['state']})" if e.get("state") else "no")
    report = e["report"] or ""
    cells.append(f"[report]({safe_href(report)})" if report and link else md_text(report))
    return cells


def pair_cells(p: BoardPair) -> list[str]:
    if not p["comparable"]:
        return [md_text(p["a"]), md_text(p["b"]), "", md_text(f"not comparable: {p['reason']}"), "", ""]
    lo, hi = p["difference_ci95"] or (None, None)
    diff = f"{100 * p['difference']:+.2f}" + (
        f" [{100 * lo:+.1f}, {100 * hi:+.1f}]" if lo is not None and hi is not None else ""
    )
    pv = (
        "n/a"
        if p["p_value"] is None
        else f"{p['p_value']:.4g}" + SIGN_FLIP_MARK.get(str(p.get("p_test")), "")
    )
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
        _md_row(board_headers(board)),
        _md_row(["---:", "---", "---", "---", "---:", "---:"] + ["---:"] * (len(board_headers(board)) - 6)),
    ]
    out += [_md_row(run_cells(board, e)) for e in board["runs"]]
    out.append("")
    out += published_markdown(board)
    if board["pairwise"]:
        out += [
            "## Pairwise",
            "",
            f"A is the better-ranked run. Interval: paired bootstrap over questions ({m['bootstrap_resamples']} "
            f"resamples, seed {m['bootstrap_seed']}); p: exact McNemar, two-sided († with repeats: a paired sign-flip test on per-question means), Holm-adjusted across the "
            f"{sum(p['p_value'] is not None for p in board['pairwise'])} tested pairs.",
            "",
            _md_row(PAIR_HEADERS),
            _md_row(["---", "---", "---:", "---:", "---:", "---:"]),
        ]
        out += [_md_row(pair_cells(p)) for p in board["pairwise"]]
        out.append("")
    return "\n".join(out)


def _md_row(cells: list[str]) -> str:
    """A table row of cells already made safe (data text through md_text; the bundle's own text has no
    `|`, so escaping here again would double the escapes)."""
    return "| " + " | ".join(cells) + " |"


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


def verdict_detail(block: PublishedBlock) -> str:
    """What goes beside the verdict: the smallest difference the test detects here, or why no test."""
    if block.get("verdict") in (NOT_COMPARABLE, None):
        return block.get("not_comparable") or "no test"
    md = block.get("min_detectable")
    return "" if md is None else f"smallest detectable: {md:.1f} points"


def verdict_text(block: PublishedBlock) -> str:
    """The verdict with its detail: "differs (smallest detectable: 9.0 points)", "not comparable: why"."""
    word, detail = block.get("verdict") or NOT_COMPARABLE, verdict_detail(block)
    if word == NOT_COMPARABLE:
        return f"{word}: {detail}"
    return f"{word} ({detail})" if detail else word


def published_mark(e: BoardEntry) -> tuple[str, str]:
    """The run's row, beside its accuracy: the published accuracy with the verdict, and the classes
    that differ from the published ones (p_holm < 0.05), which a collapsed section alone would hide."""
    pub = e.get("published")
    if not pub:
        return "", ""
    verdict = pub.get("verdict") or NOT_COMPARABLE
    differ = pub.get("classes_differ") or []
    return (
        f"published {pct(pub['accuracy'])}: {verdict}",
        f"class{'es' if len(differ) > 1 else ''} differ{'' if len(differ) > 1 else 's'}: {', '.join(differ)}"
        if differ
        else "",
    )


def _difference(block: PublishedBlock) -> str:
    d, c = block.get("difference"), block.get("difference_ci95")
    if d is None:
        return ""
    return f"{100 * d:+.2f}" + (f" [{100 * c[0]:+.1f}, {100 * c[1]:+.1f}]" if c else "")


def _p(x: Any) -> str:
    return "" if x is None else f"{x:.3g}"


def _published_line(name: str, source: str, b: PublishedBlock) -> list[str]:
    return [
        name,
        md_text(source),
        f"{pct(b['accuracy'])} ({b['correct']} / {b['questions']})",
        f"{pct(b['reproduced_accuracy'])} ({b['reproduced_correct']} / {b['reproduced_questions']})",
        _difference(b),
        _p(b.get("p_value")),
        _p(b.get("p_holm")),
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
        _md_row(PUBLISHED_HEADERS),
        _md_row(["---", "---", "---:", "---:", "---:", "---:", "---:", "---"]),
    ]
    notes = []
    for e in runs:
        pub = e["published"]
        name = md_text(e["name"])
        out.append(_md_row(_published_line(name, pub.get("source") or "", pub)))
        for cls, b in (pub.get("per_class") or {}).items():
            out.append(_md_row(_published_line(f"{name} · {md_text(cls)}", "", b)))
        notes += [
            f"- {name}: class sizes differ ({md_text(m)})" for m in pub.get("class_size_mismatches") or []
        ]
        notes += [f"- {name}: {md_text(pub['reasoning_note'])}"] if pub.get("reasoning_note") else []
        notes += [f"- {name}: {md_text(pub['note'])}"] if pub.get("note") else []
    return [*out, "", *notes, *([""] if notes else [])]
