"""The PDF of the book (book/make_pdf.py, `make pdf`).

* The pieces that need no browser: the order of the pages from a table of contents, the rewriting
  of a page's ids, links and images for the one assembled document, the page titles, and the two
  edits of the printed PDF (the outline's repeated titles, the pages of named destinations).
* Where Chromium is installed, the script prints a tiny hand-made site of three pages to a PDF: the
  test checks its pages, its text (title page, contents with page numbers, every page in the order
  of the table of contents, math typeset by the site's MathJax before printing, a code line too
  long for the column printed whole), an image and the outline; and that a site with a missing
  image and math MathJax cannot render gives no PDF but names both problems. The text is read with
  pdftotext (poppler-utils) where it is installed.
"""
import importlib.util
import re
import shutil
import struct
import subprocess
import sys
import zlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "book"))
_spec = importlib.util.spec_from_file_location("make_pdf", ROOT / "book" / "make_pdf.py")
make_pdf = importlib.util.module_from_spec(_spec)
sys.modules["make_pdf"] = make_pdf          # its dataclasses look their module up
_spec.loader.exec_module(make_pdf)

needs_chromium = pytest.mark.needs_browser("chromium", make_pdf.check_site.find_chromium(None))
needs_pdftotext = pytest.mark.skipif(shutil.which("pdftotext") is None,
                                     reason="no pdftotext (Debian: poppler-utils)")


# --------------------------------------------------------------------------------------------------
# Without a browser
TOC = {"root": "intro",
       "parts": [{"caption": "Part Alpha",
                  "chapters": [{"file": "chap/one", "sections": [{"file": "chap/two.md"}]}]},
                 {"caption": "Part Beta", "chapters": [{"file": "chap/three"}]}]}


def test_pages_come_in_the_order_of_the_table_of_contents_with_parts_and_levels():
    entries = make_pdf.toc_entries(TOC)
    assert [(e.file, e.level, e.part) for e in entries] == [
        ("intro", 0, None), ("chap/one", 0, "Part Alpha"), ("chap/two", 1, None),
        ("chap/three", 0, "Part Beta")]
    flat = make_pdf.toc_entries({"root": "a", "chapters": [{"file": "b"}, {"file": "c"}]})
    assert [e.file for e in flat] == ["a", "b", "c"] and all(e.part is None for e in flat)
    with pytest.raises(ValueError, match="glob"):
        make_pdf.toc_entries({"root": "a", "chapters": [{"glob": "x/*"}]})


def test_the_books_own_table_of_contents_names_every_page_once():
    import yaml
    toc = yaml.safe_load((ROOT / "book" / "_toc.yml").read_text())
    files = [e.file for e in make_pdf.toc_entries(toc)]
    assert files[0] == "book/intro" and len(files) == len(set(files))
    assert len(files) == (ROOT / "book" / "_toc.yml").read_text().count("file:") + 1
    assert sum(e.part is not None for e in make_pdf.toc_entries(toc)) == len(toc["parts"])


def test_ids_links_and_images_are_rewritten_for_the_one_document():
    pages = {"chap/one.html": "p-chap-one", "intro.html": "p-intro"}
    rewrite = make_pdf.Rewriter("chap/one.html", pages)
    out = rewrite(
        '<section id="top"><h1>T<a class="headerlink" href="#top">#</a></h1>'
        '<a href="../intro.html#why">why</a> <a href="../intro.html">intro</a> '
        '<a href="#">self</a> <a href="https://example.org/x.html#y">web</a> '
        '<a href="../_sources/chap/one.ipynb">download</a> '
        '<img alt="a plot" src="../_images/p%20q.png" /><label for="tab-1">tab</label>'
        '<svg id="fig"><clipPath id="c1"/><use href="#c1"/></svg>'
        '<script>kernelName = "python3"</script></section>')
    assert 'id="p-chap-one--top"' in out and 'href="#p-chap-one--top"' in out
    assert 'href="#p-intro--why"' in out and 'href="#p-intro"' in out
    assert 'href="#p-chap-one"' in out                   # "#" alone: the page itself
    assert 'href="https://example.org/x.html#y"' in out
    assert "<a>download</a>" in out                       # a file outside the book: the text stays
    assert 'src="_images/p%20q.png"' in out and 'alt="a plot"' in out
    assert 'for="p-chap-one--tab-1"' in out
    assert '<svg id="fig"><clipPath id="c1"/><use href="#c1"/></svg>' in out   # SVG left as is
    assert "kernelName" not in out


