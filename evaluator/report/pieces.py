"""The pieces both pages are made of: page frame (assets/page.html), tables, cells, filters."""

from __future__ import annotations

import base64
import json
import string
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from evaluator.core.boundary import clip
from evaluator.core.values import is_int, is_num
from evaluator.data.benchmarks.base import Benchmark
from evaluator.report.base import (
    CSP,
    PLOT_CAPTIONS,
    PLOT_MAX_BYTES,
    SCORES_DIR,
    STATUS_LABELS,
    _asset,
    _attr_name,
    _ci,
    _e,
    _group_values,
    _key,
    _members,
    _now,
    _pct,
    _version,
    answer_of,
    clip_text,
    error_of,
    fallback_of,
    outcome,
)
from evaluator.report.pagedata import (
    PageData,
)

# ----------------------------------------------------------------------------- page pieces


_BODY_SLOT = "\x00body\x00"


def page(title: str, body: list[str], images: dict[str, str], footer: str) -> str:
    """A whole page: assets/page.html around the body (its parts joined by newlines), with the
    stylesheet, script and images inline. The body is joined once, straight into the page: at 100k rows
    it is hundreds of MB, so it is never copied into the template and out again."""
    blob = json.dumps(images, separators=(",", ":")).replace("</", "<\\/")
    frame = string.Template(_asset("page.html")).substitute(
        csp=_e(CSP),
        title=_e(title),
        css=_asset("report.css"),
        body=_BODY_SLOT,
        footer=footer,
        images=blob,
        script=_asset("report.js").replace("</", "<\\/"),
    )
    head, tail = frame.split(_BODY_SLOT)
    parts = list(body) or [""]
    parts[0] = head + parts[0]
    parts[-1] = parts[-1] + tail
    return "\n".join(parts)


def _footer() -> str:
    return (
        f"Written by doccount-eval {_e(_version())} on {_e(_now())}. Self-contained page: styles, script and "
        "images are inline and its Content-Security-Policy forbids any network request. Thumbnails are "
        "downscaled copies made for this page; the evaluated images are the original bytes of the data files."
    )


def _meta(items: list[tuple[str, str]]) -> str:
    """A definition list; values are already HTML."""
    return '<dl class="meta">' + "".join(f"<dt>{_e(k)}</dt><dd>{v}</dd>" for k, v in items) + "</dl>\n"


def _headline(summary: dict[str, Any]) -> str:
    p = summary.get("primary") if isinstance(summary.get("primary"), dict) else {}
    extra = summary.get("extra_metrics") if isinstance(summary.get("extra_metrics"), dict) else {}
    parts = [
        '<div class="headline">',
        f'<div><div class="sub">exact-count accuracy</div><div class="big" id="headline-accuracy">{_pct(p.get("accuracy"))}</div></div>',
        *(
            _repeat_headline(summary)
            if _repeats_of(summary) > 1
            else (
                f'<div><div class="sub">correct / all questions</div><div class="num">{_e(p.get("correct"))} / {_e(p.get("questions"))}</div></div>',
                f'<div><div class="sub">95% Wilson interval</div><div class="num">{_ci(p.get("ci95"))}</div></div>',
            )
        ),
    ]
    for k, v in extra.items():
        parts.append(
            f'<div><div class="sub">{_e(k.replace("_", " "))}</div><div class="num">{_pct(v)}</div></div>'
        )
    parts.append("</div>")
    parts.append(
        '<p class="sub">Every question of the run is in the denominator: parse failures, request errors, data '
        "errors and missing rows count as wrong.</p>"
    )
    return "\n".join(parts) + "\n"


def _repeats_of(summary: dict[str, Any]) -> int:
    r = summary.get("repeats")
    k = r.get("k") if isinstance(r, dict) else 1
    return k if is_int(k) and k > 1 else 1


