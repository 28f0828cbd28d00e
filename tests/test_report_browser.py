"""The report in a real browser: headless Chromium driven over its DevTools protocol (aiohttp websocket).

Checks that every question has its row, that the filters, sort and search change what is shown, that the
image viewer opens, and that the page made no network request: every request the page's session
announces (Network.requestWillBeSent) must be the page itself or a data: URL, and no Content-Security-Policy
violation may be reported. Two control pages prove that both detectors do see a real attempt.

Needs Debian's `chromium` package. With the env var CI set a missing browser FAILS the test; otherwise
it is skipped with the reason.
"""

from __future__ import annotations

import json
import os
from typing import Any

import pytest
from support.browser import Browser, find_chromium, run_in_browser

pytestmark = pytest.mark.browser


@pytest.fixture
def runs(report_runs):
    return report_runs


@pytest.fixture(scope="module")
def chromium_path() -> str:
    path = find_chromium()
    if path is None:
        message = "headless Chromium is not installed (Debian: apt-get install -y chromium)"
        if os.environ.get("CI"):
            pytest.fail(f"{message}; CI must run the browser tests")
        pytest.skip(message)
    return path


VISIBLE_IDS = (
    "Array.from(document.querySelectorAll('#rows tbody tr.q')).filter(r => !r.hidden).map(r => r.dataset.sid)"
)


async def set_control(b: Browser, selector: str, value: str) -> None:
    await b.js(
        f"(() => {{ const el = document.querySelector({json.dumps(selector)}); el.value = {json.dumps(value)};"
        f" el.dispatchEvent(new Event(el.tagName === 'INPUT' ? 'input' : 'change')); }})()"
    )


def test_report_in_chromium(tmp_path, chromium_path, runs) -> None:
    run, rows, expected = runs["a"]
    page = run / "scores" / "report.html"
    assert page.exists()
    url = page.resolve().as_uri()
    all_ids = [r["sample_id"] for r in rows]
    wrong_ids = [sid for sid, e in expected.items() if not e["correct"]]
    over_ids = [sid for sid, e in expected.items() if e["error"] is not None and e["error"] > 0]
    shot = tmp_path / "report.png"

    async def scenario(b: Browser) -> dict[str, Any]:
        await b.open(url)
        await b.js(
            "new Promise(r => { const t = () => document.documentElement.dataset.reportReady ? r() : setTimeout(t, 20); t(); })"
        )
        out: dict[str, Any] = {}
        out["ids"] = await b.js(
            "Array.from(document.querySelectorAll('#rows tbody tr.q')).map(r => r.dataset.sid)"
        )
        out["visible"] = await b.js(VISIBLE_IDS)
        out["shown_text"] = await b.js("document.getElementById('shown').textContent")
        await set_control(b, "#filter-result", "wrong")
        out["wrong"] = await b.js(VISIBLE_IDS)
        await set_control(b, "#filter-dir", "over")
        out["wrong_over"] = await b.js(VISIBLE_IDS)
        await b.js("document.getElementById('reset').click()")
        out["after_reset"] = await b.js(VISIBLE_IDS)
        await set_control(b, "#filter-g-target_class", "Table")
        out["table"] = await b.js(VISIBLE_IDS)
        await set_control(b, "#filter-g-target_class", "")
        await set_control(b, "#filter-status", "request_error")
        out["request_error"] = await b.js(VISIBLE_IDS)
        await set_control(b, "#filter-status", "")
        await set_control(b, "#search", "needle-phrase")
        out["search"] = await b.js(VISIBLE_IDS)
        await set_control(b, "#search", "")
        await set_control(b, "#sort", "err:desc")
        out["sorted"] = await b.js(VISIBLE_IDS)
        # Every thumbnail gets its image once scrolled into view; the viewer opens on click.
        await b.js("window.scrollTo(0, document.body.scrollHeight)")
        await b.js("new Promise(r => setTimeout(r, 300))")
        await b.js("window.scrollTo(0, 0)")
        await b.js("new Promise(r => setTimeout(r, 300))")
        out["thumbs"] = await b.js(
            "Array.from(document.querySelectorAll('img.thumb')).map(i => [i.closest('tr').dataset.sid,"
            " (i.getAttribute('src') || '').slice(0, 23), i.complete && i.naturalWidth > 0])"
        )
        await b.js("document.querySelector('img.thumb').click()")
        out["lightbox"] = await b.js(
            "(() => { const b = document.getElementById('lightbox'); const i = b.querySelector('img');"
            " return [b.hidden, (i.getAttribute('src') || '').slice(0, 23)]; })()"
        )
        await b.js("document.dispatchEvent(new KeyboardEvent('keydown', {key: 'Escape'}))")
        out["lightbox_closed"] = await b.js("document.getElementById('lightbox').hidden")
        await set_control(b, "#sort", "order:asc")
        await b.js("new Promise(r => setTimeout(r, 300))")
        await b.screenshot(shot)
        out["violations"] = await b.js("window.__cspViolations")
        out["requests"] = b.requests(url)
        out["failed"] = b.failed_loads()
        out["errors"] = b.console_errors()
        return out

    out = run_in_browser(chromium_path, tmp_path, scenario)
    # every question of the full denominator has its row, in manifest order, all visible at first
    assert out["ids"] == all_ids
    assert out["visible"] == all_ids
    assert out["shown_text"] == f"{len(all_ids)} of {len(all_ids)} questions shown"
    # filters change what is shown, and show exactly the matching rows
    assert out["wrong"] == wrong_ids and 0 < len(wrong_ids) < len(all_ids)
    assert out["wrong_over"] == over_ids and over_ids
    assert out["after_reset"] == all_ids
    assert out["table"] == [r["sample_id"] for r in rows if r["target_class"] == "Table"]
    assert out["request_error"] == [sid for sid, e in expected.items() if e["outcome"] == "request_error"]
    assert out["search"] == [sid for sid, e in expected.items() if e["needle"]]
    errs = [expected[sid]["error"] for sid in out["sorted"]]
    sized = [abs(e) for e in errs if e is not None]
    assert sized == sorted(sized, reverse=True) and errs[len(sized) :] == [None] * (len(errs) - len(sized))
    # thumbnails: verified images are inline JPEG data URLs that decode; the tampered one has none
    thumbs = {sid: (src, ok) for sid, src, ok in out["thumbs"]}
    assert set(thumbs) == set(all_ids) - {
        expected_sid for expected_sid, e in expected.items() if e["no_thumb"]
    }
    assert all(src == "data:image/jpeg;base64," and ok for src, ok in thumbs.values())
    assert out["lightbox"] == [False, "data:image/jpeg;base64,"] and out["lightbox_closed"] is True
    # no network request of any kind, nothing refused, no script error
    assert out["requests"] == [] and out["failed"] == []
    assert out["violations"] == []
    assert out["errors"] == []
    assert shot.stat().st_size > 10_000