def test_the_article_and_the_title_are_taken_from_a_page():
    page = ('<html><head><title>Masks &amp; more &#8212; The Book</title></head><body>'
            '<nav>menu</nav><article class="bd-article" role="main">'
            '<p>text</p><article>inner</article></article>'
            '<footer>next</footer></body></html>')
    assert make_pdf.article_html(page, "x.html") == "<p>text</p><article>inner</article>"
    assert make_pdf.page_title(page, "x.html") == "Masks & more"
    with pytest.raises(ValueError, match="bd-article"):
        make_pdf.article_html("<html><body>no article</body></html>", "y.html")


def test_repeated_outline_titles_are_fixed_in_place():
    pdf = (b"1 0 obj\n<</Title (How to run itHow to run it)\n/Parent 2 0 R>>\nendobj\n"
           b"3 0 obj\n<</Title <FEFF0041002000410020>\n/Dest [4 0 R /XYZ 0 0 0]>>\nendobj\n"
           b"5 0 obj\n<</Title (Sizes)\n/Parent 2 0 R>>\nendobj\n"
           b"6 0 obj\n<</Title (AttentionAttention)\n/Producer (Skia)>>\nendobj\n")
    fixed = make_pdf.fix_outline_titles(pdf)
    assert len(fixed) == len(pdf)                        # the cross-reference table stays valid
    assert b"/Title (How to run it)" in fixed and b"/Title <feff00410020>" in fixed
    assert b"/Title (Sizes)" in fixed
    assert b"/Title (AttentionAttention)" in fixed       # not an outline item: untouched


