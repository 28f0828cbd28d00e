"""Links on the pages are paths, never a scheme; the pages' policy runs only their own scripts (#39, 6).

A run folder named `javascript:alert(document.domain)` (a crafted archive's `reproduce` can make one) is
ranked by `doccount leaderboard` with the page written beside the runs, where its link would start with
the folder name: the link must stay a relative path in index.html and in leaderboard.md, and the
Content-Security-Policy lists the SHA-256 of each inline script instead of 'unsafe-inline'.
"""

from __future__ import annotations

import base64
import hashlib
import html
import re
import shutil
from html.parser import HTMLParser
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from support.cli import eval_args, run_cli
from support.datagen import doccount_reply, doccount_rows, write_doccount
from support.openai_test_server import TestServer

from evaluator.core.text import safe_href

HOSTILE = "javascript:alert(document.domain)"
SCHEME = re.compile(r"^[a-z][a-z0-9+.\-]*:", re.IGNORECASE)


@pytest.fixture(scope="module")
def board(tmp_path_factory: pytest.TempPathFactory) -> SimpleNamespace:
    """One real scored run, copied under a hostile and a plain name, ranked with the page beside them."""
    base = tmp_path_factory.mktemp("links")
    rows = doccount_rows(4)
    write_doccount(base / "data" / "test-00000-of-00001.parquet", rows)
    run = base / "made"
    with TestServer() as srv:
        srv.set_config({"answers": doccount_reply(rows, wrong={rows[0]["sample_id"]})})
        res = run_cli("evaluate", *eval_args(srv.base_url, str(base / "data" / "*.parquet"), run), "--quiet")
        assert res.returncode == 0, res.stderr
    res = run_cli("score", "--run-root", str(run))
    assert res.returncode == 0, res.stderr
    folder = base / "sweep"
    for name in (HOSTILE, "plain"):
        shutil.copytree(run, folder / name)
    res = run_cli("leaderboard", str(folder), "--output", str(folder))
    assert res.returncode == 0, res.stderr
    return SimpleNamespace(folder=folder, run=folder / HOSTILE)


