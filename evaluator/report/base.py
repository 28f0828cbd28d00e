"""What the report's pages share: constants, small helpers (outcomes come from scoring), and the pages'
Jinja2 environment, which renders each page whole (`render`).

The environment: templates in evaluator/report/templates/ (package data), autoescaping on. Escaping is the
default: a value reaches a page as text unless it is built as markup here (the inline stylesheet, script
and image table, which are the bundle's own files or JSON it wrote). `None` renders as nothing, as a blank
cell. The Content-Security-Policy (`CSP`) allows exactly the inline scripts of the page as rendered (their
SHA-256, computed from the rendered text, so they cannot drift from it).
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
from collections.abc import Callable, Iterable
from datetime import datetime, timezone
from functools import cache
from importlib import resources
from typing import Any

import jinja2
from markupsafe import Markup, escape

from evaluator.core.errors import UserError
from evaluator.core.jsonl import JSONObject, is_int, is_num
from evaluator.core.output import say
from evaluator.data.benchmarks.base import Benchmark
from evaluator.scoring import group_keys, group_value_key
from evaluator.scoring.base import ci_text, pct_text
from evaluator.scoring.row import ScoredRow

REPORT_FILE = "report.html"
IMAGE_PX = 640  # longest side of the embedded copy; shown as a thumbnail, enlarged on click
JPEG_QUALITY = 70
TEXT_KEEP = 12_000  # a longer response or reasoning text keeps this many characters at each end
PLOT_MAX_BYTES = 5_000_000
QUESTION_COLUMN = "question"
ID_COLUMN = "sample_id"
# script-src lists the SHA-256 of each inline script of the page (render fills SCRIPT_HASHES in from
# the rendered text): no 'unsafe-inline', so an injected script or javascript: link does not run
SCRIPT_HASHES = "{script-hashes}"
CSP = (
    f"default-src 'none'; img-src data:; style-src 'unsafe-inline'; script-src {SCRIPT_HASHES}; "
    "base-uri 'none'; form-action 'none'"
)
STATUS_LABELS = {
    "ok": "ok",
    "parse_failure": "parse failure",
    "request_error": "request error",
    "data_error": "data error",
    "missing": "missing",
}
DIRECTION_LABELS = {"over": "over-count", "under": "under-count", "exact": "exact", "none": "no answer"}
PLOT_CAPTIONS = {
    "per_class_accuracy.png": "Accuracy by subgroup, 95% Wilson intervals",
    "predicted_vs_true.png": "Predicted vs true count",
}
VERDICTS = {
    "only_a": "only A right",
    "only_b": "only B right",
    "both_wrong_diff": "both wrong, different answers",
    "both_wrong_same": "both wrong, same answer",
    "both_right": "both right",
    "unpaired": "in one run only",
}
VERDICT_RANK = {
    "only_a": 0,
    "only_b": 0,
    "both_wrong_diff": 1,
    "both_wrong_same": 2,
    "both_right": 3,
    "unpaired": 4,
}

Log = Callable[[str], object]  # what it returns is not read (a file's write returns a count)


class ReportError(UserError):
    """The report cannot be written (bad arguments, unwritable output). Image problems never raise this."""


def log_to_stderr(message: str) -> None:
    """A note about the page (an image that could not be read...), shown on stderr by the cli."""
    say(f"report: {message}")


def asset(name: str) -> str:
    try:
        return resources.files("evaluator.report").joinpath("assets", name).read_text(encoding="utf-8")
    except OSError:
        raise ReportError(
            f"evaluator/report/assets/{name} is missing from this installation (it must be installed as package "
            "data); reinstall doccount-eval"
        ) from None


def version() -> str:
    try:
        from importlib.metadata import version

        return version("doccount-eval")
    except Exception:
        return "unknown"


def now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


def pct(x: Any, digits: int = 1) -> str:
    return pct_text(x, digits)


def ci(interval: Any) -> str:
    return ci_text(interval, dash="–")


def number(x: Any) -> str:
    """A count or an error as shown: integers as they are, other numbers with two decimals."""
    return "n/a" if not is_num(x) else (str(x) if is_int(x) else f"{x:.2f}")


def group_key(value: Any) -> str:
    """A subgroup value as shown and filtered (scoring's group_value_key), with no '|' (the filter separator)."""
    return group_value_key(value).replace("|", "¦")


def group_values(groups: JSONObject, name: str) -> list[str]:
    return [k.replace("|", "¦") for k in group_keys(groups, name)]


def attr_name(name: str) -> str:
    return re.sub(r"[^a-z0-9_-]+", "-", name.lower())


def members(values: Iterable[str]) -> str:
    return "|" + "|".join(values) + "|"


def clip_text(text: str, keep: int = TEXT_KEEP) -> tuple[str, int]:
    """A very long text keeps its head and tail (the end of a reasoning trace is where the count is)."""
    if len(text) <= 2 * keep + 500:
        return text, 0
    omitted = len(text) - 2 * keep
    marker = f"\n\n[… {omitted:,} characters omitted here; the full text is in responses.jsonl …]\n\n"
    return text[:keep] + marker + text[-keep:], omitted


def answer_of(row: ScoredRow) -> int | None:
    return row.parsed_answer if row.outcome == "ok" else None


def error_of(row: ScoredRow) -> int | None:
    a, t = answer_of(row), row.ground_truth
    return a - t if a is not None and t is not None else None


def direction_of(row: ScoredRow) -> str:
    err = error_of(row)
    if err is None:
        return "none"
    return "over" if err > 0 else "under" if err < 0 else "exact"


def fallback_of(row: ScoredRow, benchmark: Benchmark) -> int | None:
    if row.fallback_answer is not None:
        return row.fallback_answer
    if row.outcome in ("ok", "parse_failure") and row.response_text is not None:
        try:
            return benchmark.fallback(row.response_text)
        except Exception:
            return None
    return None


# ----------------------------------------------------------------------------- the pages' templates


@cache
def environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("evaluator.report", "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,  # a misspelt field fails the render, never shows blank
        finalize=lambda value: "" if value is None else value,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["thousands"] = lambda n: f"{n:,}"
    env.filters["number"] = number
    return env


def inline_script(text: str) -> Markup:
    """Text inside a <script> element: a '</' would end the element early."""
    return Markup(text.replace("</", "<\\/"))


# the page's own <script> elements (the templates write them, so their form is known); a data block
# (type="application/json") is never run, so it needs no hash
_SCRIPT = re.compile(r"<script(?P<attrs>[^>]*)>(?P<body>.*?)</script>", re.DOTALL)


def with_script_hashes(html: str, own: list[str]) -> str:
    """The page with SCRIPT_HASHES in its policy (the first occurrence: the <meta> in <head>) replaced by
    the CSP sources ('sha256-...') of the inline scripts it runs whose text is one of `own` (the bundle's
    scripts), in page order, or 'none': any other script element, however it got there, stays blocked."""
    mine = {text.strip() for text in own}
    hashes = [
        "'sha256-"
        + base64.b64encode(hashlib.sha256(m["body"].encode("utf-8")).digest()).decode("ascii")
        + "'"
        for m in _SCRIPT.finditer(html)
        if "application/json" not in m["attrs"] and m["body"].strip() in mine
    ]
    sources = " ".join(dict.fromkeys(hashes)) or "'none'"
    return html.replace(SCRIPT_HASHES, str(escape(sources)), 1)


def render(
    template: str,
    title: str,
    images: dict[str, str] | None = None,
    stamp: tuple[str, str] | None = None,
    **context: Any,
) -> str:
    """A whole page: `template` (which extends page.html) with the stylesheet, script and images inline.
    `stamp`: the (version, time) its footer says it was written by and at (default: this one, now); verify
    passes an archived page's own, to rebuild that page byte for byte."""
    try:
        page = environment().get_template(template)
    except (jinja2.TemplateNotFound, ValueError):
        raise ReportError(
            f"evaluator/report/templates/{template} is missing from this installation (it must be installed as "
            "package data); reinstall doccount-eval"
        ) from None
    script = inline_script(asset("report.js"))
    html = page.render(
        title=title,
        csp=CSP,
        css=Markup(asset("report.css")),
        script=script,
        images_json=inline_script(json.dumps(images or {}, separators=(",", ":"))),
        version=stamp[0] if stamp else version(),
        now=stamp[1] if stamp else now(),
        **context,
    )
    return with_script_hashes(html, [str(script)])