# --------------------------------------------------------------------------------------------------
# A tiny hand-made site printed by Chromium
def _png(width: int = 60, height: int = 40) -> bytes:
    """A valid RGB PNG with a colour gradient (so that it is an image worth embedding)."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return (struct.pack(">I", len(data)) + kind + data
                + struct.pack(">I", zlib.crc32(kind + data)))
    rows = b"".join(b"\x00" + b"".join(bytes([4 * x, 6 * y, 200]) for x in range(width))
                    for y in range(height))
    return (b"\x89PNG\r\n\x1a\n"
            + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b""))


# A stand-in for the site's MathJax: it "typesets" each math element a little later, so that a PDF
# printed without waiting would still show the TeX.
FAKE_MATHJAX = """
window.MathJax = window.MathJax || {};
MathJax.startup = {promise: new Promise(resolve => setTimeout(() => {
  let n = 0;
  for (const el of document.querySelectorAll('.math')) {
    n += 1;
    el.innerHTML = '<mjx-container>formula ' + n + ' typeset</mjx-container>';
  }
  resolve();
}, 400))};
"""


def _page(title: str, article: str, depth: int = 0, mathjax: bool = True) -> str:
    up = "../" * depth
    head = (f'<link rel="stylesheet" type="text/css" href="{up}_static/site.css" />'
            + ('<script>window.MathJax = {"options": {"processHtmlClass": "math"}}</script>'
               f'<script defer="defer" src="{up}_static/mathjax/tex-chtml.js"></script>'
               if mathjax else ""))
    return (f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{title} &#8212; Tiny Book"
            f"</title>{head}</head><body><nav class='bd-sidebar-primary'>SIDEBAR-TEXT</nav>"
            f'<article class="bd-article">{article}</article>'
            "<footer class='prev-next-footer'>PREV-NEXT-TEXT</footer></body></html>")


FITS = "x = 1  # " + "f" * 91                              # 100 characters
LONG = "y = 2  # " + "w" * 114 + " END_OF_LONG_LINE"     # 140 characters


def _site(root: Path, *, broken: bool = False) -> Path:
    site = root / "site"
    (site / "chap").mkdir(parents=True)
    (site / "_images").mkdir()
    (site / "_static" / "mathjax").mkdir(parents=True)
    # like the book's theme, no margin around the page's body (the code column is the page's)
    (site / "_static" / "site.css").write_text("body { margin: 0; font-family: sans-serif; }")
    (site / "_static" / "mathjax" / "tex-chtml.js").write_text(FAKE_MATHJAX)
    (site / "_images" / "pic.png").write_bytes(_png())
    (site / "intro.html").write_text(_page("Tiny intro", (
        '<section id="tiny-intro"><h1>Tiny intro<a class="headerlink" href="#tiny-intro">#</a>'
        '</h1><p>The introduction; see <a href="chap/one.html#sec-b">section B</a>. Inline math '
        '<span class="math notranslate nohighlight">\\(x^2\\)</span>.</p></section>'),
        mathjax=not broken))
    (site / "chap" / "one.html").write_text(_page("Chapter one", (
        '<section id="chapter-one"><h1>Chapter one</h1>'
        '<figure id="fig-pic"><img alt="a gradient" src="../_images/'
        + ("missing.png" if broken else "pic.png") + '" /><figcaption>A picture.</figcaption>'
        "</figure>"
        f'<div class="cell"><div class="cell_input"><div class="highlight"><pre>{FITS}\n{LONG}\n'
        "</pre></div></div></div>"
        '<div class="cell tag_hide-input"><details class="hide above-input"><summary>'
        "Show code cell source</summary><div class=\"cell_input\"><div class=\"highlight\"><pre>"
        "hidden_value = 42\n</pre></div></div></details>"
        '<div class="cell_output"><pre>HIDDEN-CELL-OUTPUT</pre></div></div>'
        '<section id="sec-b"><h2>Section B</h2><p>Back to the <a href="../intro.html">intro</a>.'
        '</p><div class="math notranslate nohighlight">\\[a + b\\]</div></section></section>'),
        depth=1))
    (site / "chap" / "two.html").write_text(_page("Chapter two", (
        '<section id="chapter-two"><h1>Chapter two</h1><p>Second chapter text.</p></section>'),
        depth=1))
    return site


CONFIG = {"title": "Tiny Book", "author": "A. Writer",
          "repository": {"url": "https://example.org/tiny"}}
TINY_TOC = {"root": "intro", "parts": [{"caption": "Part Alpha", "chapters": [
    {"file": "chap/one", "sections": [{"file": "chap/two"}]}]}]}


def _pages_text(pdf: Path) -> list[str]:
    text = subprocess.run(["pdftotext", "-layout", str(pdf), "-"], capture_output=True,
                          text=True, check=True).stdout
    return text.split("\f")[:-1]


@needs_chromium
def test_a_tiny_site_becomes_a_pdf_with_its_pages_in_order_math_code_and_an_image(tmp_path):
    site = _site(tmp_path)
    out = tmp_path / "out" / "tiny.pdf"
    result = make_pdf.make_pdf(site, out, TINY_TOC, CONFIG, chromium=None, compress=False,
                               html_out=tmp_path / "book.html")
    assert not result.problems, result.problems
    assert out.is_file() and result.pdf == out
    data = out.read_bytes()
    # title page, contents, and each of the three pages starting a page of its own
    assert result.pages == make_pdf.count_pages(data) >= 5
    assert result.chapters == 3 and result.math == 2 and result.images == 1
    assert result.hidden_cells == 1 and result.toc_pages
    # the 100-character line fits the code column; the 140-character one is wrapped, not cut
    assert result.code_columns >= 100
    assert [w["length"] for w in result.wrapped] == [len(LONG)]
    assert re.search(rb"/Subtype\s*/Image", data), "the picture is not in the PDF"
    assert b"/Outlines" in data
    html = (tmp_path / "book.html").read_text()
    assert "SIDEBAR-TEXT" not in html and "PREV-NEXT-TEXT" not in html
    assert 'href="#p-chap-one--sec-b"' in html

    if shutil.which("pdftotext") is None:
        pytest.skip("no pdftotext (Debian: poppler-utils): the text was not read")
    pages = _pages_text(out)
    assert len(pages) == result.pages
    text = "\n".join(pages)
    assert "Tiny Book" in pages[0] and "A. Writer" in pages[0]
    assert "Contents" in pages[1]
    first = {h: next(i for i, p in enumerate(pages) if re.search(rf"^\s*{h}\s*$", p, re.M))
             for h in ("Tiny intro", "Chapter one", "Chapter two")}
    assert 1 < first["Tiny intro"] < first["Chapter one"] < first["Chapter two"]
    for heading, index in first.items():              # the contents name the right page numbers
        assert re.search(rf"{heading}\W*{index + 1}\s*$", pages[1], re.M), (heading, pages[1])
    assert re.search(r"Part Alpha\W*" + str(first["Chapter one"] + 1), pages[1])
    assert "formula 1 typeset" in text and "formula 2 typeset" in text
    assert "x^2" not in text and "\\(" not in text and "\\[" not in text
    flat = " ".join(text.split())                       # pdftotext drops runs of spaces
    assert " ".join(FITS.split()) in flat and "END_OF_LONG_LINE" in text
    assert "hidden_value = 42" in text and "Code collapsed on the website" in text
    assert "HIDDEN-CELL-OUTPUT" in text
    assert "SIDEBAR-TEXT" not in text and "PREV-NEXT-TEXT" not in text


@needs_chromium
@needs_pdftotext
def test_hidden_code_can_be_left_out_with_a_note_and_the_pdf_is_compressed(tmp_path):
    site = _site(tmp_path)
    out = tmp_path / "tiny.pdf"
    result = make_pdf.make_pdf(site, out, TINY_TOC, CONFIG, hidden_code="note")
    assert not result.problems, result.problems
    text = "\n".join(_pages_text(out))
    assert "hidden_value = 42" not in text and "HIDDEN-CELL-OUTPUT" in text
    assert "A code cell of 1 lines that the website collapses is not printed" in text
    if shutil.which("qpdf"):
        assert b"/ObjStm" in out.read_bytes()            # packed into compressed object streams
        assert not result.notes, result.notes


@needs_chromium
def test_a_missing_image_or_math_left_as_tex_gives_no_pdf(tmp_path):
    site = _site(tmp_path, broken=True)
    out = tmp_path / "tiny.pdf"
    result = make_pdf.make_pdf(site, out, TINY_TOC, CONFIG)
    problems = "\n".join(result.problems)
    assert not out.exists() and result.pdf is None
    assert "image did not load" in problems and "missing.png" in problems
    assert "request for /_images/missing.png failed with HTTP 404" in problems
    assert "MathJax did not load" in problems        # the root page (its head is used) links none
    assert "2 math elements not rendered by MathJax" in problems
    assert "raw TeX left in the text" in problems and "a + b" in problems


def test_a_page_missing_from_the_site_is_named(tmp_path):
    site = _site(tmp_path)
    toc = {"root": "intro", "chapters": [{"file": "chap/nowhere"}]}
    with pytest.raises(FileNotFoundError, match="chap/nowhere"):
        make_pdf.make_pdf(site, tmp_path / "x.pdf", toc, CONFIG)
