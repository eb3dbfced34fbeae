"""Print the built book to one PDF with headless Chromium, offline.

    python book/make_pdf.py [SITE] [-o PDF] [--toc TOC] [--config CONFIG] [--paper a4|letter]
        [--hidden-code show|note] [--chromium PATH] [--html PATH] [--no-compress] [--timeout S]

``make pdf`` builds the site (``make book``) and then runs this script on it. The script reads the
pages' order from the table of contents (``--toc``; a part's caption heads its first page) and the
title and author from ``--config``, and assembles one HTML document from the built site: a title
page, the contents with page numbers, and the article of every page in that order (the navigation
bar, sidebars, launch buttons and previous/next links are left out). Element ids are prefixed with
the page they come from, so that links between pages, to equations, figures and references become
links inside the PDF; images are loaded from the site.

The document is served from a local http.server on 127.0.0.1 and loaded in one headless Chromium,
driven over the DevTools protocol with the client of book/check_site.py (standard library only).
MathJax (the site's own copy) typesets the math of the whole book; the script waits for it, for
every image and for the fonts, and stops with exit status 1 and one line per problem if any math
was not rendered, MathJax reported an error, raw TeX is left in the text, an image did not load or
a request to the server failed. In print layout, an element wider than the page (a wide table or
formula) is scaled to the page's width, and the code lines longer than a code block holds are
listed (print.css wraps them; nothing is cut off). Chromium then prints the document
(``Page.printToPDF``) with page numbers in the footer and an outline (bookmarks) from the headings;
the contents get their page numbers from the named destinations of that printing, and the
document is printed a second time with them. Where ``qpdf`` is installed the PDF is compressed.

The print styles are book/_static/print.css (the site loads it too, so that a page printed from a
browser drops its sidebars and buttons); it is read from the source tree and inlined.

Options:
  SITE            the built site (default book/_build/html)
  -o, --output    the PDF to write (default book/_build/pdf/attention-derived.pdf)
  --toc           the Jupyter Book table of contents giving the order (default book/_toc.yml)
  --config        the Jupyter Book configuration: title, author, repository (book/_config.yml)
  --paper         a4 (default) or letter
  --hidden-code   show (default): print the code cells the site collapses (tag hide-input) under
                  a small "Code collapsed on the website" label; note: a one-line note instead
  --chromium      the browser executable (default: /usr/bin/chromium or chromium on the PATH)
  --html          also write the assembled HTML document here (to look at it in a browser)
  --no-compress   leave the PDF as Chromium wrote it (about 3x larger) even where qpdf exists
  --timeout       seconds allowed for each of loading, typesetting and printing (default 900)
"""
from __future__ import annotations

import argparse
import base64
import datetime
import functools
import html
import http.server
import json
import posixpath
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))
import check_site  # noqa: E402  (book/check_site.py: the WebSocket/DevTools client, Chromium start-up)

PRINT_CSS = HERE / "_static" / "print.css"
DEFAULT_PDF = HERE / "_build" / "pdf" / "attention-derived.pdf"
BOOK_PATH = "/_pdf_book.html"          # where the assembled document is served (the site's root)
PAPERS = {"a4": (8.27, 11.69), "letter": (8.5, 11.0)}     # inches, as printToPDF wants them
MARGIN_IN = 0.6
FOOTER = ('<div style="font-size:8px;width:100%;text-align:center;color:#555;'
          'font-family:sans-serif"><span class="pageNumber"></span></div>')


# --------------------------------------------------------------------------------------------------
# The pages, in the order of the table of contents.
@dataclass
class Entry:
    file: str                     # the page's path in the site without ".html", e.g. notebooks/01_x
    level: int = 0                # 0 for the root and chapters, 1 for their sections, ...
    part: str | None = None       # the part caption, on the first page of a part


def _strip_suffix(name: str) -> str:
    for suffix in (".md", ".ipynb", ".rst", ".html"):
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


def toc_entries(toc: dict) -> list[Entry]:
    """The pages of a jb-book table of contents (root, parts, chapters, nested sections)."""
    entries = [Entry(_strip_suffix(toc["root"]))]

    def walk(items, level, part):
        for item in items or []:
            if "glob" in item:
                raise ValueError(f"table of contents: 'glob' entries are not supported "
                                 f"({item['glob']})")
            if "file" in item:
                entries.append(Entry(_strip_suffix(item["file"]), level, part))
                part = None
            walk(item.get("sections"), level + 1, None)
        return part

    for part in toc.get("parts") or []:
        walk(part.get("chapters"), 0, part.get("caption") or "")
    walk(toc.get("chapters"), 0, None)
    return entries


