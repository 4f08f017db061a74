"""A tiny Chrome DevTools Protocol client over --remote-debugging-pipe (no websocket, no
Selenium or Playwright): Chromium reads NUL-terminated JSON commands on fd 3 and writes
responses and events on fd 4.
"""

from __future__ import annotations

import base64
import json
import os
import select
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


def find_browser() -> str | None:
    return next((p for b in BROWSERS if (p := shutil.which(b))), None)


class CdpError(RuntimeError):
    pass


class Chromium:
    """Headless Chromium with one page; `events` keeps every event received."""

    def __init__(self, exe: str, width: int = 1280, height: int = 1600, timeout_s: float = 60.0) -> None:
        self.timeout_s = timeout_s
        self.events: list[dict[str, Any]] = []
        self._profile = tempfile.mkdtemp(prefix="dlbench-chromium-")
        to_child, self._write = os.pipe()
        self._read, from_child = os.pipe()

        def fds() -> None:  # in the child, before exec: the pipe ends become fds 3 and 4
            # via fresh copies: a pipe end may already be fd 3 or 4, and dup2 onto itself would
            # keep its close-on-exec flag
            r, w = os.dup(to_child), os.dup(from_child)
            os.dup2(r, 3)
            os.dup2(w, 4)

        # --no-sandbox: CI runs as root, where Chromium's sandbox refuses to start.
        self._proc = subprocess.Popen(
            [exe, "--headless", "--no-sandbox", "--disable-gpu", "--remote-debugging-pipe",
             "--no-first-run", "--disable-extensions", f"--user-data-dir={self._profile}",
             f"--window-size={width},{height}", "about:blank"],
            preexec_fn=fds, close_fds=False, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os.close(to_child)
        os.close(from_child)
        self._buf = b""
        self._id = 0
        target = self.call("Target.createTarget", url="about:blank")["targetId"]
        self.session = self.call("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
        for domain in ("Page", "Runtime", "Log", "Network"):
            self.call(f"{domain}.enable", session=True)
        self.call("Emulation.setDeviceMetricsOverride", session=True, width=width, height=height,
                  deviceScaleFactor=1, mobile=False)

    def call(self, method: str, session: bool = False, **params: Any) -> dict[str, Any]:
        self._id += 1
        msg: dict[str, Any] = {"id": self._id, "method": method, "params": params}
        if session:
            msg["sessionId"] = self.session
        os.write(self._write, json.dumps(msg).encode() + b"\0")
        while True:
            reply = self._next()
            if reply.get("id") == self._id:
                if "error" in reply:
                    raise CdpError(f"{method}: {reply['error']}")
                result: dict[str, Any] = reply.get("result", {})
                return result
            self.events.append(reply)

    def _next(self) -> dict[str, Any]:
        deadline = time.monotonic() + self.timeout_s
        while b"\0" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self._read], [], [], left)[0]:
                raise CdpError(f"no message from Chromium within {self.timeout_s} s")
            chunk = os.read(self._read, 1 << 20)
            if not chunk:
                raise CdpError("Chromium closed the pipe")
            self._buf += chunk
        raw, self._buf = self._buf.split(b"\0", 1)
        parsed: dict[str, Any] = json.loads(raw)
        return parsed

    def open(self, path: Path) -> None:
        """Navigate and wait for the load event."""
        seen = len(self.events)
        self.call("Page.navigate", session=True, url=path.resolve().as_uri())
        while not any(e.get("method") == "Page.loadEventFired" for e in self.events[seen:]):
            self.events.append(self._next())

    def evaluate(self, expression: str) -> Any:
        """The value of a JavaScript expression (promises awaited)."""
        out = self.call("Runtime.evaluate", session=True, expression=expression,
                        awaitPromise=True, returnByValue=True)
        if "exceptionDetails" in out:
            raise CdpError(f"{expression[:60]}...: {out['exceptionDetails']}")
        return out["result"].get("value")

    def screenshot(self) -> bytes:
        data = self.call("Page.captureScreenshot", session=True, format="png")["data"]
        return base64.b64decode(data)

    def errors(self) -> list[str]:
        """Console errors, uncaught exceptions and browser log errors seen so far."""
        out = []
        for e in self.events:
            p = e.get("params", {})
            if e.get("method") == "Runtime.exceptionThrown":
                out.append(json.dumps(p.get("exceptionDetails"))[:500])
            elif e.get("method") == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
                out.append(json.dumps(p.get("args"))[:500])
            elif e.get("method") == "Log.entryAdded" and p.get("entry", {}).get("level") == "error":
                out.append(str(p["entry"].get("text"))[:500])
        return out

    def requested_urls(self) -> list[str]:
        return [e["params"]["request"]["url"] for e in self.events
                if e.get("method") == "Network.requestWillBeSent"]

    def close(self) -> None:
        try:
            self.call("Browser.close")
        except CdpError:
            pass
        try:
            self._proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        os.close(self._write)
        os.close(self._read)
        shutil.rmtree(self._profile, ignore_errors=True)
