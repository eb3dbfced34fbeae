"""Small Sphinx additions for the book (loaded through `sphinx: local_extensions` in _config.yml).

1. The API reference renders the package's Markdown-style docstrings. They are written for a
notebook reader, with `name` in single backticks for code (Markdown). In reStructuredText single
backticks would be italic "interpreted text", so before autodoc renders a docstring this hook turns
a lone `code` span into an inline literal ``code``. Roles (:func:`x`), double-backtick literals
and hyperlinks (`text <url>`_) are left alone, and a bare `|` is escaped (`|Y|`, a length, is not
a substitution).

2. One copy of each inline script per page. sphinx-thebe (loaded by Jupyter Book even with Thebe
off) registers its inline configuration script more than once in a Jupyter Book build, and Sphinx
de-duplicates script files but not inline scripts, so every page declared `const THEBE_JS_URL`
twice and the browser logged a SyntaxError (book/check_site.py fails on JavaScript errors).

3. Progress bars render as Jupyter shows them: one final line. A tqdm bar redraws itself with a
carriage return, and the kernel sends each redraw as a separate stream message. myst-nb's
`nb_merge_streams` joins consecutive messages with a newline after each *before* it resolves the
carriage returns, so every redraw became a line of its own (over a hundred on the toy-task page).
Here consecutive stream messages of one name are first concatenated as they arrived, which is what
a notebook front end does, and myst-nb's merge then runs on the result.

4. The theme's colour mode defaults to "auto" (the reader's system setting). The theme's
`default_mode` (a template variable of `html_context`) is empty unless set, and on a reader's
first visit (nothing in localStorage) its script then calls setTheme("") and logs "Got invalid
theme mode: . Resetting to auto." as a console error on every page.
"""
import re

import myst_nb.core.render as _nb_render

# Backtick constructs, scanned left to right so that pairs match up: ``literal``, :role:`target`,
# `hyperlink`_ (all kept), and a plain `code` span (converted).
_BACKTICKS = re.compile(r"(``.+?``)|(:[\w:+.-]+:`[^`]+`)|(`[^`]+`__?)|`([^`\n]+)`")


def _to_literal(match):
    return match.group(0) if match.group(4) is None else f"``{match.group(4)}``"


def _convert_line(line: str) -> str:
    """Backtick spans as above; outside them a bare `|` is escaped, because reStructuredText would
    read a Markdown-ish `|Y|` (a length) as a substitution reference."""
    out, pos = [], 0
    for m in _BACKTICKS.finditer(line):
        out.append(line[pos:m.start()].replace("|", "\\|"))
        out.append(_to_literal(m))
        pos = m.end()
    out.append(line[pos:].replace("|", "\\|"))
    return "".join(out)


def _markdown_code_to_literal(app, what, name, obj, options, lines):
    in_code_block = False
    for i, line in enumerate(lines):
        if line.strip().startswith("```"):
            in_code_block = not in_code_block
            continue
        if not in_code_block and ("`" in line or "|" in line):
            lines[i] = _convert_line(line)


def _unique_scripts(app, pagename, templatename, context, doctree):
    seen, unique = set(), []
    for js in context.get("script_files", []):
        # an inline script's filename is None or "" depending on who added it
        key = (getattr(js, "filename", js) or None, tuple(sorted(getattr(js, "attributes", {}).items())))
        if key not in seen:
            seen.add(key)
            unique.append(js)
    context["script_files"] = unique


def _join_raw_streams(outputs):
    """Concatenate consecutive stream outputs of the same name verbatim (keeping their `\\r`)."""
    joined = []
    for out in outputs or []:
        prev = joined[-1] if joined else None
        if (out.get("output_type") == "stream" and prev is not None
                and prev.get("output_type") == "stream" and prev.get("name") == out.get("name")):
            prev["text"] += out["text"]
        else:
            joined.append(type(out)(out) if out.get("output_type") == "stream" else out)
    return joined


_myst_nb_coalesce_streams = _nb_render.coalesce_streams


def _coalesce_streams(outputs):
    return _myst_nb_coalesce_streams(_join_raw_streams(outputs))


def _default_mode(app, config):
    """The theme's `default_mode` (in `html_context`), "auto" unless the book sets it."""
    config.html_context = {"default_mode": "auto", **(config.html_context or {})}


def setup(app):
    _nb_render.coalesce_streams = _coalesce_streams
    app.connect("config-inited", _default_mode)
    app.connect("autodoc-process-docstring", _markdown_code_to_literal)
    app.connect("html-page-context", _unique_scripts, priority=900)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