def slug(file: str) -> str:
    return "p-" + re.sub(r"[^A-Za-z0-9_-]+", "-", file).strip("-")


# --------------------------------------------------------------------------------------------------
# One page's article, with its ids, links and image sources made to work in the assembled document.
_ARTICLE_OPEN = re.compile(r'<article\b[^>]*\bclass="[^"]*\bbd-article\b[^"]*"[^>]*>',
                           re.IGNORECASE)
_ARTICLE_TAG = re.compile(r"<(/?)article\b[^>]*>", re.IGNORECASE)
_TITLE = re.compile(r"<title>(.*?)</title>", re.IGNORECASE | re.DOTALL)
_SCRIPT = re.compile(r"<script\b.*?</script\s*>", re.IGNORECASE | re.DOTALL)
_TAG = re.compile(r"<(/?)([A-Za-z][A-Za-z0-9:-]*)((?:[^>\"']|\"[^\"]*\"|'[^']*')*)>")
_ATTR = re.compile(r'(\s)(id|for|href|src|aria-labelledby|aria-describedby|aria-controls)'
                   r'="([^"]*)"', re.IGNORECASE)
_STYLESHEET = re.compile(r"<link\b[^>]*\brel=\"stylesheet\"[^>]*>", re.IGNORECASE)
_MATHJAX_CONFIG = re.compile(r"<script>\s*window\.MathJax\s*=.*?</script>",
                             re.IGNORECASE | re.DOTALL)
_MATHJAX_SCRIPT = re.compile(r"<script\b[^>]*\bsrc=\"[^\"]*mathjax[^\"]*\"[^>]*>\s*</script>",
                             re.IGNORECASE)


def article_html(page_html: str, rel: str) -> str:
    """The inner HTML of the page's ``<article class="bd-article">`` (the theme's main content)."""
    m = _ARTICLE_OPEN.search(page_html)
    if not m:
        raise ValueError(f"{rel}: no <article class=\"bd-article\"> (not a Jupyter Book page?)")
    depth, start = 1, m.end()
    for t in _ARTICLE_TAG.finditer(page_html, start):
        depth += -1 if t.group(1) else 1
        if depth == 0:
            return page_html[start:t.start()]
    raise ValueError(f"{rel}: <article> is not closed")


def page_title(page_html: str, rel: str) -> str:
    """The page's title as Sphinx wrote it in <title> ("Chapter title — Book title")."""
    m = _TITLE.search(page_html)
    title = html.unescape(re.sub(r"<[^>]+>", "", m.group(1))).strip() if m else rel
    return title.rsplit(" \u2014 ", 1)[0] if " \u2014 " in title else title


def _site_path(rel: str, url: str) -> str:
    """A link or source of page `rel` as a path from the site's root (no query or fragment)."""
    path = urllib.parse.unquote(urllib.parse.urlsplit(url).path)
    return posixpath.normpath(posixpath.join(posixpath.dirname(rel), path)) if path else rel


