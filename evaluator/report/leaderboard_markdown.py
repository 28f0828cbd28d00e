"""The leaderboard as text: its table cells (shared with the page) and leaderboard.md."""

from __future__ import annotations

from typing import Any


def pct(x: Any) -> str:
    return "" if x is None else f"{100 * x:.2f}"


def ci(c: Any) -> str:
    return "" if not c else f"[{100 * c[0]:.1f}, {100 * c[1]:.1f}]"


def usd(x: Any) -> str:
    return "" if x is None else f"{x:.4f}" if x < 1 else f"{x:.2f}"


def column_label(board: dict[str, Any], col: dict[str, str]) -> str:
    fields = {c["field"] for c in board["columns"]}
    return col["value"] if len(fields) == 1 else f"{col['field']}={col['value']}"


def extra_metric_names(board: dict[str, Any]) -> list[str]:
    """The benchmark's other metrics (CountQA: relaxed accuracy), a column each."""
    return sorted({k for e in board["runs"] for k in e.get("extra_metrics") or {}})


def board_headers(board: dict[str, Any]) -> list[str]:
    repeats = any("repeats" in e for e in board["runs"])
    head = ["Rank", "Run", "Model", "Provider", "Correct", "Accuracy % [95% CI]"]
    head += [f"{k.replace('_', ' ').capitalize()} %" for k in extra_metric_names(board)]
    head += ["Mean ± sd (repeats)"] if repeats else []
    head += [column_label(board, c) for c in board["columns"]]
    head += [
        "Parse failures",
        "Cut off",
        "Request errors",
        "Missing",
        "Tokens prompt / completion / reasoning",
    ]
    return head + ["Cost USD", "Complete", "Report"]


def run_cells(board: dict[str, Any], e: dict[str, Any], link: bool = True) -> list[str]:
    """One run's cells in the order of board_headers (plain text; the report as a Markdown link)."""
    repeats = any("repeats" in x for x in board["runs"])
    o, t = e["outcomes"], e["tokens"]
    denom = e.get("responses", e["questions"])
    cells = [str(e["rank"]), e["name"], str(e["model"]), e["provider"], f"{e['correct']} / {denom}"]
    cells.append(f"{pct(e['accuracy'])} {ci(e['ci95'])}".strip())
    cells += [pct((e.get("extra_metrics") or {}).get(k)) for k in extra_metric_names(board)]
    if repeats:
        r = e.get("repeats")
        sd = "" if not r or r["sd"] is None else f" ± {100 * r['sd']:.2f}"
        cells.append(f"{pct(r['mean'])}{sd} (K={r['k']})" if r else "")
    cells += [pct(e["per_group"][c["field"]][c["value"]]["accuracy"]) for c in board["columns"]]
    cells += [str(o["parse_failure"]), str(o["cut_off"]), str(o["request_error"]), str(o["missing"])]
    cells.append(f"{t['prompt']:,} / {t['completion']:,} / {t['reasoning']:,}")
    cells.append(usd(e["cost_usd"]))
    cells.append("yes" if e["complete"] else f"no ({e['state']})" if e.get("state") else "no")
    cells.append(f"[report]({e['report']})" if e["report"] and link else e["report"] or "")
    return cells


def pair_cells(p: dict[str, Any]) -> list[str]:
    if not p["comparable"]:
        return [p["a"], p["b"], "", f"not comparable: {p['reason']}", "", ""]
    lo, hi = p["difference_ci95"] or (None, None)
    diff = f"{100 * p['difference']:+.2f}" + (
        f" [{100 * lo:+.1f}, {100 * hi:+.1f}]" if lo is not None else ""
    )
    pv = "n/a" if p["p_value"] is None else f"{p['p_value']:.4g}" + SIGN_FLIP_MARK.get(p.get("p_test"), "")
    ph = "" if p["p_holm"] is None else f"{p['p_holm']:.4g}"
    return [p["a"], p["b"], str(p["questions"]), diff, pv, ph]


PAIR_HEADERS = ["A", "B", "Questions", "A - B, points [95% CI]", "p (McNemar; † sign-flip)", "p (Holm)"]
SIGN_FLIP_MARK = {"sign_flip": " †"}  # runs with repeats: the sign-flip test on per-question means


def leaderboard_markdown(board: dict[str, Any]) -> str:
    m = board["methods"]
    out = [
        f"# Leaderboard: {board['title']} ({board['benchmark']}, {len(board['runs'])} runs)",
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
    return "| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |"
