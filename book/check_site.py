"""Check the built book in a real browser: headless Chromium, driven over the DevTools protocol.

    python book/check_site.py [book/_build/html] [--shots /tmp/site_shots] [--chromium PATH]

Serves the site from a local http.server on 127.0.0.1 and loads every HTML page in one headless
Chromium (no network beyond that server). For each page it checks that

* the page loads, with no JavaScript exception and no failed request to the local server;
* MathJax has rendered: every math element of the page holds an ``mjx-container``, MathJax
  reported no TeX error, and no raw TeX (``$$``, ``\\(``, ``\\[``, ``\\begin{``) is left in the text
  outside code;
* no code block (``div.highlight pre`` of a code cell or listing; cell outputs are not checked)
  scrolls sideways at the 1280 x 900 viewport (``scrollWidth > clientWidth + 1``); the problem names
  the first line longer than what fits (book/_static/custom.css sets the code column to 100
  characters, the line length ruff enforces);
* every ``<img>`` has loaded (``naturalWidth > 0``) and has alt text;
* every internal link resolves to an existing file and, when it has a ``#fragment``, to an element
  with that id;
* on notebook pages: the Colab launch link is
  ``https://colab.research.google.com/github/<repo>/blob/<branch>/<path_to_book>/<notebook>.ipynb``
  and the .ipynb download link exists; every figure a notebook names in its cell metadata
  (``mystnb.figure.name``) is on the page with an image that loaded and a caption.

It takes screenshots of a few pages (the first page with math and a plot among them) into
``--shots`` for a person to look at, prints one line per problem, and ends with a summary line.
The exit status is 1 when anything failed. Standard library only (plus PyYAML, which Jupyter Book
installs, to read the repository URL from book/_config.yml).
"""
from __future__ import annotations

import argparse
import base64
import functools
import html.parser
import http.server
import json
import os
import re
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
CHROMIUM_FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--disable-dev-shm-usage", "--hide-scrollbars", "--mute-audio", "--force-device-scale-factor=1",
    "--window-size=1280,900",
]
# Pages photographed for a person to look at (those that exist are taken).
SHOT_PAGES = ["book/intro.html", "notebooks/00_introduction.html", "notebooks/01_self_attention.html",
              "book/notation.html", "book/api.html"]
PAGE_TIMEOUT_S = 60