class Rewriter:
    """Rewrites the tags of one page's article for the assembled document."""

    def __init__(self, rel: str, pages: dict[str, str]):
        self.rel = rel                 # e.g. notebooks/01_x.html
        self.pages = pages             # site path of every page in the book -> its slug
        self.prefix = pages[rel] + "--"

    def _id(self, value: str) -> str:
        return " ".join(self.prefix + v for v in value.split())

    def _href(self, value: str) -> str | None:
        if value.startswith("#"):
            return "#" + self.prefix + value[1:] if len(value) > 1 else "#" + self.pages[self.rel]
        parts = urllib.parse.urlsplit(value)
        if parts.scheme or value.startswith("//"):
            return value                                   # external (https:, mailto:, data:)
        target = _site_path(self.rel, value)
        if target in self.pages:
            slug_ = self.pages[target]
            return f"#{slug_}--{parts.fragment}" if parts.fragment else f"#{slug_}"
        return None                                        # a file of the site outside the book

    def _src(self, value: str) -> str:
        parts = urllib.parse.urlsplit(value)
        if parts.scheme or value.startswith("//"):
            return value                                   # data: URIs of inline outputs
        return urllib.parse.quote(_site_path(self.rel, value))

    def _attr(self, m: re.Match) -> str:
        space, name, value = m.group(1), m.group(2).lower(), html.unescape(m.group(3))
        if name == "href":
            new = self._href(value)
            if new is None:
                return ""                                  # the text stays, the dead link goes
        elif name == "src":
            new = self._src(value)
        else:
            new = self._id(value)
        return f'{space}{name}="{html.escape(new, quote=True)}"'

    def __call__(self, fragment: str) -> str:
        fragment = _SCRIPT.sub("", fragment)               # thebe's kernel settings and the like
        out, pos, svg_depth = [], 0, 0
        for t in _TAG.finditer(fragment):
            closing, name, attrs = t.group(1), t.group(2).lower(), t.group(3)
            out.append(fragment[pos:t.start()])
            pos = t.end()
            if name == "svg":          # inline SVG refers to its own ids (url(#clip)): left as is
                svg_depth += -1 if closing else (0 if attrs.rstrip().endswith("/") else 1)
                if closing or svg_depth > 1:
                    out.append(t.group(0))
                    continue
            if svg_depth or closing:
                out.append(t.group(0))
                continue
            out.append(f"<{name}{_ATTR.sub(self._attr, attrs)}>")
        out.append(fragment[pos:])
        return "".join(out)


# --------------------------------------------------------------------------------------------------
# The assembled document.
@dataclass
class Book:
    html: str
    pages: list[tuple[Entry, str]] = field(default_factory=list)     # (entry, title)


def _head_assets(page_html: str, rel: str) -> str:
    """The root page's stylesheets and MathJax (configuration and script), linked from the root."""
    def relink(tag: str) -> str:
        return re.sub(r'\b(href|src)="([^"]*)"',
                      lambda m: f'{m.group(1)}="{_site_path(rel, html.unescape(m.group(2)))}"', tag)
    head = page_html.split("</head>", 1)[0]
    parts = [relink(t) for t in _STYLESHEET.findall(head)]
    parts += _MATHJAX_CONFIG.findall(head)
    parts += [relink(t) for t in _MATHJAX_SCRIPT.findall(head)]
    return "\n".join(parts)


def _toc_line(cls: str, target: str, text: str) -> str:
    """A line of the contents: the title, a dotted leader and (filled in after a first printing)
    the page number; the number's room is kept from the start, so the lines do not move."""
    return (f'<li class="{cls}"><a href="#{target}"><span class="pdf-toc-text">{html.escape(text)}'
            '</span><span class="pdf-toc-leader"></span>'
            f'<span class="pdf-toc-page" data-target="{target}"></span></a></li>')


def assemble(site: Path, toc: dict, config: dict, *, print_css: str = "") -> Book:
    entries = toc_entries(toc)
    missing = [e.file for e in entries if not (site / (e.file + ".html")).is_file()]
    if missing:
        raise FileNotFoundError(f"pages of the table of contents not in {site}: "
                                f"{', '.join(missing)}")
    pages = {e.file + ".html": slug(e.file) for e in entries}
    book = Book("")
    title = config.get("title") or "Book"
    author = config.get("author") or ""
    repo = (config.get("repository") or {}).get("url", "")
    body, contents = [], []
    for i, entry in enumerate(entries):
        rel = entry.file + ".html"
        text = (site / rel).read_text(encoding="utf-8")
        page = page_title(text, rel)
        book.pages.append((entry, page))
        if entry.part is not None:
            part_id = f"part-{i}"
            contents.append(_toc_line("pdf-toc-part", part_id, entry.part))
            body.append(f'<h1 class="pdf-part-title" id="{part_id}">{html.escape(entry.part)}</h1>')
        contents.append(_toc_line(f"pdf-toc-level-{entry.level}", pages[rel], page))
        first_of_part = " pdf-first-of-part" if entry.part is not None else ""
        body.append(f'<div class="pdf-chapter pdf-level-{entry.level}{first_of_part}" '
                    f'id="{pages[rel]}">'
                    f'<article class="bd-article">{Rewriter(rel, pages)(article_html(text, rel))}'
                    "</article></div>")
    root = (site / (entries[0].file + ".html")).read_text(encoding="utf-8")
    made = datetime.date.today().isoformat()
    title_page = (
        '<section class="pdf-title-page">'
        f'<h1 class="pdf-book-title">{html.escape(title)}</h1>'
        + (f'<p class="pdf-book-author">{html.escape(author)}</p>' if author else "")
        + f'<p class="pdf-book-made">Printed from the book\'s website on {made}.'
        + (f' The notebooks and the package: <a href="{html.escape(repo)}">{html.escape(repo)}</a>'
           if repo else "")
        + "</p></section>")
    book.html = f"""<!DOCTYPE html>
<html lang="en" class="pdf-book" data-theme="light" data-mode="light">
<head>
<meta charset="utf-8">
<title>{html.escape(title)}</title>
{_head_assets(root, entries[0].file + ".html")}
<style>{print_css}</style>
</head>
<body class="pdf-book">
{title_page}
<nav class="pdf-toc"><h1 class="pdf-toc-title">Contents</h1><ul>{"".join(contents)}</ul></nav>
<div class="bd-container"><div class="bd-container__inner bd-page-width"><main class="bd-main">
<div class="bd-content"><div class="bd-article-container">
{"".join(body)}
</div></div></main></div></div>
</body>
</html>
"""
    return book