class PageParser(HTMLParser):
    """Every URL attribute (entities decoded, as a browser reads them), every inline event handler, the
    policy, and the text of each script element with its type."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.urls: list[str] = []
        self.handlers: list[str] = []
        self.csp: str | None = None
        self.scripts: list[tuple[str, str]] = []
        self._script: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k.lower(): v or "" for k, v in attrs}
        self.urls += [v for k, v in a.items() if k in ("href", "src", "action", "formaction", "xlink:href")]
        self.handlers += [k for k in a if k.startswith("on")]
        if tag == "meta" and a.get("http-equiv", "").lower() == "content-security-policy":
            self.csp = a.get("content")
        if tag == "script":
            self._script = a.get("type", "")
            self.scripts.append((self._script, ""))

    def handle_data(self, data: str) -> None:
        if self._script is not None:
            kind, text = self.scripts[-1]
            self.scripts[-1] = (kind, text + data)

    def handle_endtag(self, tag: str) -> None:
        if tag == "script":
            self._script = None


def parsed(path: Path) -> PageParser:
    p = PageParser()
    p.feed(path.read_text(encoding="utf-8"))
    p.close()
    return p


def scheme_of(url: str) -> str | None:
    """The scheme a browser would see: it drops control characters and whitespace in and around it."""
    squeezed = "".join(c for c in html.unescape(url) if ord(c) > 0x20 and c != "\x7f")
    found = SCHEME.match(squeezed)
    return found.group(0).lower() if found else None


def test_a_javascript_folder_name_is_a_relative_path_on_the_page(board: SimpleNamespace) -> None:
    text = (board.folder / "index.html").read_text(encoding="utf-8")
    page = parsed(board.folder / "index.html")
    links = [u for u in page.urls if "alert" in u]
    assert links, page.urls  # the hostile run is linked (to its report), as a path
    assert all(u.startswith("./javascript%3Aalert") for u in links), links
    assert not re.search(r"href\s*=\s*[\"']?\s*javascript\s*:", text, re.IGNORECASE)
    assert [u for u in page.urls if scheme_of(u) not in (None, "data:")] == []
    # the path still names the run's report: it resolves to the file
    target = links[0].split("#")[0]
    from urllib.parse import unquote

    assert (board.folder / unquote(target)).resolve() == (board.run / "scores" / "report.html").resolve()


def test_a_javascript_folder_name_is_no_link_in_the_markdown(board: SimpleNamespace) -> None:
    md = (board.folder / "leaderboard.md").read_text(encoding="utf-8")
    assert "](javascript:" not in md.lower()
    assert not re.search(r"\]\(\s*<?\s*javascript\s*:", md, re.IGNORECASE)
    destinations = re.findall(r"\]\(([^)\s]*)\)", md)
    assert destinations and all(scheme_of(d) is None for d in destinations), destinations
    assert "(./javascript%3Aalert%28document.domain%29/scores/report.html)" in md


@pytest.mark.parametrize("page", ["index.html", f"{HOSTILE}/scores/report.html"])
def test_the_policy_lists_each_inline_script_and_no_unsafe_inline(board: SimpleNamespace, page: str) -> None:
    p = parsed(board.folder / page)
    assert p.csp is not None
    directives = {d.split()[0]: d.split()[1:] for d in p.csp.split(";") if d.strip()}
    script_src = directives["script-src"]
    assert "'unsafe-inline'" not in script_src and "'unsafe-eval'" not in script_src
    assert "default-src" in directives and directives["default-src"] == ["'none'"]
    run = [text for kind, text in p.scripts if kind.lower() not in ("application/json",)]
    assert run, "the page has its script"
    for text in run:
        digest = base64.b64encode(hashlib.sha256(text.encode("utf-8")).digest()).decode("ascii")
        assert f"'sha256-{digest}'" in script_src, (digest, script_src)
    assert len(script_src) == len(set(run))  # nothing else is allowed to run
    assert p.handlers == []  # a hash does not cover an inline handler: there must be none


def test_a_script_that_is_not_the_page_s_own_gets_no_hash() -> None:
    from evaluator.report.base import with_script_hashes

    own = "\nconsole.log(1);\n"
    page = (
        '<meta content="script-src {script-hashes}"><script>' + own + "</script>"
        '<script>alert(1)</script><script type="application/json">{}</script>'
    )
    out = with_script_hashes(page, [own])
    digest = base64.b64encode(hashlib.sha256(own.encode()).digest()).decode()
    assert f'script-src &#39;sha256-{digest}&#39;"' in out
    assert with_script_hashes('<meta content="script-src {script-hashes}">', []).startswith(
        '<meta content="script-src &#39;none&#39;"'
    )


@pytest.mark.parametrize(
    ("path", "href"),
    [
        ("../gpt-5.5/scores/report.html", "../gpt-5.5/scores/report.html"),  # ordinary links keep their bytes
        ("javascript:alert(1)/scores/report.html", "./javascript%3Aalert%281%29/scores/report.html"),
        ("JaVaScRiPt:x", "./JaVaScRiPt%3Ax"),
        ("//evil.example/x", ".///evil.example/x"),  # a path, never a host
        ("a b/#?.html", "./a%20b/%23%3F.html"),
    ],
)
def test_safe_href_cases(path: str, href: str) -> None:
    assert safe_href(path) == href
    assert scheme_of(href) is None


def test_the_page_s_script_runs_under_its_policy_in_chromium(board: SimpleNamespace, tmp_path: Path) -> None:
    """In a real browser: the report's script runs (it marks the page ready) and nothing is refused."""
    from support.browser import find_chromium, run_in_browser

    chromium = find_chromium()
    if chromium is None:
        pytest.skip("headless Chromium is not installed (Debian: apt-get install -y chromium)")
    url = (board.run / "scores" / "report.html").resolve().as_uri()

    async def scenario(b: Any) -> dict[str, Any]:
        await b.open(url)
        await b.js(
            "new Promise(r => { const t = () => document.documentElement.dataset.reportReady ? r() : "
            "setTimeout(t, 20); t(); })"
        )
        return {
            "ready": await b.js("document.documentElement.dataset.reportReady"),
            "violations": await b.js("window.__cspViolations"),
        }

    out = run_in_browser(chromium, tmp_path, scenario)
    assert out["ready"] == "1" and out["violations"] == []


test_the_page_s_script_runs_under_its_policy_in_chromium = pytest.mark.browser(
    test_the_page_s_script_runs_under_its_policy_in_chromium
)