# --------------------------------------------------------------------------------------------------
# A minimal WebSocket client (RFC 6455), enough for the DevTools protocol.
class WebSocket:
    def __init__(self, url: str, timeout: float = PAGE_TIMEOUT_S):
        u = urllib.parse.urlparse(url)
        self.sock = socket.create_connection((u.hostname, u.port), timeout=timeout)
        key = base64.b64encode(os.urandom(16)).decode()
        request = (f"GET {u.path} HTTP/1.1\r\nHost: {u.hostname}:{u.port}\r\nUpgrade: websocket\r\n"
                   f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n")
        self.sock.sendall(request.encode())
        response = b""
        while b"\r\n\r\n" not in response:
            chunk = self.sock.recv(4096)
            if not chunk:
                raise ConnectionError("DevTools closed the connection during the WebSocket handshake")
            response += chunk
        head, self._buffer = response.split(b"\r\n\r\n", 1)
        if b" 101 " not in head.split(b"\r\n", 1)[0]:
            raise ConnectionError(f"WebSocket handshake refused: {head.decode(errors='replace')}")

    def _read(self, n: int) -> bytes:
        while len(self._buffer) < n:
            chunk = self.sock.recv(max(65536, n - len(self._buffer)))
            if not chunk:
                raise ConnectionError("DevTools connection closed")
            self._buffer += chunk
        data, self._buffer = self._buffer[:n], self._buffer[n:]
        return data

    def _send_frame(self, opcode: int, payload: bytes) -> None:
        header = bytes([0x80 | opcode])
        n = len(payload)
        if n < 126:
            header += bytes([0x80 | n])
        elif n < 1 << 16:
            header += bytes([0x80 | 126]) + struct.pack("!H", n)
        else:
            header += bytes([0x80 | 127]) + struct.pack("!Q", n)
        mask = os.urandom(4)
        masked = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
        self.sock.sendall(header + mask + masked)

    def send(self, text: str) -> None:
        self._send_frame(0x1, text.encode())

    def recv(self) -> str:
        message = b""
        while True:
            b0, b1 = self._read(2)
            opcode, n = b0 & 0x0F, b1 & 0x7F
            if n == 126:
                n = struct.unpack("!H", self._read(2))[0]
            elif n == 127:
                n = struct.unpack("!Q", self._read(8))[0]
            mask = self._read(4) if b1 & 0x80 else None
            payload = self._read(n)
            if mask:
                payload = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
            if opcode == 0x8:
                raise ConnectionError("DevTools closed the WebSocket")
            if opcode == 0x9:                      # ping -> pong
                self._send_frame(0xA, payload)
                continue
            if opcode in (0x0, 0x1, 0x2):
                message += payload
                if b0 & 0x80:
                    return message.decode()

    def close(self) -> None:
        try:
            self._send_frame(0x8, b"")
        except OSError:
            pass
        self.sock.close()


class DevTools:
    """Commands and events of one page target."""

    def __init__(self, ws_url: str):
        self.ws = WebSocket(ws_url)
        self.next_id = 0
        self.events: list[dict] = []

    def call(self, method: str, **params):
        self.next_id += 1
        my_id = self.next_id
        self.ws.send(json.dumps({"id": my_id, "method": method, "params": params}))
        while True:
            msg = json.loads(self.ws.recv())
            if msg.get("id") == my_id:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg.get("result", {})
            if "method" in msg:
                self.events.append(msg)

    def wait_for(self, event: str, timeout: float = PAGE_TIMEOUT_S) -> dict:
        deadline = time.monotonic() + timeout
        while True:
            for i, msg in enumerate(self.events):
                if msg["method"] == event:
                    return self.events.pop(i)
            if time.monotonic() > deadline:
                raise TimeoutError(f"no {event} within {timeout} s")
            self.events.append(json.loads(self.ws.recv()))

    def evaluate(self, expression: str):
        result = self.call("Runtime.evaluate", expression=expression, awaitPromise=True,
                           returnByValue=True, timeout=PAGE_TIMEOUT_S * 1000)
        if "exceptionDetails" in result:
            raise RuntimeError(f"page script failed: {result['exceptionDetails']}")
        return result["result"].get("value")


# --------------------------------------------------------------------------------------------------
# The local web server; it remembers every request that failed.
class _Handler(http.server.SimpleHTTPRequestHandler):
    failed: list[tuple[int, str, str]]

    def log_message(self, format, *args):  # noqa: A002 (the base class's name)
        pass

    def send_error(self, code, message=None, explain=None):
        if self.path != "/favicon.ico":      # the browser asks for it on its own
            self.failed.append((code, self.path, self.headers.get("Referer", "")))
        super().send_error(code, message, explain)


def serve(site: Path):
    handler = functools.partial(_Handler, directory=str(site))
    _Handler.failed = []
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def start_chromium(chromium: str, profile: Path) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen([chromium, *CHROMIUM_FLAGS, "--remote-debugging-port=0",
                             f"--user-data-dir={profile}", "about:blank"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    port_file = profile / "DevToolsActivePort"
    deadline = time.monotonic() + 60
    while not (port_file.exists() and port_file.read_text().strip()):
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise RuntimeError(f"{chromium} did not start (exit status {proc.poll()})")
        time.sleep(0.1)
    port = int(port_file.read_text().split()[0])
    for _ in range(100):
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=5) as r:
                pages = [t for t in json.load(r) if t.get("type") == "page"]
            if pages:
                return proc, pages[0]["webSocketDebuggerUrl"]
        except OSError:
            pass
        time.sleep(0.1)
    proc.kill()
    raise RuntimeError("Chromium started but offered no page to drive")


# --------------------------------------------------------------------------------------------------
# What is inspected in each page, after its scripts (MathJax) have run.
INSPECT_JS = r"""
(async () => {
  const sleep = ms => new Promise(r => setTimeout(r, ms));
  const mathEls = [...document.querySelectorAll('.math')].filter(e => !e.closest('pre, code'));
  const hasMathJax = !!document.querySelector('script[src*="mathjax" i]');
  if (mathEls.length && hasMathJax) {         // wait for MathJax to load and finish typesetting
    for (let i = 0; i < 200 && !(window.MathJax && MathJax.startup && MathJax.startup.promise); i++)
      await sleep(50);
    if (window.MathJax && MathJax.startup && MathJax.startup.promise) await MathJax.startup.promise;
  }
  await Promise.all([...document.images].map(img => img.complete ? null :
    new Promise(r => { img.addEventListener('load', r); img.addEventListener('error', r); })));
  if (document.fonts) await document.fonts.ready;

  const SKIP = 'pre, code, script, style, textarea, kbd, samp, tt, mjx-container, .highlight';
  const raw = [];
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  for (let n = walker.nextNode(); n; n = walker.nextNode()) {
    const t = n.nodeValue;
    if (!/\$\$|\\\(|\\\[|\\begin\{/.test(t)) continue;
    if (n.parentElement && n.parentElement.closest(SKIP)) continue;
    raw.push(t.trim().slice(0, 80));
  }
  const ids = [...document.querySelectorAll('[id]')].map(e => e.id)
    .concat([...document.querySelectorAll('a[name]')].map(e => e.getAttribute('name')));
  const figures = {};
  for (const f of document.querySelectorAll('figure[id], div.figure[id]')) {
    const img = f.querySelector('img');
    figures[f.id] = {img: !!img, loaded: !!img && img.naturalWidth > 0,
                     caption: (f.querySelector('figcaption, p.caption') || {}).textContent || ''};
  }
  // Code blocks (code cells and listings; not cell outputs) that scroll sideways at this viewport,
  // with the characters that fit and the first line that does not.
  const code = [...document.querySelectorAll('div.highlight pre')].filter(p => !p.closest('.cell_output, .output'));
  const wideCode = [];
  for (const pre of code) {
    if (pre.scrollWidth <= pre.clientWidth + 1) continue;
    const probe = document.createElement('span');
    probe.textContent = 'M'.repeat(100);
    pre.appendChild(probe);
    const charWidth = probe.getBoundingClientRect().width / 100;
    probe.remove();
    const style = getComputedStyle(pre);
    const room = pre.clientWidth - parseFloat(style.paddingLeft) - parseFloat(style.paddingRight);
    const fits = Math.floor(room / charWidth);
    const lines = pre.textContent.split('\n');
    const line = lines.find(l => l.length > fits) || lines.reduce((a, b) => (b.length > a.length ? b : a), '');
    wideCode.push({fits, length: line.length, line: line.slice(0, 100)});
  }
  return {
    title: document.title,
    code: code.length,
    wideCode,
    math: mathEls.length,
    mathUnrendered: mathEls.filter(e => !e.querySelector('mjx-container')).map(e => e.textContent.slice(0, 60)),
    mjx: document.querySelectorAll('mjx-container').length,
    mathErrors: [...document.querySelectorAll('mjx-merror')].map(e => (e.getAttribute('data-mjx-error') || e.textContent).slice(0, 80)),
    raw,
    images: [...document.images].map(i => ({src: i.currentSrc || i.src, alt: i.getAttribute('alt'),
                                           width: i.naturalWidth})),
    links: [...document.querySelectorAll('a[href]')].map(a => ({href: a.getAttribute('href'), abs: a.href})),
    ids,
    figures,
    height: Math.ceil(Math.max(document.documentElement.scrollHeight, document.body.scrollHeight)),
  };
})()
"""


class _IdCollector(html.parser.HTMLParser):
    def __init__(self):
        super().__init__()
        self.ids: set[str] = set()

    def handle_starttag(self, tag, attrs):
        for k, v in attrs:
            if v and (k == "id" or (tag == "a" and k == "name")):
                self.ids.add(v)


@functools.cache
def static_ids(path: Path) -> frozenset:
    parser = _IdCollector()
    parser.feed(path.read_text(errors="replace"))
    return frozenset(parser.ids)


def expected_colab(page_rel: str) -> str | None:
    """The Colab URL the launch button must produce for a notebook page, from book/_config.yml."""
    try:
        import yaml
        repo = yaml.safe_load((HERE / "_config.yml").read_text())["repository"]
    except Exception:  # noqa: BLE001 - the check is skipped when there is no config to compare with
        return None
    github = repo["url"].rstrip("/").replace("https://github.com/", "")
    prefix = (repo.get("path_to_book") or "").strip("/")
    nb_path = "/".join(p for p in (prefix, page_rel[: -len(".html")] + ".ipynb") if p)
    return f"https://colab.research.google.com/github/{github}/blob/{repo.get('branch', 'main')}/{nb_path}"


def notebook_figures(site: Path, page_rel: str) -> list[str]:
    """Names of the figures a notebook declares in its cells' `mystnb.figure` metadata."""
    source = site / "_sources" / (page_rel[: -len(".html")] + ".ipynb")
    if not source.exists():
        return []
    nb = json.loads(source.read_text())
    names = []
    for cell in nb.get("cells", []):
        fig = cell.get("metadata", {}).get("mystnb", {}).get("figure", {})
        if fig.get("name"):
            names.append(fig["name"])
    return names


@dataclass
class Report:
    pages: int = 0
    math: int = 0
    images: int = 0
    internal_links: int = 0
    figures: int = 0
    code_blocks: int = 0
    problems: list[str] = field(default_factory=list)
    shots: list[str] = field(default_factory=list)

    def fail(self, page: str, what: str) -> None:
        self.problems.append(f"{page}: {what}")

    def summary(self) -> str:
        verdict = "OK" if not self.problems else f"FAILED ({len(self.problems)} problems)"
        return (f"browser check {verdict}: {self.pages} pages loaded, {self.math} math elements rendered "
                f"by MathJax, {self.images} images, {self.figures} notebook figures, "
                f"{self.internal_links} internal links checked, {self.code_blocks} code blocks measured")


_REFRESH = re.compile(r"""<meta\s+http-equiv=["']refresh["']\s+content=["']\s*\d+\s*;\s*url=['"]?([^'" >]+)""",
                      re.IGNORECASE)


def redirect_target(path: Path) -> str | None:
    """The target of a meta-refresh redirect page (such as the book's index.html), else None."""
    m = _REFRESH.search(path.read_text(encoding="utf-8", errors="replace")[:2000])
    return m.group(1) if m else None


def check_redirect(site: Path, rel: str, report: Report) -> bool:
    """Check a redirect page by its target file (loading it would race the navigation). True if it was one."""
    target = redirect_target(site / rel)
    if target is None:
        return False
    report.pages += 1
    dest = (site / rel).parent / urllib.parse.urlsplit(target).path
    if not dest.is_file():
        report.fail(rel, f"redirects to {target}, which does not exist")
    return True


def check_page(dt: DevTools, site: Path, base: str, rel: str, report: Report) -> dict | None:
    dt.events.clear()
    result = dt.call("Page.navigate", url=base + rel)
    if result.get("errorText"):
        report.fail(rel, f"did not load: {result['errorText']}")
        return None
    try:
        dt.wait_for("Page.loadEventFired")
        info = dt.evaluate(INSPECT_JS)
    except (TimeoutError, RuntimeError) as err:
        report.fail(rel, f"did not finish loading: {err}")
        return None
    report.pages += 1
    for ev in dt.events:
        if ev["method"] == "Runtime.exceptionThrown":
            d = ev["params"]["exceptionDetails"]
            report.fail(rel, f"JavaScript error: {d.get('exception', {}).get('description', d.get('text'))}")
    # Math
    report.math += info["math"]
    if info["mathUnrendered"]:
        report.fail(rel, f"{len(info['mathUnrendered'])} math elements not rendered by MathJax, "
                         f"e.g. {info['mathUnrendered'][0]!r}")
    if info["math"] and not info["mjx"]:
        report.fail(rel, "page has math but no mjx-container: MathJax did not run")
    for err in info["mathErrors"]:
        report.fail(rel, f"MathJax error: {err}")
    for text in info["raw"]:
        report.fail(rel, f"raw TeX left in the text: {text!r}")
    # Code that scrolls sideways
    report.code_blocks += info["code"]
    for wide in info["wideCode"]:
        report.fail(rel, f"code block scrolls sideways ({wide['fits']} characters fit, a line has "
                         f"{wide['length']}): {wide['line']!r}")
    # Images
    for img in info["images"]:
        report.images += 1
        if not img["width"]:
            report.fail(rel, f"image did not load: {img['src'][:100]}")
        if not (img["alt"] or "").strip():
            report.fail(rel, f"image without alt text: {img['src'][:100]}")
    # Links
    page_ids = set(info["ids"])
    origin = base.rstrip("/")
    for link in info["links"]:
        abs_url = link["abs"]
        if not abs_url.startswith(origin + "/"):
            continue                                   # external, mailto:, javascript:
        url = urllib.parse.urlparse(abs_url)
        path = urllib.parse.unquote(url.path).lstrip("/")
        target = site / path
        if target.is_dir():
            target = target / "index.html"
        report.internal_links += 1
        if not target.is_file():
            report.fail(rel, f"broken link {link['href']!r}: no file {target.relative_to(site)}")
            continue
        frag = urllib.parse.unquote(url.fragment)
        if frag and target.suffix == ".html":
            ids = page_ids if target.resolve() == (site / rel).resolve() else static_ids(target.resolve())
            if frag not in ids:
                report.fail(rel, f"broken link {link['href']!r}: no id {frag!r} in {target.relative_to(site)}")
    # Notebook pages: launch buttons and figures
    if (site / "_sources" / (rel[: -len(".html")] + ".ipynb")).exists():
        hrefs = {link["href"] for link in info["links"]}
        colab = expected_colab(rel)
        if colab and colab not in hrefs:
            got = sorted(h for h in hrefs if "colab.research.google.com" in h)
            report.fail(rel, f"Colab launch link should be {colab}, page has {got or 'none'}")
        if not any(h.endswith(".ipynb") and "_sources/" in h for h in hrefs):
            report.fail(rel, "no download link for the .ipynb")
        for name in notebook_figures(site, rel):
            report.figures += 1
            fig = info["figures"].get(name)
            if fig is None:
                report.fail(rel, f"figure {name!r} (named in the notebook) is not on the page: "
                                 "did its cell produce an image?")
            elif not fig["loaded"]:
                report.fail(rel, f"figure {name!r} has no image that loaded")
            elif not fig["caption"].strip():
                report.fail(rel, f"figure {name!r} has no caption")
    return info


def screenshot(dt: DevTools, path: Path, height: int, max_height: int = 6000) -> None:
    """The whole page (up to max_height pixels) at 1280 px wide: the viewport is made that tall."""
    dt.call("Emulation.setDeviceMetricsOverride", width=1280, height=max(300, min(height, max_height)),
            deviceScaleFactor=1, mobile=False)
    dt.evaluate("new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)))")
    data = dt.call("Page.captureScreenshot", format="png")["data"]
    path.write_bytes(base64.b64decode(data))
    dt.call("Emulation.clearDeviceMetricsOverride")


def find_chromium(explicit: str | None) -> str | None:
    for name in ([explicit] if explicit else []) + ["/usr/bin/chromium", "chromium", "chromium-browser",
                                                     "google-chrome", "google-chrome-stable"]:
        found = shutil.which(name) if name else None
        if found:
            return found
    return None


def check_site(site: Path, shots: Path | None = None, chromium: str | None = None,
               shot_pages: list[str] | None = None) -> Report:
    site = Path(site).resolve()
    report = Report()
    pages = sorted(p.relative_to(site).as_posix() for p in site.rglob("*.html")
                   if not any(part.startswith("_") for part in p.relative_to(site).parts))
    if not pages:
        report.fail(str(site), "no HTML pages found (build the book first: make book)")
        return report
    exe = find_chromium(chromium)
    if exe is None:
        report.fail("chromium", "no Chromium found (Debian: apt-get install chromium)")
        return report
    server = serve(site)
    base = f"http://127.0.0.1:{server.server_address[1]}/"
    profile = Path(tempfile.mkdtemp(prefix="check-site-profile-"))
    proc = None
    try:
        proc, ws_url = start_chromium(exe, profile)
        dt = DevTools(ws_url)
        dt.call("Page.enable")
        dt.call("Runtime.enable")
        want_shots = set(SHOT_PAGES if shot_pages is None else shot_pages)
        if shots:
            shots.mkdir(parents=True, exist_ok=True)
        for rel in pages:
            if check_redirect(site, rel, report):
                continue
            info = check_page(dt, site, base, rel, report)
            if shots and info and rel in want_shots:
                out = shots / (rel.replace("/", "__")[: -len(".html")] + ".png")
                screenshot(dt, out, info["height"])
                report.shots.append(str(out))
        dt.ws.close()
    finally:
        if proc is not None:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
        server.shutdown()
        shutil.rmtree(profile, ignore_errors=True)
    for code, path, referer in _Handler.failed:
        where = urllib.parse.urlparse(referer).path.lstrip("/") or "(no referer)"
        report.fail(where, f"request for {path} failed with HTTP {code}")
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("site", nargs="?", default=str(HERE / "_build" / "html"), help="the built site")
    parser.add_argument("--shots", default="/tmp/site_shots", help="where screenshots go ('' for none)")
    parser.add_argument("--chromium", default=None, help="the browser executable")
    args = parser.parse_args(argv)
    started = time.monotonic()
    report = check_site(Path(args.site), Path(args.shots) if args.shots else None, args.chromium)
    for problem in report.problems:
        print("FAIL", problem)
    for shot in report.shots:
        print("screenshot:", shot)
    print(f"{report.summary()} ({time.monotonic() - started:.0f} s)")
    return 1 if report.problems else 0


if __name__ == "__main__":
    sys.exit(main())