# --------------------------------------------------------------------------------------------------
# In the browser: collapsed cells, then wait for MathJax, images and fonts, then inspect.
PREPARE_JS = r"""
(async (hiddenCode) => {
  const sleep = ms => new Promise(r => setTimeout(r, ms));
  let hidden = 0;
  for (const d of [...document.querySelectorAll('details')]) {
    if (d.matches('.above-input') && d.querySelector('.cell_input')) {     // tag hide-input
      hidden += 1;
      if (hiddenCode === 'note') {
        const pre = d.querySelector('pre');
        const lines = pre ? pre.textContent.replace(/\n$/, '').split('\n').length : 0;
        const note = document.createElement('p');
        note.className = 'pdf-hidden-code';
        note.textContent = `A code cell of ${lines} lines that the website collapses is not ` +
                           `printed here; it is in the chapter's notebook.`;
        d.replaceWith(note);
        continue;
      }
      const cell = document.createElement('div');         // the code, under a small label
      cell.className = 'pdf-hidden-cell';
      const label = document.createElement('div');
      label.className = 'pdf-hidden-label';
      label.textContent = 'Code collapsed on the website:';
      cell.appendChild(label);
      for (const child of [...d.childNodes])
        if (child.nodeName !== 'SUMMARY') cell.appendChild(child);
      d.replaceWith(cell);
      continue;
    }
    d.open = true;                                   // dropdowns, hints: everything shows in print
  }
  const mathEls = [...document.querySelectorAll('.math')].filter(e => !e.closest('pre, code'));
  const ready = () => window.MathJax && MathJax.startup && MathJax.startup.promise;
  let mathjaxMissing = false;
  if (mathEls.length) {                      // wait for MathJax to load and finish typesetting
    const script = document.querySelector('script[src*="mathjax" i]');
    for (let i = 0; script && i < 600 && !ready(); i++) await sleep(50);
    if (ready()) await MathJax.startup.promise; else mathjaxMissing = true;
  }
  await Promise.all([...document.images].map(img => img.complete ? null :
    new Promise(r => { img.addEventListener('load', r); img.addEventListener('error', r); })));
  if (document.fonts) await document.fonts.ready;

  const SKIP = 'pre, code, script, style, textarea, kbd, samp, tt, mjx-container, .highlight';
  const raw = [];
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  for (let n = walker.nextNode(); n; n = walker.nextNode()) {
    if (!/\$\$|\\\(|\\\[|\\begin\{/.test(n.nodeValue)) continue;
    if (n.parentElement && n.parentElement.closest(SKIP)) continue;
    raw.push(n.nodeValue.trim().slice(0, 80));
  }
  return {
    mathjaxMissing,
    math: mathEls.length,
    mathUnrendered: mathEls.filter(e => !e.querySelector('mjx-container'))
      .map(e => e.textContent.slice(0, 60)),
    mathErrors: [...document.querySelectorAll('mjx-merror')]
      .map(e => (e.getAttribute('data-mjx-error') || e.textContent).slice(0, 80)),
    raw,
    images: document.images.length,
    broken: [...document.images].filter(i => !i.naturalWidth)
      .map(i => (i.currentSrc || i.src).slice(0, 100)),
    code: document.querySelectorAll('div.highlight pre').length,
    hidden,
  };
})
"""