def _repeat_headline(summary: dict[str, Any]) -> list[str]:
    p, r = summary["primary"], summary["repeats"]
    a = r["agreement"]
    return [
        f'<div><div class="sub">mean of {r["k"]} repeats; correct / (questions x repeats)</div><div class="num">'
        f"{_e(p.get('correct'))} / {_e(p.get('responses'))}</div></div>",
        f'<div><div class="sub">95% question-cluster bootstrap</div><div class="num">{_ci(p.get("ci95"))}</div></div>',
        f'<div><div class="sub">per-repeat accuracies</div><div class="num">'
        f"{', '.join(_pct(x['accuracy']) for x in r['per_repeat'])}</div></div>",
        f'<div><div class="sub">questions always / sometimes / never right</div><div class="num">'
        f"{a['always_right']} / {a['sometimes_right']} / {a['never_right']}</div></div>",
    ]


def _outcome_pills(rows: list[dict[str, Any]]) -> str:
    c = Counter(outcome(r) for r in rows)
    pills = "".join(
        f'<span class="pill"><span class="badge st-{k}">{_e(label)}</span> {c.get(k, 0)}</span>'
        for k, label in STATUS_LABELS.items()
    )
    return f'<div class="pills">{pills}</div>\n'


def _group_tables(summary: dict[str, Any]) -> str:
    groups = summary.get("groups") if isinstance(summary.get("groups"), dict) else {}
    out = []
    for name, g in groups.items():
        if not isinstance(g, dict):
            continue
        values = g.get("values") or {}
        label = "Class" if name == "target_class" else name
        extra_keys = sorted({k for v in values.values() for k in (v.get("extra_metrics") or {})})
        note = " (a question counts once in each of its values)" if g.get("multi_valued") else ""
        out.append(f"<h2>Accuracy by {_e(label.lower() if label == 'Class' else label)}{_e(note)}</h2>")
        head = "".join(f"<th>{_e(k.replace('_', ' '))}</th>" for k in extra_keys)
        out.append(
            f'<table class="stats group-table" data-group="{_e(name)}"><thead><tr><th>{_e(label)}</th><th>questions</th>'
            f"<th>correct</th><th>accuracy</th><th>95% CI</th><th>not answered</th>{head}</tr></thead><tbody>"
        )
        for key in g.get("order") or list(values):
            v = values.get(key) or {}
            oc = v.get("outcomes") or {}
            unanswered = (v.get("questions") or 0) - (oc.get("ok") or 0) if oc else ""
            cells = "".join(f"<td>{_pct((v.get('extra_metrics') or {}).get(k))}</td>" for k in extra_keys)
            out.append(
                f"<tr><td>{_e(key)}</td><td>{_e(v.get('questions'))}</td><td>{_e(v.get('correct'))}</td>"
                f"<td>{_pct(v.get('accuracy'))}</td><td>{_ci(v.get('ci95'))}</td><td>{_e(unanswered)}</td>{cells}</tr>"
            )
        out.append("</tbody></table>")
    return "\n".join(out) + "\n"


def _anatomy(summary: dict[str, Any]) -> str:
    e = summary.get("error_anatomy")
    if not isinstance(e, dict):
        return ""

    def num(x: Any) -> str:
        return "n/a" if not is_num(x) else (str(x) if is_int(x) else f"{x:.2f}")

    return (
        f"<h2>Error anatomy (over the {_e(e.get('parsed'))} parsed answers)</h2>"
        '<table class="stats"><thead><tr><th>MAE</th><th>median abs. error</th><th>mean signed error</th>'
        "<th>exact</th><th>over-count</th><th>under-count</th><th>off by one</th></tr></thead><tbody><tr>"
        f"<td>{num(e.get('mean_absolute_error'))}</td><td>{num(e.get('median_absolute_error'))}</td>"
        f"<td>{num(e.get('mean_signed_error'))}</td><td>{_pct(e.get('exact_rate'))}</td>"
        f"<td>{_pct(e.get('over_count_rate'))}</td><td>{_pct(e.get('under_count_rate'))}</td>"
        f"<td>{_pct(e.get('off_by_one_rate'))}</td></tr></tbody></table>\n"
    )


