"""The report in a real browser: headless Chromium driven over its DevTools protocol (aiohttp websocket).

Checks that every question has its row, that the filters, sort and search change what is shown, that the
image viewer opens, and that the page made no network request: every request the page's session
announces (Network.requestWillBeSent) must be the page itself or a data: URL, and no Content-Security-Policy
violation may be reported. Two control pages prove that both detectors do see a real attempt.

Needs Debian's `chromium` package. With the env var CI set a missing browser FAILS the test; otherwise
it is skipped with the reason.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from openai_test_server import TestServer
from test_report import make_run

pytestmark = pytest.mark.browser

BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-extensions",
    "--disable-default-apps",
    "--hide-scrollbars",
    "--mute-audio",
)
# Record, in the page, every request the Content-Security-Policy refused (installed before any page script).
CSP_PROBE = (
    "window.__cspViolations = [];"
    "document.addEventListener('securitypolicyviolation', function (e) {"
    "  window.__cspViolations.push(e.violatedDirective + ' ' + e.blockedURI); });"
)


def find_chromium() -> str | None:
    env = os.environ.get("CHROMIUM")
    if env and shutil.which(env):
        return shutil.which(env)
    for name in BROWSERS:
        path = shutil.which(name)
        if path:
            return path
    return None


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, tuple[Path, list[dict], dict]]:
    base = tmp_path_factory.mktemp("browser-runs")
    with TestServer() as server:
        return {"a": make_run(base / "a", server), "b": make_run(base / "b", server, variant=True)}


@pytest.fixture(scope="module")
def chromium_path() -> str:
    path = find_chromium()
    if path is None:
        message = "headless Chromium is not installed (Debian: apt-get install -y chromium)"
        if os.environ.get("CI"):
            pytest.fail(f"{message}; CI must run the browser tests")
        pytest.skip(message)
    return path


class Browser:
    """One headless Chromium process and one DevTools websocket; one page session at a time."""

    def __init__(self, executable: str, workdir: Path) -> None:
        self.executable = executable
        self.profile = Path(tempfile.mkdtemp(prefix="profile-", dir=workdir))
        self.proc: subprocess.Popen[bytes] | None = None
        self.http: aiohttp.ClientSession | None = None
        self.ws: aiohttp.ClientWebSocketResponse | None = None
        self.next_id = 0
        self.pending: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self.events: list[dict[str, Any]] = []
        self.reader: asyncio.Task[None] | None = None
        self.session: str | None = None

    async def start(self) -> None:
        self.proc = subprocess.Popen(
            [
                self.executable,
                *CHROMIUM_FLAGS,
                f"--user-data-dir={self.profile}",
                "--remote-debugging-port=0",
                # Any host name the browser would resolve fails: a request cannot leave the machine.
                "--host-resolver-rules=MAP * ~NOTFOUND",
                "about:blank",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        port_file = self.profile / "DevToolsActivePort"
        deadline = time.monotonic() + 30
        while not (port_file.exists() and len(port_file.read_text().splitlines()) >= 2):
            if self.proc.poll() is not None:
                raise RuntimeError(f"chromium exited with {self.proc.returncode} before DevTools was ready")
            if time.monotonic() > deadline:
                raise RuntimeError("chromium did not open its DevTools port within 30 s")
            await asyncio.sleep(0.05)
        port, path = port_file.read_text().splitlines()[:2]
        self.http = aiohttp.ClientSession()
        self.ws = await self.http.ws_connect(f"ws://127.0.0.1:{port}{path}", max_msg_size=0)
        self.reader = asyncio.create_task(self._read())

    async def _read(self) -> None:
        assert self.ws is not None
        async for msg in self.ws:
            if msg.type != aiohttp.WSMsgType.TEXT:
                continue
            data = json.loads(msg.data)
            fut = self.pending.pop(data["id"], None) if "id" in data else None
            if fut is not None and not fut.done():
                fut.set_result(data)
            elif "method" in data:
                self.events.append(data)

    async def send(
        self, method: str, params: dict[str, Any] | None = None, session: bool = True
    ) -> dict[str, Any]:
        assert self.ws is not None
        self.next_id += 1
        msg: dict[str, Any] = {"id": self.next_id, "method": method, "params": params or {}}
        if session and self.session:
            msg["sessionId"] = self.session
        fut: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self.pending[self.next_id] = fut
        await self.ws.send_str(json.dumps(msg))
        reply = await asyncio.wait_for(fut, 30)
        if "error" in reply:
            raise RuntimeError(f"{method}: {reply['error']}")
        return reply.get("result", {})

    async def open(self, url: str, width: int = 1400, height: int = 1000) -> None:
        """A fresh page session with the probes installed, navigated to url and loaded."""
        target = await self.send("Target.createTarget", {"url": "about:blank"}, session=False)
        attached = await self.send(
            "Target.attachToTarget", {"targetId": target["targetId"], "flatten": True}, session=False
        )
        self.session = attached["sessionId"]
        for method in ("Network.enable", "Page.enable", "Runtime.enable", "Log.enable"):
            await self.send(method)
        await self.send("Page.addScriptToEvaluateOnNewDocument", {"source": CSP_PROBE})
        await self.send(
            "Emulation.setDeviceMetricsOverride",
            {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False},
        )
        self.events.clear()
        await self.send("Page.navigate", {"url": url})
        await self.wait_for(lambda: any(e["method"] == "Page.loadEventFired" for e in self.page_events()))

    def page_events(self) -> list[dict[str, Any]]:
        return [e for e in self.events if e.get("sessionId") == self.session]

    async def wait_for(self, predicate, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while not predicate():
            if time.monotonic() > deadline:
                raise TimeoutError("timed out waiting for the page")
            await asyncio.sleep(0.05)

    async def js(self, expression: str) -> Any:
        result = await self.send(
            "Runtime.evaluate", {"expression": expression, "returnByValue": True, "awaitPromise": True}
        )
        if "exceptionDetails" in result:
            raise RuntimeError(f"page script failed: {result['exceptionDetails']}")
        return result["result"].get("value")

    async def screenshot(self, path: Path, full_page: bool = False) -> None:
        params: dict[str, Any] = {"format": "png"}
        if full_page:
            params["captureBeyondViewport"] = True
        shot = await self.send("Page.captureScreenshot", params)
        path.write_bytes(base64.b64decode(shot["data"]))

    def requests(self, page_url: str) -> list[str]:
        """URLs the page asked for, other than itself and data: URLs."""
        urls = [
            e["params"]["request"]["url"]
            for e in self.page_events()
            if e["method"] == "Network.requestWillBeSent"
        ]
        return [u for u in urls if u != page_url and not u.startswith("data:")]

    def failed_loads(self) -> list[str]:
        return [
            str(e["params"].get("errorText"))
            for e in self.page_events()
            if e["method"] == "Network.loadingFailed"
        ]

    def console_errors(self) -> list[str]:
        out = []
        for e in self.page_events():
            if e["method"] == "Log.entryAdded" and e["params"]["entry"].get("level") == "error":
                out.append(e["params"]["entry"].get("text", ""))
            if e["method"] == "Runtime.exceptionThrown":
                out.append(json.dumps(e["params"]["exceptionDetails"])[:500])
        return out

    async def close(self) -> None:
        if self.reader is not None:
            self.reader.cancel()
            with contextlib.suppress(BaseException):
                await self.reader
        if self.ws is not None:
            await self.ws.close()
        if self.http is not None:
            await self.http.close()
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        shutil.rmtree(self.profile, ignore_errors=True)


def run_in_browser(executable: str, workdir: Path, scenario) -> Any:
    async def main() -> Any:
        browser = Browser(executable, workdir)
        try:
            await browser.start()
            return await scenario(browser)
        finally:
            await browser.close()

    return asyncio.run(main())


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