# In print layout (print media, the page's printable width). First, an element wider than the page
# (a wide table, a long formula) is scaled down to the page's width with CSS zoom: otherwise
# Chromium shrinks every page of the PDF to fit the widest one. Then: the characters each code
# block's column holds, and the code lines (not cell outputs) longer than that (print.css wraps
# them).
MEASURE_JS = r"""
(() => {
  const W = document.documentElement.clientWidth;
  const scaled = [];
  const outside = e => { const r = e.getBoundingClientRect();
                         return r.width > 0 && (r.right > W + 0.5 || r.left < -0.5); };
  for (let pass = 0; pass < 3; pass++) {
    // the outermost elements that stick out (a formula as a whole, not the parts MathJax drew)
    const wide = new Set([...document.querySelectorAll('body *')]
      .filter(e => outside(e) && !outside(e.parentElement))
      .map(e => e.closest('mjx-container') || e)
      .filter(outside));
    if (!wide.size) break;
    for (const e of wide) {
      const r = e.getBoundingClientRect();
      const fits = r.width - Math.max(0, -r.left) - Math.max(0, r.right - W);  // on the page
      const zoom = (parseFloat(e.style.zoom) || 1) * Math.max(0.3, fits / r.width - 0.002);
      e.style.zoom = zoom.toFixed(4);
      const chapter = e.closest('.pdf-chapter');
      scaled.push({what: e.tagName.toLowerCase(), page: chapter ? chapter.id : '',
                   zoom: Math.round(zoom * 100) / 100});
    }
  }
  const code = [...document.querySelectorAll('div.highlight pre')]
    .filter(p => !p.closest('.cell_output, .output'));
  let fitsMin = Infinity;
  const wrapped = [];
  for (const pre of code) {
    const probe = document.createElement('span');
    probe.textContent = 'M'.repeat(100);
    probe.style.whiteSpace = 'pre';
    pre.appendChild(probe);
    const charWidth = probe.getBoundingClientRect().width / 100;
    probe.remove();
    const style = getComputedStyle(pre);
    const room = pre.clientWidth - parseFloat(style.paddingLeft) - parseFloat(style.paddingRight);
    const fits = Math.floor(room / charWidth + 0.01);
    fitsMin = Math.min(fitsMin, fits);
    for (const line of pre.textContent.split('\n'))
      if (line.length > fits) wrapped.push({fits, length: line.length, line: line.slice(0, 100)});
  }
  return {fitsMin: code.length ? fitsMin : null, wrapped, scaled,
          overflow: document.documentElement.scrollWidth - W};
})()
"""


@dataclass
class Result:
    pdf: Path | None = None
    pages: int = 0
    chapters: int = 0
    math: int = 0
    images: int = 0
    code_blocks: int = 0
    hidden_cells: int = 0
    code_columns: int | None = None       # the fewest characters a code block's line holds in print
    wrapped: list[dict] = field(default_factory=list)      # code lines longer than that (wrapped)
    scaled: list[dict] = field(default_factory=list)       # elements zoomed to the page's width
    toc_pages: bool = False               # the contents carry page numbers
    notes: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    def summary(self) -> str:
        if self.problems:
            return f"PDF not written: {len(self.problems)} problems"
        return (f"wrote {self.pdf}: {self.pages} pages, {self.chapters} pages of the site, "
                f"{self.math} math elements rendered by MathJax, {self.images} images, "
                f"{self.code_blocks} code blocks ({self.hidden_cells} collapsed on the site); "
                f"a code line holds {self.code_columns} characters, {len(self.wrapped)} longer "
                "lines wrapped")


class _BookHandler(check_site._Handler):
    document = b""

    def do_GET(self):  # noqa: N802 (the base class's name)
        if urllib.parse.urlsplit(self.path).path == BOOK_PATH:
            self.send_response(200)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(self.document)))
            self.end_headers()
            self.wfile.write(self.document)
            return
        super().do_GET()


