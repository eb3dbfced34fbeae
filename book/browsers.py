"""Headless Chromium and Firefox behind one small interface, for the checks of the page "Try the
translator" (book/check_translator.py), so that every check runs in both browsers unchanged.

* Chromium: the DevTools protocol, through book/check_site.py's client (standard library only).
* Firefox (Debian's firefox-esr): WebDriver BiDi, through npm's puppeteer-core
  (book/browser/bridge.mjs, pinned by book/browser/package-lock.json; `make browser-driver`
  installs it), which this module drives with one JSON line per request.

Each browser: `goto(url)` (returns after the load event), `evaluate(expression)` (its value, a
Promise awaited), `preload(script)` (run in every document the page opens, before its scripts),
`set_files(selector, paths)` (a file input's files), `viewport(width, height)`,
`screenshot(path)`, `events()` (console errors, uncaught exceptions and requested URLs since the
last call), `memory()` (the proportional set size of all the browser's processes, in bytes: what
the page and the browser hold) and `close()`; `name`, `version`.
"""
from __future__ import annotations

import importlib.util
import json
import queue
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

HERE = Path(__file__).resolve().parent
BRIDGE = HERE / "browser" / "bridge.mjs"
PUPPETEER = HERE / "browser" / "node_modules" / "puppeteer-core" / "package.json"
TIMEOUT_S = 120

if "check_site" not in sys.modules:
    _spec = importlib.util.spec_from_file_location("check_site", HERE / "check_site.py")
    sys.modules["check_site"] = importlib.util.module_from_spec(_spec)
    _spec.loader.exec_module(sys.modules["check_site"])
check_site = sys.modules["check_site"]
find_chromium = check_site.find_chromium


def find_firefox(explicit: str | None = None) -> str | None:
    for name in ([explicit] if explicit else []) + ["firefox-esr", "firefox"]:
        found = shutil.which(name) if name else None
        if found:
            return found
    return None


def firefox_driver_missing() -> str | None:
    """Why Firefox cannot be driven here (no Node, or puppeteer-core not installed), or None."""
    if shutil.which("node") is None:
        return "Firefox is driven through Node.js, which is not installed"
    if not PUPPETEER.is_file():
        return "puppeteer-core is not installed: run `make browser-driver`"
    return None


def find(name: str) -> str | None:
    """The executable of browser `name` ("chromium" or "firefox"), or None."""
    if name == "chromium":
        return find_chromium(None)
    if name == "firefox":
        return find_firefox(None) if firefox_driver_missing() is None else None
    raise ValueError(f"name must be 'chromium' or 'firefox', got {name!r}")


def open_browser(name: str, width: int = 1280, height: int = 900, dark: bool = False):
    """Start browser `name` headless with one page of width x height CSS pixels."""
    if name == "chromium":
        exe = find_chromium(None)
        if exe is None:
            raise RuntimeError("no Chromium found (Debian: apt-get install chromium)")
        return Chromium(exe, width, height, dark)
    exe = find_firefox(None)
    if exe is None:
        raise RuntimeError("no Firefox found (Debian: apt-get install firefox-esr)")
    why = firefox_driver_missing()
    if why:
        raise RuntimeError(why)
    return Firefox(exe, width, height, dark)


def memory(pid: int) -> int:
    """Bytes of the proportional set size (Linux's Pss) of process `pid` and all its descendants:
    shared pages counted once in all, so the sum is what the browser holds."""
    parents = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parents[int(stat.parent.name)] = int(fields[1])
    tree, grew = {pid}, True
    while grew:
        more = {p for p, parent in parents.items() if parent in tree} - tree
        tree |= more
        grew = bool(more)
    total = 0
    for p in tree:
        try:
            for line in Path(f"/proc/{p}/smaps_rollup").read_text().splitlines():
                if line.startswith("Pss:"):
                    total += int(line.split()[1]) * 1024
        except OSError:
            pass
    return total


