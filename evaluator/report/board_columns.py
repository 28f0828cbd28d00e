"""The leaderboard's columns, each declared once (heading, alignment, cell) and rendered by both the page
(index.html: its narrow table and its table of every column) and leaderboard.md (every column), so the two
always show the same table.

A cell is data: text, the number that can be "best", a second line, a note. The page draws each part
(autoescaped); Markdown writes them in one cell (text, then the second line, then the notes in brackets),
each part that holds text from a run folder, a sweep file or a server through core.text.md_text (the cell
names those parts in `data`; the bundle's own words and numbers have no `|` and stay as they are), the
report link through core.text.safe_href.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Literal, NamedTuple, TypedDict

from evaluator.core.text import md_text, safe_href
from evaluator.core.vocab import NOT_COMPARABLE
from evaluator.scoring.board import Board, BoardColumn, BoardEntry, PublishedBlock


class Cell(TypedDict, total=False):
    """One table cell: text, sub (a second line), title (on hover), href; value: the number that can be
    "best" (bold); note and flag: said beside the value; cls and best are set by the page."""

    text: str | int
    value: float | None
    sub: str
    title: str
    href: str
    note: str
    flag: str
    cls: str
    best: bool
    data: tuple[str, ...]  # the parts (text, sub, note, flag) holding outside text: escaped in Markdown


class Column(NamedTuple):
    heading: str
    align: Literal["num", "txt"]
    cell: Callable[[BoardEntry], Cell]
    main: bool = False  # in the page's narrow table (what a reader compares, within 1280 pixels)
    full: bool = True  # in every-column table of the page and in leaderboard.md
    outside_heading: bool = False  # the heading is a group value from the data


def cell(
    text: str | int,
    value: float | None = None,
    sub: str = "",
    title: str = "",
    href: str = "",
    note: str = "",
    flag: str = "",
    data: tuple[str, ...] = (),
) -> Cell:
    return Cell(text=text, value=value, sub=sub, title=title, href=href, note=note, flag=flag, data=data)


def pct(x: float | None) -> str:
    return "" if x is None else f"{100 * x:.2f}"


def ci(c: Sequence[float] | None) -> str:
    return "" if not c else f"[{100 * c[0]:.1f}, {100 * c[1]:.1f}]"


def p_text(x: float | None) -> str:
    return "" if x is None else f"{x:.3g}"


def usd(x: float | None) -> str:
    return "" if x is None else f"{x:.4f}" if x < 1 else f"{x:.2f}"


def columns(board: Board) -> list[Column]:
    """Every column of the leaderboard, in order."""
    cols = [
        Column("Rank", "txt", lambda e: cell(e["rank"]), main=True),
        Column("Run / model", "txt", _run_model_cell, main=True, full=False),
        Column(
            "Run", "txt", lambda e: cell(e["name"] + (" (batch)" if e.get("batch") else ""), data=("text",))
        ),
        Column(
            "Model / provider", "txt", lambda e: cell(e["model"], sub=e["provider"], data=("text", "sub"))
        ),
        Column("Correct", "num", lambda e: cell(f"{e['correct']} / {e.get('responses', e['questions'])}")),
        Column("Accuracy % [95% CI]", "num", _accuracy_cell, main=True),
    ]
    cols += [Column(_metric_heading(k), "num", _extra_cell(k), main=True) for k in extra_metric_names(board)]
    if any("repeats" in e for e in board["runs"]):
        cols.append(Column("Mean ± sd over repeats", "num", _repeats_cell))
    cols += [
        Column(column_label(board, c), "num", _group_cell(c["field"], c["value"]), True, outside_heading=True)
        for c in board["columns"]
    ]
    cols += [
        Column(head, "num", _outcome_cell(key))
        for head, key in (
            ("Parse failures", "parse_failure"),
            ("Cut off", "cut_off"),
            ("Request errors", "request_error"),
            ("Missing", "missing"),
        )
    ]
    return cols + [
        Column("Timeouts last / answered after", "num", _timeouts_cell),
        Column("Tokens prompt / completion / reasoning", "num", _tokens_cell),
        Column("Cost USD", "num", lambda e: cell(cost_cell(e)), main=True),
        Column("Latency s median / p95", "num", lambda e: cell(latency(e)), main=True),
        Column("Reasoning declared / seen", "txt", reasoning_cell, main=True),
        Column("Complete", "txt", _complete_cell, main=True),
        Column("Report", "txt", _report_cell),
    ]


def markdown_table(board: Board) -> list[str]:
    """leaderboard.md's table: every column, a row per run."""
    cols = [c for c in columns(board) if c.full]
    head = [md_text(c.heading) if c.outside_heading else c.heading for c in cols]
    rule = ["---:" if c.align == "num" else "---" for c in cols]
    rows = [[markdown_cell(c.cell(e)) for c in cols] for e in board["runs"]]
    return [md_row(r) for r in (head, rule, *rows)]


