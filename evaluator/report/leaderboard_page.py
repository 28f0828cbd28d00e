"""The leaderboard page (index.html): the runs in rank order, then the pairwise matrix.

Built in the report's page frame (evaluator.report.pieces.page: its stylesheet inline, its
Content-Security-Policy that forbids any network request); the only links are to each run's own
report, relative to the page.
"""

from __future__ import annotations

from typing import Any

from evaluator.report.base import _e, _now, _version
from evaluator.report.leaderboard_markdown import ci, column_label, extra_metric_names, pct, usd
from evaluator.report.pieces import page

STYLE = """<style>
table.board td.num, table.board th.num { text-align: right; font-variant-numeric: tabular-nums; }
table.board td { white-space: nowrap; }
table.board th { white-space: normal; vertical-align: bottom; max-width: 8em; }
table.board { font-size: 0.9em; }
table.board th, table.board td { padding: 4px 7px; }
table.board td .sub { display: block; font-size: 0.85em; color: var(--muted); }
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
        "exact two-sided McNemar (runs with repeats: a paired sign-flip test on per-question means), "
        "Holm-adjusted across the pairs (shaded below 0.05). Runs over different question sets are not "
        "compared.</p>",
        "</section>",
    ]
    footer = (
        f"Written by doccount-eval {_e(_version())} on {_e(_now())}. Self-contained page: nothing is loaded "
        "from the network; the numbers are in leaderboard.json next to it."
    )
    return page(title, body, {}, footer)


Column = tuple[str, str, Any]  # header, css class, cell(entry) -> (html, number or None for "best")


def columns(board: dict[str, Any]) -> list[Column]:
    """The page's columns: narrower than the Markdown table (model and host in one cell, short numbers)."""
    cols: list[Column] = [
        ("Rank", "txt", lambda e: (str(e["rank"]), None)),
        ("Run", "txt", lambda e: (_e(e["name"]), None)),
        (
            "Model / provider",
            "txt",
            lambda e: (f'{_e(e["model"])}<br><span class="sub">{_e(e["provider"])}</span>', None),
        ),
        ("Correct", "num", lambda e: (f"{e['correct']} / {e.get('responses', e['questions'])}", None)),
        (
            "Accuracy % [95% CI]",
            "num",
            lambda e: (f'{pct(e["accuracy"])} <span class="sub">{_e(ci(e["ci95"]))}</span>', e["accuracy"]),
        ),
    ]
    for k in extra_metric_names(board):
        cols.append((f"{k.replace('_', ' ').capitalize()} %", "num", _extra_cell(k)))
    if any("repeats" in e for e in board["runs"]):
        cols.append(("Mean ± sd over repeats", "num", _repeats_cell))
    for c in board["columns"]:
        cols.append((column_label(board, c), "num", _group_cell(c["field"], c["value"])))
    for head, key in (
        ("Parse failures", "parse_failure"),
        ("Cut off", "cut_off"),
        ("Request errors", "request_error"),
        ("Missing", "missing"),
    ):
        cols.append((head, "num", lambda e, key=key: (str(e["outcomes"][key]), None)))
    cols += [
        ("Tokens prompt / completion / reasoning", "num", _tokens_cell),
        ("Cost USD", "num", lambda e: (_e(usd(e["cost_usd"])), None)),
        (
            "Complete",
            "txt",
            lambda e: (
                "yes" if e["complete"] else _e(f"no ({e['state']})" if e.get("state") else "no"),
                None,
            ),
        ),
        ("Report", "txt", lambda e: (f'<a href="{_e(e["report"])}">report</a>' if e["report"] else "", None)),
    ]
    return cols


def _repeats_cell(e: dict[str, Any]) -> tuple[str, None]:
    r = e.get("repeats")
    if not r:
        return "", None
    sd = "" if r["sd"] is None else f" ± {100 * r['sd']:.2f}"
    return _e(f"{pct(r['mean'])}{sd} (K={r['k']})"), None


def _extra_cell(key: str) -> Any:
    def cell(e: dict[str, Any]) -> tuple[str, float | None]:
        value = (e.get("extra_metrics") or {}).get(key)
        return pct(value), value

    return cell


def _group_cell(field: str, value: str) -> Any:
    def cell(e: dict[str, Any]) -> tuple[str, float | None]:
        block = e["per_group"][field][value]
        return f'<span title="{_e(ci(block["ci95"]))}">{pct(block["accuracy"])}</span>', block["accuracy"]

    return cell


def _tokens_cell(e: dict[str, Any]) -> tuple[str, None]:
    t = e["tokens"]
    full = f"prompt {t['prompt']:,}, completion {t['completion']:,}, reasoning {t['reasoning']:,}"
    full += f", cached {t['cached']:,}, of failed attempts {t['failed_attempts']:,}"
    short = " / ".join(_short(t[k]) for k in ("prompt", "completion", "reasoning"))
    return f'<span title="{_e(full)}">{short}</span>', None


def _short(n: int) -> str:
    return f"{n:,}" if n < 10_000 else f"{n / 1000:.1f}k" if n < 1_000_000 else f"{n / 1e6:.2f}M"


def runs_table(board: dict[str, Any]) -> str:
    cols = columns(board)
    cells = [[cell(e) for _, _, cell in cols] for e in board["runs"]]
    best = []  # the best value of each accuracy column, bold as in the paper's Table 5
    for j in range(len(cols)):
        values = [row[j][1] for row in cells if row[j][1] is not None]
        best.append(max(values) if len(values) > 1 else None)
    out = ['<table class="stats board" id="board">', "<thead><tr>"]
    out += [f'<th class="{cls}">{_e(head)}</th>' for head, cls, _ in cols]
    out.append("</tr></thead><tbody>")
    for e, row in zip(board["runs"], cells, strict=True):
        tds = [
            f'<td class="{cls}{" best" if best[j] is not None and v == best[j] else ""}">{html}</td>'
            for j, ((_, cls, _), (html, v)) in enumerate(zip(cols, row, strict=True))
        ]
        row_cls = "" if e["complete"] else ' class="incomplete"'
        out.append(f'<tr data-run="{_e(e["name"])}"{row_cls}>' + "".join(tds) + "</tr>")
    out.append("</tbody></table>")
    return "\n".join(out)


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
    test = " (sign-flip)" if p.get("p_test") == "sign_flip" else ""
    ptext = "p n/a" if p["p_value"] is None else f"p {p['p_value']:.3g}{test}, Holm {holm:.3g}"
    cls = ' class="sig"' if holm is not None and holm < 0.05 else ""
    return (
        f'<td{cls} data-a="{_e(p["a"])}" data-b="{_e(p["b"])}">{100 * p["difference"]:+.1f} '
        f'<span class="sub">[{100 * lo:+.1f}, {100 * hi:+.1f}]</span><span class="p">{_e(ptext)}</span></td>'
    )
