"""The pages' Jinja2 environment: templates in evaluator/report/templates/ (package data), autoescaping on.

Escaping is the default: a value reaches a page as text unless it is built as markup here (the inline
stylesheet, script and image table, which are the bundle's own files or JSON it wrote). `None` renders
as nothing, as a blank cell. The Content-Security-Policy allows exactly the inline scripts of the page as
rendered (their SHA-256, computed from the rendered text, so they cannot drift from it).
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
from functools import cache
from typing import Any

import jinja2
from markupsafe import Markup, escape

from evaluator.report.base import CSP, SCRIPT_HASHES, ReportError, asset, now, version
from evaluator.report.pieces import number


def _blank_none(value: Any) -> Any:
    return "" if value is None else value


@cache
def environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("evaluator.report", "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,  # a misspelt field fails the render, never shows blank
        finalize=_blank_none,
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


def script_hashes(html: str, own: list[str]) -> list[str]:
    """The CSP sources ('sha256-...') of the inline scripts `html` runs whose text is one of `own` (the
    bundle's scripts), in page order: any other script element, however it got there, stays blocked."""
    mine = {text.strip() for text in own}
    return [
        "'sha256-"
        + base64.b64encode(hashlib.sha256(m["body"].encode("utf-8")).digest()).decode("ascii")
        + "'"
        for m in _SCRIPT.finditer(html)
        if "application/json" not in m["attrs"] and m["body"].strip() in mine
    ]


def with_script_hashes(html: str, own: list[str]) -> str:
    """The page with SCRIPT_HASHES in its policy (the first occurrence: the <meta> in <head>) replaced by
    the hashes of its own scripts ('none' when it has none)."""
    sources = " ".join(dict.fromkeys(script_hashes(html, own))) or "'none'"
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