def markdown_cell(c: Cell) -> str:
    """A cell as Markdown: its link, or its text, second line and notes in one table cell."""
    outside = c.get("data", ())
    parts = {key: "" if c.get(key) is None else str(c.get(key)) for key in ("text", "sub", "note", "flag")}
    parts = {key: md_text(text) if key in outside else text for key, text in parts.items()}
    if c.get("href"):
        return f"[{parts['text']}]({c['href']})"
    text = " ".join(x for x in (parts["text"], parts["sub"]) if x)
    notes = "; ".join(x for x in (parts["note"], parts["flag"]) if x)
    return f"{text} ({notes})" if notes else text


def md_row(cells: list[str]) -> str:
    """A table row of cells already made safe (escaping here again would double the escapes)."""
    return "| " + " | ".join(cells) + " |"


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


def _metric_heading(key: str) -> str:
    return f"{key.replace('_', ' ').capitalize()} %"


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


def reasoning_cell(e: BoardEntry) -> Cell:
    """The declared mode and the share of answered responses that showed reasoning (no "best": not a score)."""
    r = e.get("reasoning")
    declared, share = (r["declared"], r["observed_share"]) if r else (None, None)
    if r and r.get("observable") is False:  # the provider cannot show reasoning: nothing to see
        title = f"declared {declared or 'nothing'}; the provider returns no reasoning text or tokens"
        return cell(f"{declared or '–'} (not observable)", title=title, data=("text",))
    seen = "no answers" if share is None else f"{100 * share:.0f}% seen"
    title = f"declared {declared or 'nothing'}; " + (
        "no answered responses"
        if share is None
        else f"{100 * share:.1f}% of answered responses showed reasoning"
    )
    return cell(declared or "–", sub=seen, title=title, data=("text",))


def _run_model_cell(e: BoardEntry) -> Cell:
    href = safe_href(e["report"]) if e["report"] else ""
    return cell(e["name"], href=href, sub=f"{e['model']} · {e['provider']}")


def _accuracy_cell(e: BoardEntry) -> Cell:
    note, flag = published_mark(e)
    return cell(pct(e["accuracy"]), e["accuracy"], sub=ci(e["ci95"]), note=note, flag=flag, data=("flag",))


def _complete_cell(e: BoardEntry) -> Cell:
    return cell("yes" if e["complete"] else f"no ({e['state']})" if e.get("state") else "no", data=("text",))


def _repeats_cell(e: BoardEntry) -> Cell:
    r = e.get("repeats")
    if not r:
        return cell("")
    sd = "" if r["sd"] is None else f" ± {100 * r['sd']:.2f}"
    return cell(f"{pct(r['mean'])}{sd} (K={r['k']})")


def _outcome_cell(key: str) -> Callable[[BoardEntry], Cell]:
    def one(e: BoardEntry) -> Cell:
        return cell(e["outcomes"][key])

    return one


def _extra_cell(key: str) -> Callable[[BoardEntry], Cell]:
    def one(e: BoardEntry) -> Cell:
        value = (e.get("extra_metrics") or {}).get(key)
        return cell(pct(value), value)

    return one


def _group_cell(field: str, value: str) -> Callable[[BoardEntry], Cell]:
    def one(e: BoardEntry) -> Cell:
        block = e["per_group"][field][value]
        return cell(pct(block["accuracy"]), block["accuracy"], title=ci(block["ci95"]))

    return one


def _timeouts_cell(e: BoardEntry) -> Cell:
    """Rows whose last attempt timed out / rows answered only after a timed-out attempt ("" for a board
    written before entries carried them)."""
    t = e.get("timeouts")
    text = f"{t['last_attempt_timed_out']} / {t['answered_after_timeout']}" if t else ""
    title = "rows whose last attempt timed out / rows answered only after a timed-out attempt"
    return cell(text, title=title)


def _tokens_cell(e: BoardEntry) -> Cell:
    t = e["tokens"]
    full = f"prompt {t['prompt']:,}, completion {t['completion']:,}, reasoning {t['reasoning']:,}"
    full += f", cached {t['cached']:,}, of failed attempts {t['failed_attempts']:,}"
    return cell(" / ".join(f"{t[k]:,}" for k in ("prompt", "completion", "reasoning")), title=full)


def verdict_detail(block: PublishedBlock) -> str:
    """What goes beside the verdict: the smallest difference the test detects here, or why no test."""
    if block.get("verdict") in (NOT_COMPARABLE, None):
        return block.get("not_comparable") or "no test"
    md = block.get("min_detectable")
    return "" if md is None else f"smallest detectable: {md:.1f} points"


def _report_cell(e: BoardEntry) -> Cell:
    return cell("report", href=safe_href(e["report"])) if e["report"] else cell("")
