"""Headless Chromium driven over its DevTools protocol (an aiohttp websocket), for the report's browser
tests: one browser process, one page session at a time, every network request the page announces."""

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
