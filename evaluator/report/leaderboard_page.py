"""The leaderboard page (index.html): the runs in rank order, then the pairwise matrix.

Built in the report's page frame (evaluator.report.pieces.page: its stylesheet inline, its
Content-Security-Policy that forbids any network request); the only links are to each run's own
report, relative to the page.
"""

from __future__ import annotations

from typing import Any

from evaluator.report.base import _e, _now, _version
from evaluator.report.leaderboard_markdown import board_headers, ci, pct, run_cells
from evaluator.report.pieces import page

STYLE = """<style>
table.board td.num, table.board th.num { text-align: right; font-variant-numeric: tabular-nums; }
table.board td { white-space: nowrap; }
table.board th { white-space: normal; vertical-align: bottom; max-width: 8em; }
table.board { font-size: 0.95em; }
table.board td.txt, table.board th.txt { text-align: left; }
table.board tr.incomplete td:nth-child(2)::after { content: " (incomplete)"; font-size: 0.85em; }
table.board tr.incomplete td { color: var(--warn); }
table.board td.best { font-weight: 700; }
table.matrix td { text-align: center; font-variant-numeric: tabular-nums; min-width: 9em; }
table.matrix td.sig { background: #e6f4ea; }
table.matrix td.na { color: var(--muted); background: var(--panel); }
table.matrix td .p { display: block; color: var(--muted); font-size: 0.85em; }
.scroll { overflow-x: auto; }
</style>"""


def render_page(board: dict[str, Any]) -> str:
    title = f"Leaderboard: {board['title']}"
    body = [
        STYLE,
        '<header class="top">',
        f"<h1>{_e(title)}</h1>",
        f'<p class="sub">{_e(board["benchmark"])}, {len(board["runs"])} runs, ranked by exact-count accuracy over '
        "every question of each run (missing, unparsed and failed answers count as wrong).</p>",
        "</header>",
        "<section>",
        "<h2>Runs</h2>",
        '<div class="scroll">',
        runs_table(board),
        "</div>",
        "<p>Accuracy: 95% Wilson interval (with repeats, question-cluster bootstrap); group columns are "
        "accuracies in %. Cut off: no parsable answer because the output limit was reached, counted apart "
        "from parse (format) failures. Tokens and cost count every recorded attempt, failed ones included; "
        "the cost is blank without a price for the model.</p>",
        "</section>",
        "<section>",
        "<h2>Pairwise differences</h2>",
        '<div class="scroll">',
        matrix(board),
        "</div>",
        f"<p>Cell: accuracy of the row's run minus the column's, in points, with a paired bootstrap 95% interval "
        f"({board['methods']['bootstrap_resamples']} resamples, seed {board['methods']['bootstrap_seed']}); p: "
        "exact two-sided McNemar, Holm-adjusted across the pairs (shaded below 0.05). Runs over different "
        "question sets are not compared.</p>",
        "</section>",
    ]
    footer = (
        f"Written by doccount-eval {_e(_version())} on {_e(_now())}. Self-contained page: nothing is loaded "
        "from the network; the numbers are in leaderboard.json next to it."
    )
    return page(title, body, {}, footer)


def runs_table(board: dict[str, Any]) -> str:
    heads = board_headers(board)
    best = _column_best(board)
    out = ['<table class="stats board" id="board">', "<thead><tr>"]
    out += [f'<th class="{_cls(i, h)}">{_e(h)}</th>' for i, h in enumerate(heads)]
    out.append("</tr></thead><tbody>")
    for e in board["runs"]:
        cells = run_cells(board, e, link=False)
        tds = []
        for i, (head, text) in enumerate(zip(heads, cells, strict=True)):
            cls = _cls(i, head)
            if best.get(head) is not None and _group_value(board, e, head) == best[head]:
                cls += " best"
            if head == "Report":
                text_html = f'<a href="{_e(text)}">report</a>' if text else ""
            elif head.startswith("Accuracy"):
                text_html = f'{_e(pct(e["accuracy"]))} <span class="sub">{_e(ci(e["ci95"]))}</span>'
            else:
                text_html = _e(text)
            tds.append(f'<td class="{cls.strip()}">{text_html}</td>')
        row_cls = "" if e["complete"] else ' class="incomplete"'
        out.append(f'<tr data-run="{_e(e["name"])}"{row_cls}>' + "".join(tds) + "</tr>")
    out.append("</tbody></table>")
    return "\n".join(out)


def _cls(i: int, head: str) -> str:
    return "num" if i >= 4 and head != "Report" else "txt"


def _group_value(board: dict[str, Any], e: dict[str, Any], head: str) -> float | None:
    for c in board["columns"]:
        if head in (c["value"], f"{c['field']}={c['value']}"):
            return e["per_group"][c["field"]][c["value"]]["accuracy"]
    return e["accuracy"] if head.startswith("Accuracy") else None


def _column_best(board: dict[str, Any]) -> dict[str, float | None]:
    """The best value of each accuracy column (bold in the table, as in the paper's Table 5)."""
    heads = [h for h in board_headers(board) if h.startswith("Accuracy")]
    heads += [
        h
        for h in board_headers(board)
        if any(h in (c["value"], f"{c['field']}={c['value']}") for c in board["columns"])
    ]
    best: dict[str, float | None] = {}
    for h in heads:
        values = [v for e in board["runs"] if (v := _group_value(board, e, h)) is not None]
        best[h] = max(values) if len(values) > 1 else None
    return best


def matrix(board: dict[str, Any]) -> str:
    """Rows and columns in rank order; the upper triangle holds each pair (row = A, the better run)."""
    names = [e["name"] for e in board["runs"]]
    pairs = {(p["a"], p["b"]): p for p in board["pairwise"]}
    out = ['<table class="stats matrix" id="pairwise"><thead><tr><th>A \\ B</th>']
    out += [f"<th>{_e(n)}</th>" for n in names[1:]]
    out.append("</tr></thead><tbody>")
    for i, a in enumerate(names[:-1]):
        cells = [f"<th>{_e(a)}</th>"]
        for j, b in enumerate(names[1:], start=1):
            cells.append(_matrix_cell(pairs.get((a, b))) if j > i else '<td class="na"></td>')
        out.append("<tr>" + "".join(cells) + "</tr>")
    out.append("</tbody></table>")
    return "\n".join(out)


def _matrix_cell(p: dict[str, Any] | None) -> str:
    if p is None:
        return '<td class="na"></td>'
    if not p["comparable"]:
        return f'<td class="na" title="{_e(p["reason"])}">not comparable</td>'
    lo, hi = p["difference_ci95"] or (0.0, 0.0)
    holm = p["p_holm"]
    ptext = "p n/a (repeats)" if p["p_value"] is None else f"p {p['p_value']:.3g}, Holm {holm:.3g}"
    cls = ' class="sig"' if holm is not None and holm < 0.05 else ""
    return (
        f'<td{cls} data-a="{_e(p["a"])}" data-b="{_e(p["b"])}">{100 * p["difference"]:+.1f} '
        f'<span class="sub">[{100 * lo:+.1f}, {100 * hi:+.1f}]</span><span class="p">{_e(ptext)}</span></td>'
    )