def _serve(site: Path, document: str):
    handler = type("Handler", (_BookHandler,), {"document": document.encode("utf-8"), "failed": []})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0),
                                             functools.partial(handler, directory=str(site)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, handler


_OUTLINE_TITLE = re.compile(rb"/Title\s*(\((?:\\.|[^\\()])*\)|<[0-9A-Fa-f\s]*>)"
                            rb"(?=\s*/(?:Dest|Parent|SE))")


def _pdf_string(token: bytes) -> tuple[str, bool] | None:
    """The text of a PDF string token (literal or hex), and whether it was hex (UTF-16)."""
    if token.startswith(b"<"):
        raw = bytes.fromhex(re.sub(rb"\s", b"", token[1:-1]).decode())
        return (raw[2:].decode("utf-16-be"), True) if raw.startswith(b"\xfe\xff") else None
    body = token[1:-1]
    if re.search(rb"\\[0-9nrtbf]", body):
        return None                                      # octal or control escapes: leave it
    return re.sub(rb"\\(.)", rb"\1", body).decode("latin-1"), False


def _pdf_token(text: str, hex_: bool) -> bytes:
    if hex_:
        return b"<" + ("feff" + text.encode("utf-16-be").hex()).encode() + b">"
    return b"(" + re.sub(rb"([\\()])", rb"\\\1", text.encode("latin-1")) + b")"


def fix_outline_titles(pdf: bytes) -> bytes:
    """Chromium's PDF outline repeats the title of a heading that starts a page after an unforced
    break ("How to run itHow to run it"); keep one copy. Each title is rewritten in place and padded
    with spaces to its old length, so that the cross-reference table stays valid."""
    def fix(m: re.Match) -> bytes:
        parsed = _pdf_string(m.group(1))
        if parsed is None:
            return m.group(0)
        text, hex_ = parsed
        half = len(text) // 2
        if not text or len(text) % 2 or text[:half] != text[half:]:
            return m.group(0)
        new = b"/Title " + _pdf_token(text[:half], hex_)
        return new + b" " * (len(m.group(0)) - len(new))
    return _OUTLINE_TITLE.sub(fix, pdf)


def _object(pdf: bytes, num: int) -> bytes:
    m = re.search(rb"(?:^|\s)%d 0 obj\s*(.*?)endobj" % num, pdf, re.DOTALL)
    if not m:
        raise ValueError(f"PDF object {num} not found")
    return m.group(1)


def destination_pages(pdf: bytes) -> dict[str, int]:
    """The page (counted from 1) of every named destination of a PDF written by Chromium, whose
    catalog has a /Dests dictionary of /name [page 0 R /XYZ ...] and whose objects are plain."""
    catalog = re.search(rb"/Type\s*/Catalog(.*?)endobj", pdf, re.DOTALL)
    if not catalog:
        raise ValueError("no PDF catalog")
    pages_root = int(re.search(rb"/Pages\s+(\d+)\s+0\s+R", catalog.group(1)).group(1))
    dests = re.search(rb"/Dests\s+(\d+)\s+0\s+R", catalog.group(1))
    if not dests:
        return {}
    order: list[int] = []

    def walk(num: int) -> None:
        obj = _object(pdf, num)
        kids = re.search(rb"/Kids\s*\[([^\]]*)\]", obj)
        if kids and re.search(rb"/Type\s*/Pages\b", obj):
            for kid in re.findall(rb"(\d+)\s+0\s+R", kids.group(1)):
                walk(int(kid))
        else:
            order.append(num)
    walk(pages_root)
    page_of = {num: i + 1 for i, num in enumerate(order)}
    found = {}
    for name, num in re.findall(rb"/([^\s/\[\]()<>]+)\s*\[\s*(\d+)\s+0\s+R",
                                _object(pdf, int(dests.group(1)))):
        text = re.sub(rb"#([0-9A-Fa-f]{2})", lambda m: bytes([int(m.group(1), 16)]), name)
        if int(num) in page_of:
            found[text.decode("utf-8", "replace")] = page_of[int(num)]
    return found


def count_pages(pdf: bytes) -> int:
    """Pages of a PDF as Chromium writes it (page objects not in compressed object streams)."""
    return len(re.findall(rb"/Type\s*/Page(?![a-zA-Z])", pdf))


def _evaluate(dt: check_site.DevTools, expression: str, timeout: float):
    result = dt.call("Runtime.evaluate", expression=expression, awaitPromise=True,
                     returnByValue=True, timeout=int(timeout * 1000))
    if "exceptionDetails" in result:
        d = result["exceptionDetails"]
        raise RuntimeError(d.get("exception", {}).get("description") or d.get("text"))
    return result["result"].get("value")


def _print(dt: check_site.DevTools, paper: str) -> bytes:
    width, height = PAPERS[paper]
    params = dict(paperWidth=width, paperHeight=height, marginTop=MARGIN_IN,
                  marginBottom=MARGIN_IN + 0.1, marginLeft=MARGIN_IN, marginRight=MARGIN_IN,
                  printBackground=True, displayHeaderFooter=True, headerTemplate="<span></span>",
                  footerTemplate=FOOTER, transferMode="ReturnAsStream", generateTaggedPDF=True,
                  generateDocumentOutline=True)
    try:
        stream = dt.call("Page.printToPDF", **params)["stream"]
    except RuntimeError:                   # an older Chromium without the outline: print without it
        for key in ("generateTaggedPDF", "generateDocumentOutline"):
            params.pop(key)
        stream = dt.call("Page.printToPDF", **params)["stream"]
    chunks = []
    while True:
        chunk = dt.call("IO.read", handle=stream, size=1 << 20)
        data = chunk.get("data", "")
        chunks.append(base64.b64decode(data) if chunk.get("base64Encoded")
                      else data.encode("latin-1"))
        if chunk.get("eof"):
            break
    dt.call("IO.close", handle=stream)
    return b"".join(chunks)


def make_pdf(site: Path, output: Path, toc: dict, config: dict, *, paper: str = "a4",
             hidden_code: str = "show", chromium: str | None = None, html_out: Path | None = None,
             timeout: float = 900, compress: bool = True) -> Result:
    site = Path(site).resolve()
    result = Result()
    if paper not in PAPERS:
        raise ValueError(f"paper must be one of {sorted(PAPERS)}, got {paper!r}")
    if hidden_code not in ("show", "note"):
        raise ValueError(f"hidden_code must be 'show' or 'note', got {hidden_code!r}")
    css = PRINT_CSS.read_text(encoding="utf-8") if PRINT_CSS.is_file() else ""
    book = assemble(site, toc, config, print_css=css)
    result.chapters = len(book.pages)
    if html_out:
        Path(html_out).write_text(book.html, encoding="utf-8")
    exe = check_site.find_chromium(chromium)
    if exe is None:
        result.problems.append("no Chromium found (Debian: apt-get install chromium)")
        return result
    server, handler = _serve(site, book.html)
    profile = Path(tempfile.mkdtemp(prefix="make-pdf-profile-"))
    proc = None
    try:
        proc, ws_url = check_site.start_chromium(exe, profile)
        dt = check_site.DevTools(ws_url)
        dt.ws.sock.settimeout(timeout)
        dt.call("Page.enable")
        dt.call("Runtime.enable")
        nav = dt.call("Page.navigate", url=f"http://127.0.0.1:{server.server_address[1]}{BOOK_PATH}")
        if nav.get("errorText"):
            raise RuntimeError(f"the assembled book did not load: {nav['errorText']}")
        dt.wait_for("Page.loadEventFired", timeout=timeout)
        info = _evaluate(dt, f"{PREPARE_JS}({json.dumps(hidden_code)})", timeout)
        for ev in dt.events:
            if ev["method"] == "Runtime.exceptionThrown":
                d = ev["params"]["exceptionDetails"]
                what = d.get("exception", {}).get("description", d.get("text"))
                result.problems.append(f"JavaScript error: {what}")
        result.math, result.images = info["math"], info["images"]
        result.code_blocks, result.hidden_cells = info["code"], info["hidden"]
        if info["mathjaxMissing"]:
            result.problems.append("the book has math but MathJax did not load (the root page "
                                   "links no MathJax, or its copy in _static/ is missing)")
        if info["mathUnrendered"]:
            result.problems.append(f"{len(info['mathUnrendered'])} math elements not rendered by "
                                   f"MathJax, e.g. {info['mathUnrendered'][0]!r}")
        result.problems += [f"MathJax error: {e}" for e in info["mathErrors"]]
        result.problems += [f"raw TeX left in the text: {t!r}" for t in info["raw"]]
        result.problems += [f"image did not load: {src}" for src in info["broken"]]
        result.problems += [f"request for {path} failed with HTTP {code}"
                            for code, path, _ in handler.failed]
        if result.problems:
            return result
        width_px = round((PAPERS[paper][0] - 2 * MARGIN_IN) * 96)
        dt.call("Emulation.setEmulatedMedia", media="print")
        dt.call("Emulation.setDeviceMetricsOverride", width=width_px, height=1000,
                deviceScaleFactor=1, mobile=False)
        measured = _evaluate(dt, MEASURE_JS, timeout)
        result.code_columns, result.wrapped = measured["fitsMin"], measured["wrapped"]
        result.scaled = measured["scaled"]
        if measured["overflow"] > 1:
            result.problems.append(f"the document is {measured['overflow']} px wider than the page "
                                   "after scaling its wide elements: the PDF would be shrunk")
            return result
        dt.call("Emulation.clearDeviceMetricsOverride")
        dt.call("Emulation.setEmulatedMedia", media="")
        pdf = _print(dt, paper)
        # The contents get their page numbers from where the first printing put each target;
        # the numbers' room was kept, so the second printing breaks the pages the same way.
        where = destination_pages(pdf)
        targets = _evaluate(dt, "[...document.querySelectorAll('.pdf-toc-page')]"
                                ".map(e => e.dataset.target)", timeout)
        missing = [t for t in targets if t not in where]
        if missing:
            result.notes.append(f"the contents have no page numbers: {len(missing)} of their "
                                f"targets are not among the PDF's destinations (e.g. {missing[0]})")
        else:
            _evaluate(dt, "(pages => { for (const e of document.querySelectorAll('.pdf-toc-page')) "
                          f"e.textContent = pages[e.dataset.target]; }})({json.dumps(where)})",
                      timeout)
            pdf = _print(dt, paper)
            result.toc_pages = True
        pdf = fix_outline_titles(pdf)
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
    output = Path(output)
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_bytes(pdf)
    result.pdf, result.pages = output, count_pages(pdf)
    qpdf = shutil.which("qpdf") if compress else None
    if qpdf:
        # The tagged PDF's structure tree (which the outline is built from) is most of the file,
        # as plain objects; qpdf packs them into compressed object streams (about 3x smaller).
        packed = output.with_name(output.name + ".tmp")
        done = subprocess.run([qpdf, "--object-streams=generate", "--compress-streams=y",
                               "--recompress-flate", "--compression-level=9", str(output),
                               str(packed)], capture_output=True, text=True)
        if done.returncode in (0, 3):                  # 3: qpdf succeeded with warnings
            packed.replace(output)
        else:
            packed.unlink(missing_ok=True)
            result.notes.append(f"qpdf could not compress the PDF: {done.stderr.strip()[:200]}")
    elif compress:
        result.notes.append("qpdf not found (Debian: apt-get install qpdf): the PDF is not "
                            "compressed")
    return result


def _load_yaml(path: Path) -> dict:
    import yaml  # PyYAML, installed with Jupyter Book
    return yaml.safe_load(Path(path).read_text(encoding="utf-8")) or {}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("site", nargs="?", default=str(HERE / "_build" / "html"),
                        help="the built site")
    parser.add_argument("-o", "--output", default=str(DEFAULT_PDF), help="the PDF to write")
    parser.add_argument("--toc", default=str(HERE / "_toc.yml"),
                        help="the table of contents (the order)")
    parser.add_argument("--config", default=str(HERE / "_config.yml"),
                        help="the book's configuration (title, author, repository)")
    parser.add_argument("--paper", default="a4", choices=sorted(PAPERS))
    parser.add_argument("--hidden-code", default="show", choices=["show", "note"],
                        help="code cells the site collapses: print them (show) or a one-line note")
    parser.add_argument("--chromium", default=None, help="the browser executable")
    parser.add_argument("--html", default=None, help="also write the assembled HTML here")
    parser.add_argument("--no-compress", action="store_true",
                        help="do not compress the PDF with qpdf (used where qpdf is installed)")
    parser.add_argument("--timeout", type=float, default=900,
                        help="seconds allowed for loading, typesetting and printing")
    args = parser.parse_args(argv)
    started = time.monotonic()
    result = make_pdf(Path(args.site), Path(args.output), _load_yaml(args.toc),
                      _load_yaml(args.config), paper=args.paper, hidden_code=args.hidden_code,
                      chromium=args.chromium, html_out=Path(args.html) if args.html else None,
                      timeout=args.timeout, compress=not args.no_compress)
    for problem in result.problems:
        print("FAIL", problem)
    for note in result.notes:
        print("note:", note)
    for e in result.scaled:
        print(f"scaled to the page's width: a {e['what']} of {e['page']} (zoom {e['zoom']})")
    for w in result.wrapped[:20]:
        print(f"wrapped: a code line of {w['length']} characters ({w['fits']} fit): {w['line']!r}")
    print(f"{result.summary()} ({time.monotonic() - started:.0f} s)")
    return 1 if result.problems else 0


if __name__ == "__main__":
    sys.exit(main())
