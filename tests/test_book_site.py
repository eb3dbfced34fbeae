"""The browser check of the built book (book/check_site.py), in headless Chromium.

* The checker itself is tested on a tiny hand-made site with one good page and one page with every
  kind of problem it must catch, and on two pages of code, one that fits and one that scrolls
  sideways (skipped where no Chromium is installed).
* The built book is checked when `make book` has produced book/_build/html (skipped otherwise, e.g.
  in CI, which does not build the book; `make browser-check` builds it and runs the same check).
"""
import importlib.util
import shutil
import struct
import sys
import zlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SITE = ROOT / "book" / "_build" / "html"

_spec = importlib.util.spec_from_file_location("check_site", ROOT / "book" / "check_site.py")
check_site = importlib.util.module_from_spec(_spec)
sys.modules["check_site"] = check_site   # its dataclasses look their module up
_spec.loader.exec_module(check_site)

needs_chromium = pytest.mark.needs_browser("chromium", check_site.find_chromium(None))


def _png(width: int = 2, height: int = 2) -> bytes:
    """A valid RGB PNG of one grey colour."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I",
                                                                        zlib.crc32(kind + data))
    rows = b"".join(b"\x00" + b"\x80\x80\x80" * width for _ in range(height))
    return (b"\x89PNG\r\n\x1a\n"
            + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b""))


GOOD = """<!doctype html><html><head><title>good</title></head><body>
<h1 id="top">Good</h1><p>Inline code <code>$$not math$$</code> is fine.</p>
<img src="pic.png" alt="a grey square"><a href="bad.html#sec">to the other page</a>
<a href="https://example.org/">external links are not followed</a></body></html>"""

BAD = """<!doctype html><html><head><title>bad</title></head><body>
<h2 id="sec">Bad</h2><p>Unrendered display math: $$x^2$$ and \\begin{align} y \\end{align}</p>
<span class="math">\\(a+b\\)</span>
<img src="pic.png"><img src="missing.png" alt="gone">
<a href="nowhere.html">dead</a><a href="index.html#no-such-id">dead anchor</a>
<script>undefinedFunction();</script></body></html>"""


@needs_chromium
def test_checker_passes_a_good_page_and_catches_every_kind_of_problem(tmp_path):
    site = tmp_path / "site"
    site.mkdir()
    (site / "pic.png").write_bytes(_png())
    (site / "index.html").write_text(GOOD)
    (site / "bad.html").write_text(BAD)
    report = check_site.check_site(site, shots=tmp_path / "shots", shot_pages=["index.html"])

    assert report.pages == 2
    assert not [p for p in report.problems if p.startswith("index.html")], report.problems
    bad = "\n".join(p for p in report.problems if p.startswith("bad.html"))
    assert "raw TeX left in the text" in bad and "$$x^2$$" in bad
    assert "\\begin{align}" in bad
    assert "math elements not rendered by MathJax" in bad
    assert "image without alt text" in bad
    assert "image did not load" in bad and "missing.png" in bad
    assert "request for /missing.png failed with HTTP 404" in bad
    assert "broken link 'nowhere.html'" in bad
    assert "broken link 'index.html#no-such-id'" in bad
    assert "JavaScript error" in bad and "undefinedFunction" in bad
    assert report.internal_links == 3
    assert (tmp_path / "shots" / "index.png").stat().st_size > 1000


CODE_STYLE = ("<style>pre { overflow: auto; width: 400px; padding: 8px; font: 16px monospace; "
              "}</style>")
SHORT_CODE = f"""<!doctype html><html><head><title>short</title>{CODE_STYLE}</head><body>
<div class="cell_input"><div class="highlight"><pre>x = 1
print(x)</pre></div></div>
<div class="cell_output"><div class="highlight">
<pre>{"an output may be wide: " * 6}</pre></div></div>
</body></html>"""
LONG_CODE = f"""<!doctype html><html><head><title>long</title>{CODE_STYLE}</head><body>
<div class="highlight"><pre>x = 1
y = 2
total = {" + ".join(["x"] * 20)}
z = {" + ".join(["y"] * 40)}</pre></div></body></html>"""


@needs_chromium
def test_checker_fails_a_code_block_that_scrolls_sideways_and_names_its_first_long_line(tmp_path):
    site = tmp_path / "site"
    site.mkdir()
    (site / "index.html").write_text(SHORT_CODE)
    (site / "long.html").write_text(LONG_CODE)
    report = check_site.check_site(site, shots=None)

    assert report.pages == 2 and report.code_blocks == 2      # the cell output is not a code block
    assert not [p for p in report.problems if p.startswith("index.html")], report.problems
    long = [p for p in report.problems if p.startswith("long.html")]
    assert len(long) == 1 and "code block scrolls sideways" in long[0], report.problems
    first_long_line = "total = " + " + ".join(["x"] * 20)
    assert f"a line has {len(first_long_line)}): {first_long_line!r}" in long[0]
    fits = int(long[0].split("(")[1].split(" characters fit")[0])
    assert 5 < fits < len(first_long_line)


@needs_chromium
@pytest.mark.slow
@pytest.mark.skipif(not (SITE / "index.html").exists(), reason="book not built (make book)")
def test_built_book_passes_the_browser_check(tmp_path):
    report = check_site.check_site(SITE, shots=None)
    assert report.pages >= 10
    assert report.math > 0 and report.images > 0 and report.internal_links > 0
    assert not report.problems, "\n".join(report.problems)


def test_chromium_lookup_prefers_the_explicit_path(tmp_path):
    exe = tmp_path / "my-browser"
    exe.write_text("#!/bin/sh\n")
    exe.chmod(0o755)
    assert check_site.find_chromium(str(exe)) == shutil.which(str(exe))


def test_redirect_pages_are_checked_without_racing_the_browser(tmp_path):
    """A meta-refresh page (the book's index.html) is checked by its target, not by loading it:
    loading it in Chromium raced the redirect and failed intermittently."""
    (tmp_path / "book").mkdir()
    (tmp_path / "book" / "intro.html").write_text("<html><body>intro</body></html>")
    good = tmp_path / "index.html"
    good.write_text('<meta http-equiv="Refresh" content="0; url=book/intro.html" />')
    assert check_site.redirect_target(good) == "book/intro.html"
    assert check_site.redirect_target(tmp_path / "book" / "intro.html") is None
    report = check_site.Report()
    assert check_site.check_redirect(tmp_path, "index.html", report) is True
    assert not report.problems and report.pages == 1
    broken = tmp_path / "old.html"
    broken.write_text('<meta http-equiv="refresh" content="0; URL=\'missing.html\'">')
    assert check_site.check_redirect(tmp_path, "old.html", report) is True
    assert any("missing.html" in p for p in report.problems)