def _plots(run_root: Path) -> tuple[str, list[str]]:
    scores = run_root / SCORES_DIR
    pngs = sorted(scores.glob("*.png")) if scores.is_dir() else []
    if not pngs:
        return "", ["No plots were found under scores/ (run `doccount score` first to draw them)."]
    figs = []
    notes = []
    known = [p for p in pngs if p.name in PLOT_CAPTIONS] + [p for p in pngs if p.name not in PLOT_CAPTIONS]
    for p in known:
        try:
            data = p.read_bytes()
        except OSError as exc:
            notes.append(f"plot {p.name} could not be read ({exc.strerror})")
            continue
        if len(data) > PLOT_MAX_BYTES or not data.startswith(b"\x89PNG"):
            notes.append(
                f"plot {p.name} was left out (not a PNG, or larger than {PLOT_MAX_BYTES // 1_000_000} MB)"
            )
            continue
        url = "data:image/png;base64," + base64.b64encode(data).decode("ascii")
        cap = PLOT_CAPTIONS.get(p.name, p.name)
        figs.append(
            f'<figure><img class="plot" src="{url}" alt="{_e(cap)}"><figcaption>{_e(cap)}</figcaption></figure>'
        )
    return ('<h2>Plots</h2><div class="plots">' + "".join(figs) + "</div>\n") if figs else "", notes


def _notes(notes: list[str], cls: str = "") -> str:
    if not notes:
        return ""
    items = "".join(f"<li>{_e(n)}</li>" for n in notes)
    return f'<div class="notes {cls}" id="notes-{cls or "warn"}"><ul>{items}</ul></div>\n'


def _select(attr: str, label: str, options: list[tuple[str, str]], is_filter: bool = True) -> str:
    opts = "".join(f'<option value="{_e(v)}">{_e(t)}</option>' for v, t in options)
    data = f'data-filter="{_e(attr)}" id="filter-{_e(attr)}"' if is_filter else f'id="{_e(attr)}"'
    return f"<label>{_e(label)} <select {data}>{opts}</select></label>"


def _group_filters(
    benchmark: Benchmark, summary: dict[str, Any], rows_groups: list[dict[str, Any]]
) -> list[str]:
    out = []
    sgroups = summary.get("groups") if isinstance(summary.get("groups"), dict) else {}
    for name in benchmark.group_fields:
        counts: Counter[str] = Counter()
        for g in rows_groups:
            counts.update(_group_values(g, name))
        order = [_key(v) for v in (sgroups.get(name) or {}).get("order") or []]
        order = [v for v in order if v in counts] + sorted(set(counts) - set(order))
        label = "class" if name == "target_class" else name
        options = [("", "all")] + [(v, f"{v} ({counts[v]})") for v in order]
        out.append(_select("g-" + _attr_name(name), label, options))
    return out


def _group_text(benchmark: Benchmark, groups: dict[str, Any]) -> str:
    if list(benchmark.group_fields) == ["target_class"]:
        return _e(groups.get("target_class"))
    parts = []
    for name in benchmark.group_fields:
        parts.append(f"{_e(name)}: {_e(', '.join(_group_values(groups, name)))}")
    return " · ".join(parts)


def _group_header(benchmark: Benchmark) -> str:
    return (
        "class and question" if list(benchmark.group_fields) == ["target_class"] else "subgroups and question"
    )


def _group_attrs(benchmark: Benchmark, groups: dict[str, Any]) -> str:
    return "".join(
        f' data-f-g-{_attr_name(name)}="{_e(_members(_group_values(groups, name)))}"'
        for name in benchmark.group_fields
    )


def _thumb(page: PageData, sid: str, caption: str) -> str:
    key = page.image_key.get(sid)
    if key:
        return (
            f'<img class="thumb" data-img="{key}" alt="page {_e(sid)}" title="click to enlarge" '
            f'data-caption="{_e(caption)}" decoding="async">'
        )
    reason = "no image" if page.images_requested else "images off"
    return f'<div class="noimg">{reason}</div>'


def _text_block(text: Any, cls: str, empty: str) -> str:
    if not isinstance(text, str) or not text:
        return f'<span class="none">{_e(empty)}</span>'
    clipped, omitted = clip_text(text)
    extra = " long" if omitted else ""
    return f'<pre class="{cls} searchable{extra}">{_e(clipped)}</pre>'


