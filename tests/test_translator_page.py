"""The page "Try the translator" in headless Chromium and Firefox (book/check_translator.py), where
they are installed: its files (book/_static/translator, which `make test` and `make book` fill
from npm and the export) on a page of their own, against the PyTorch translator and against each
other; and the file picker with a tiny translator trained here by the command line's
`--export-web`. `make browser-check` runs the same checks on the built book's page. Also the
server the checks and `make serve` use (book/serve.py): cross-origin isolated, gzip where the
browser accepts it, every byte it sends counted."""
import gzip
import importlib.util
import json
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
STATIC = ROOT / "book" / "_static" / "translator"

_spec = importlib.util.spec_from_file_location("check_translator",
                                               ROOT / "book" / "check_translator.py")
check_translator = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(check_translator)
browsers = check_translator.browsers

needs_chromium = pytest.mark.needs_browser("chromium", browsers.find("chromium"))
needs_firefox = pytest.mark.needs_browser("firefox", browsers.find("firefox"))
needs_assets = pytest.mark.skipif(
    not (STATIC / "vendor" / "ort.wasm.min.mjs").is_file()
    or not (STATIC / "model" / "manifest.json").is_file(),
    reason="the page's runtime and model are not in book/_static/translator (make translator)")


@pytest.fixture(scope="module")
def tiny_export(tmp_path_factory):
    """A French→English translator trained for 20 updates by the command line on every 50th of
    Tatoeba's pairs (2,856), given as a reader gives their own (`--pairs`, a tab-separated file
    with English first), exported with --export-web."""
    from transformer_lib.data import load_tatoeba_fra_eng
    out = tmp_path_factory.mktemp("tiny")
    pairs = load_tatoeba_fra_eng()[::50]                            # (English, French)
    (out / "fra-eng.tsv").write_text("".join(f"{en}\t{fr}\n" for en, fr in pairs),
                                     encoding="utf-8")
    subprocess.run([sys.executable, "-m", "transformer_lib.train", "--preset", "cpu-tiny",
                    "--pairs", str(out / "fra-eng.tsv"), "--columns", "2,1", "--src-lang", "fr",
                    "--tgt-lang", "en", "--heldout", "200", "--vocab-size", "1000",
                    "--max-steps", "20", "--eval-sentences", "5",
                    "--test-sentences", "5", "--no-progress", "--out-dir", str(out / "run"),
                    "--export-web", str(out / "web")], check=True, capture_output=True)
    return out / "web"


@needs_chromium
@needs_firefox
@needs_assets
@pytest.mark.needs_data
@pytest.mark.slow
def test_the_page_translates_as_pytorch_does_in_both_browsers(tmp_path, tiny_export):
    """Every check of book/check_translator.py in Chromium, then in Firefox, and Firefox's
    outputs against Chromium's."""
    site, rel = check_translator.harness_site(tmp_path / "site")
    checks = check_translator.run(site, rel, quick=False, own=tiny_export)
    assert not checks.failures, "\n".join(checks.failures)
    for name in ("chromium", "firefox"):
        mine = [line for line in checks.notes if f"[{name}]" in line]
        assert len(mine) >= 30                                             # every check ran
        # in each browser: rows named by the step (and axis titles) on the
        # three kinds of map; nothing wider than 390 px, light and dark, a short and a long
        # sentence; each broken set of files named in the file picker's own box
        for kind in ("cross", "decoder", "encoder"):
            assert sum(f"[{name}] {kind}: rows " in line for line in mine) == 1, kind
        assert sum(", 390 px, " in line for line in mine) == 4
        assert sum(", 1280 px, " in line for line in mine) == 4
        assert sum("file picker, " in line for line in mine) == 6
        assert sum("messages are shown inside its box" in line for line in mine) == 1
    assert sum("chromium's" in line and "bit for bit" in line for line in checks.notes) == 4
    manifest = json.loads((tiny_export / "manifest.json").read_text())
    assert manifest["languages"] == {"source": "fr", "target": "en"}
    assert len(manifest["examples"]) == 3                  # the run's first test sentences
    for name in ("chromium", "firefox"):       # labelled from the manifest, Hebrew from the right
        for pair, dirs in (("fr→en", "['ltr', 'ltr']"), ("he→en", "['rtl', 'ltr']")):
            assert sum(f"[{name}]" in line and f", {pair}: labelled " in line and dirs in line
                       for line in checks.notes) == 1, (name, pair)


