"""The pages' Jinja2 environment: templates in evaluator/report/templates/ (package data), autoescaping on.

Escaping is the default: a value reaches a page as text unless it is built as markup here (the inline
stylesheet, script and image table, which are the bundle's own files or JSON it wrote). `None` renders
as nothing, as a blank cell.
"""

from __future__ import annotations

import json
from functools import cache
from typing import Any

import jinja2
from markupsafe import Markup

from evaluator.report.base import CSP, ReportError, asset, now, version
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
    return page.render(
        title=title,
        csp=CSP,
        css=Markup(asset("report.css")),
        script=inline_script(asset("report.js")),
        images_json=inline_script(json.dumps(images or {}, separators=(",", ":"))),
        version=stamp[0] if stamp else version(),
        now=stamp[1] if stamp else now(),
        **context,
    )