def _reasoning_block(text: Any, label: str = "reasoning") -> str:
    if not isinstance(text, str) or not text:
        return ""
    clipped, omitted = clip_text(text)
    note = f", {omitted:,} omitted" if omitted else ""
    return (
        f"<details><summary>{_e(label)} ({len(text):,} characters{note})</summary>"
        f'<pre class="reasoning searchable">{_e(clipped)}</pre></details>'
    )


def _status_cell(row: dict[str, Any]) -> str:
    oc = outcome(row)
    bits = [f'<span class="badge st-{oc}">{_e(STATUS_LABELS[oc])}</span>']
    if oc == "parse_failure":
        bits.append(f'<span class="detail">parse: {_e(row.get("parse_status"))}</span>')
    if row.get("finish_reason") and row.get("finish_reason") != "stop":
        bits.append(f'<span class="detail">finish: {_e(row.get("finish_reason"))}</span>')
    if oc == "request_error" and row.get("request_error"):
        bits.append(f'<span class="detail">{_e(clip(str(row["request_error"]), 400))}</span>')
    if row.get("data_error"):
        bits.append(f'<span class="detail">{_e(clip(str(row["data_error"]), 400))}</span>')
    attempts = row.get("attempts")
    if is_int(attempts) and attempts > 1:
        bits.append(f'<span class="detail">{attempts} HTTP attempts</span>')
    earlier = row.get("earlier_attempts") or []
    if earlier:
        bits.append(f'<span class="detail">{len(earlier)} earlier response(s) re-sampled</span>')
    if "record_ground_truth" in row:
        bits.append(f'<span class="detail">record said truth {_e(row.get("record_ground_truth"))}</span>')
    return "".join(bits)


def _usage(row: dict[str, Any]) -> tuple[str, float | None, float | None]:
    lat = row.get("latency_s")
    u = row.get("usage") if isinstance(row.get("usage"), dict) else {}
    p, c, t = u.get("prompt_tokens"), u.get("completion_tokens"), u.get("total_tokens")
    parts = []
    if is_num(lat):
        parts.append(f"{lat:.1f} s")
    if any(is_num(x) for x in (p, c, t)):
        parts.append(
            f'<span class="detail" title="prompt / completion / total tokens">'
            f"{_e(p if p is not None else '–')} / {_e(c if c is not None else '–')} / {_e(t if t is not None else '–')} tok</span>"
        )
    return (
        "".join(parts) or '<span class="none">–</span>',
        lat if is_num(lat) else None,
        c if is_num(c) else None,
    )


def _answer_cell(row: dict[str, Any], benchmark: Benchmark) -> str:
    a = answer_of(row)
    fb = fallback_of(row, benchmark)
    main = f'<span class="num">{a}</span>' if a is not None else '<span class="none">none</span>'
    return (
        main
        + f'<span class="fb" title="diagnostic last-integer fallback, not the score">fallback: {_e(fb if fb is not None else "–")}</span>'
    )


def _error_cell(row: dict[str, Any]) -> str:
    err = error_of(row)
    if err is None:
        return '<span class="none">–</span>'
    if err == 0:
        return '<span class="num">0</span>'
    cls = "err-over" if err > 0 else "err-under"
    return f'<span class="num {cls}">{err:+d}</span>'


def _fmt_float(x: float | None) -> str:
    return "" if x is None else f"{x:g}"


def _counts(rows: list[dict[str, Any]], fn: Callable[[dict[str, Any]], str]) -> Counter[str]:
    return Counter(fn(r) for r in rows)


def _controls(selects: list[str], sort_options: list[tuple[str, str]], search_label: str) -> str:
    return (
        '<nav class="controls" id="controls">'
        + "".join(selects)
        + _select("sort", "sort", sort_options, is_filter=False)
        + f'<label>search <input type="search" id="search" placeholder="{_e(search_label)}"></label>'
        + '<button type="button" id="reset">reset</button><span id="shown"></span></nav>\n'
    )