def test_compare_page_in_chromium(tmp_path, chromium_path, runs) -> None:
    from evaluator.report import write_compare_report

    run_a, rows, expected = runs["a"]
    run_b, _, expected_b = runs["b"]
    page = write_compare_report(run_a, run_b, tmp_path / "compare.html")
    url = page.resolve().as_uri()

    async def scenario(b: Browser) -> dict[str, Any]:
        await b.open(url)
        await b.js(
            "new Promise(r => { const t = () => document.documentElement.dataset.reportReady ? r() : setTimeout(t, 20); t(); })"
        )
        out = {"visible": await b.js(VISIBLE_IDS)}
        await set_control(b, "#filter-verdict", "disagree")
        out["disagree"] = await b.js(VISIBLE_IDS)
        out["requests"] = b.requests(url)
        out["violations"] = await b.js("window.__cspViolations")
        out["errors"] = b.console_errors()
        return out

    out = run_in_browser(chromium_path, tmp_path, scenario)
    ids = [r["sample_id"] for r in rows]
    assert sorted(out["visible"]) == sorted(ids)
    differ = [sid for sid in ids if expected[sid]["correct"] != expected_b[sid]["correct"]]
    assert differ and set(out["disagree"]) >= set(differ)
    assert out["visible"][: len(out["disagree"])] == out["disagree"]  # disagreements first
    assert out["requests"] == [] and out["violations"] == [] and out["errors"] == []


def test_detectors_see_a_real_request(tmp_path, chromium_path) -> None:
    """Controls: a page that does fetch something is caught by both detectors used above."""
    plain = tmp_path / "plain.html"
    plain.write_text('<!DOCTYPE html><html><body><img src="http://report-test.invalid/x.png"></body></html>')
    strict = tmp_path / "strict.html"
    strict.write_text(
        '<!DOCTYPE html><html><head><meta http-equiv="Content-Security-Policy" content="default-src \'none\'">'
        '</head><body><img src="http://report-test.invalid/y.png"></body></html>'
    )

    async def scenario(b: Browser) -> tuple[list[str], list[str]]:
        await b.open(plain.resolve().as_uri())
        await b.js("new Promise(r => setTimeout(r, 200))")
        seen = b.requests(plain.resolve().as_uri())
        await b.open(strict.resolve().as_uri())
        await b.js("new Promise(r => setTimeout(r, 200))")
        return seen, await b.js("window.__cspViolations")

    seen, violations = run_in_browser(chromium_path, tmp_path, scenario)
    assert seen == ["http://report-test.invalid/x.png"]
    assert violations and "report-test.invalid" in violations[0]