def test_the_harness_page_holds_the_contracts_elements(tmp_path):
    site, rel = check_translator.harness_site(tmp_path / "site")
    page = (site / rel).read_text()
    assert 'id="ad-translator"' in page and "boot.js" in page
    js = (STATIC / "translator.js").read_text()
    for name in ("ad-source", "ad-translate", "ad-output", "attentionDerived"):
        assert name in js
    assert "innerHTML" not in js and "innerHTML" not in (STATIC / "boot.js").read_text()


def test_the_page_loads_nothing_from_another_host():
    for path in STATIC.glob("*.js"):
        text = path.read_text()
        text = text.replace("http://127.0.0.1", "").replace("http://www.w3.org/2000/svg", "")
        assert "http://" not in text and "https://" not in text, path


def test_the_browser_driver_is_pinned():
    """puppeteer-core, what Firefox is driven with, at one version in the lock file."""
    package = json.loads((ROOT / "book" / "browser" / "package.json").read_text())
    lock = json.loads((ROOT / "book" / "browser" / "package-lock.json").read_text())
    version = package["dependencies"]["puppeteer-core"]
    assert version[0].isdigit(), version                         # exact, not a range
    assert lock["packages"]["node_modules/puppeteer-core"]["version"] == version


def test_the_server_isolates_compresses_and_counts(tmp_path):
    site = tmp_path / "site"
    site.mkdir()
    (site / "index.html").write_text("<p>" + "hello " * 2000 + "</p>")
    (site / "big.wasm").write_bytes(b"\0asm" + bytes(100_000))
    (site / "picture.png").write_bytes(bytes(5000))
    server, handler = check_translator.serve.serve_in_thread(site)
    base = f"http://127.0.0.1:{server.server_address[1]}/"
    try:
        for name, compressed in (("big.wasm", True), ("index.html", True),
                                 ("picture.png", False)):
            request = urllib.request.Request(base + name, headers={"Accept-Encoding": "gzip"})
            with urllib.request.urlopen(request) as r:
                body, headers = r.read(), r.headers
            assert headers["Cross-Origin-Opener-Policy"] == "same-origin"
            assert headers["Cross-Origin-Embedder-Policy"] == "require-corp"
            assert (headers["Content-Encoding"] == "gzip") == compressed, name
            data = gzip.decompress(body) if compressed else body
            assert data == (site / name).read_bytes()
            assert handler.sent[-1]["path"] == "/" + name
            assert handler.sent[-1]["bytes"] > len(body)                  # the headers too
            assert handler.sent[-1]["bytes"] < len(body) + 1000
        assert handler.sent[0]["bytes"] < 2000                # 100 kB of zeros, compressed
        with urllib.request.urlopen(base + "big.wasm") as r:              # no Accept-Encoding
            assert r.headers["Content-Encoding"] is None and len(r.read()) == 100_004
            assert r.headers["Content-Type"] == "application/wasm"
        with pytest.raises(urllib.error.HTTPError):
            urllib.request.urlopen(base + "missing.js")
        assert handler.sent[-1]["status"] == 404
    finally:
        server.shutdown()


@needs_firefox
def test_firefox_is_driven_over_webdriver_bidi(tmp_path):
    """The bridge: a page loaded, a script evaluated (a Promise awaited), a console error and an
    exception reported, a file given to an input, the viewport set, a screenshot taken."""
    (tmp_path / "index.html").write_text(
        "<input type=file id=f><script>console.error('seen'); "
        "setTimeout(() => { throw new Error('thrown') }, 0)</script>")
    server, _ = check_translator.serve.serve_in_thread(tmp_path)
    browser = browsers.open_browser("firefox")
    try:
        browser.goto(f"http://127.0.0.1:{server.server_address[1]}/index.html")
        assert browser.evaluate("new Promise(r => setTimeout(() => r(6 * 7), 10))") == 42
        browser.set_files("#f", [tmp_path / "index.html"])
        assert browser.evaluate("document.getElementById('f').files[0].name") == "index.html"
        browser.viewport(390, 844)
        assert browser.evaluate("innerWidth") == 390
        browser.screenshot(tmp_path / "shot.png")
        assert (tmp_path / "shot.png").read_bytes()[:4] == b"\x89PNG"
        events = browser.events()
        assert events["console"] == ["seen"] and any("thrown" in e for e in events["errors"])
        assert browser.memory() > 10 * 2**20
        assert browser.version.startswith("firefox/")
    finally:
        browser.close()
        server.shutdown()