class Chromium:
    """Headless Chromium on one page, over the DevTools protocol."""
    name = "chromium"

    def __init__(self, exe: str, width: int = 1280, height: int = 900, dark: bool = False):
        self.profile = Path(tempfile.mkdtemp(prefix="check-chromium-"))
        self.proc, ws = check_site.start_chromium(exe, self.profile)
        self.dt = check_site.DevTools(ws)
        for domain in ("Network", "Runtime", "Page"):
            self.dt.call(f"{domain}.enable")
        self.version = self.dt.evaluate("navigator.userAgent")
        self.viewport(width, height)
        if dark:
            self.dt.call("Emulation.setEmulatedMedia",
                         features=[{"name": "prefers-color-scheme", "value": "dark"}])

    def goto(self, url: str) -> None:
        self.dt.events = [e for e in self.dt.events if e["method"] != "Page.loadEventFired"]
        self.dt.call("Page.navigate", url=url)
        self.dt.wait_for("Page.loadEventFired")

    def evaluate(self, expression: str):
        return self.dt.evaluate(expression)

    def preload(self, script: str) -> None:
        self.dt.call("Page.addScriptToEvaluateOnNewDocument", source=script)

    def set_files(self, selector: str, paths: list[str]) -> None:
        doc = self.dt.call("DOM.getDocument")
        node = self.dt.call("DOM.querySelector", nodeId=doc["root"]["nodeId"], selector=selector)
        self.dt.call("DOM.setFileInputFiles", nodeId=node["nodeId"], files=[str(p) for p in paths])

    def viewport(self, width: int, height: int) -> None:
        self.dt.call("Emulation.setDeviceMetricsOverride", width=width, height=height,
                     deviceScaleFactor=1, mobile=width < 600)

    def screenshot(self, path: Path) -> None:
        import base64
        size = self.dt.call("Page.getLayoutMetrics")["cssContentSize"]
        data = self.dt.call("Page.captureScreenshot", format="png", captureBeyondViewport=True,
                            clip={"x": 0, "y": 0, "width": size["width"],
                                  "height": size["height"], "scale": 1})["data"]
        Path(path).write_bytes(base64.b64decode(data))

    def events(self) -> dict:
        out = {"console": [], "errors": [], "requests": []}
        kept = []
        for e in self.dt.events:
            p = e.get("params", {})
            if e["method"] == "Runtime.consoleAPICalled":
                if p.get("type") in ("error", "assert"):
                    out["console"].append(" ".join(str(a.get("value", a.get("description", "")))
                                                   for a in p.get("args", [])))
            elif e["method"] == "Runtime.exceptionThrown":
                d = p["exceptionDetails"]
                out["errors"].append(f"{d.get('text', '')} "
                                     f"{d.get('exception', {}).get('description', '')}"[:300])
            elif e["method"] == "Network.requestWillBeSent":
                out["requests"].append(p["request"]["url"])
            elif e["method"] == "Page.loadEventFired":
                kept.append(e)
        self.dt.events = kept
        return out

    def memory(self) -> int:
        return memory(self.proc.pid)

    def close(self) -> None:
        try:
            self.dt.ws.close()
        except OSError:
            pass
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        shutil.rmtree(self.profile, ignore_errors=True)


class Firefox:
    """Headless Firefox on one page, over WebDriver BiDi (puppeteer-core in book/browser/)."""
    name = "firefox"

    def __init__(self, exe: str, width: int = 1280, height: int = 900, dark: bool = False):
        self.log = tempfile.TemporaryFile()
        self.proc = subprocess.Popen(["node", str(BRIDGE)], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=self.log, text=True,
                                     encoding="utf-8")
        self.answers: queue.Queue = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        self.next_id = 0
        started = self._call("launch", browser="firefox", executable=exe, width=width,
                             height=height, dark=dark)
        self.version, self.pid = started["version"], started["pid"]

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.answers.put(json.loads(line))
        self.answers.put(None)

    def _call(self, op: str, **args):
        self.next_id += 1
        self.proc.stdin.write(json.dumps({"id": self.next_id, "op": op, **args}) + "\n")
        self.proc.stdin.flush()
        try:
            answer = self.answers.get(timeout=TIMEOUT_S)
        except queue.Empty:
            raise TimeoutError(f"Firefox did not answer {op} within {TIMEOUT_S} s") from None
        if answer is None:
            self.log.seek(0)
            raise RuntimeError(f"the Firefox driver ended during {op}: "
                               f"{self.log.read().decode(errors='replace')[-800:]}")
        if "error" in answer:
            raise RuntimeError(f"{op}: {answer['error']}")
        return answer["value"]

    def goto(self, url: str) -> None:
        self._call("goto", url=url)

    def evaluate(self, expression: str):
        return self._call("evaluate", expression=expression)

    def preload(self, script: str) -> None:
        self._call("preload", script=script)

    def set_files(self, selector: str, paths: list[str]) -> None:
        self._call("upload", selector=selector, files=[str(p) for p in paths])

    def viewport(self, width: int, height: int) -> None:
        self._call("viewport", width=width, height=height)

    def screenshot(self, path: Path) -> None:
        self._call("screenshot", path=str(path), fullPage=True)

    def events(self) -> dict:
        return self._call("events")

    def memory(self) -> int:
        return memory(self.pid)

    def close(self) -> None:
        try:
            self._call("close")
        except (RuntimeError, TimeoutError, OSError):
            pass
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()
