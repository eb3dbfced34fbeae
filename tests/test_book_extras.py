"""book/_ext/book_extras.py: the Sphinx additions the book builds with."""
import importlib.util
import sys
from pathlib import Path

import pytest

pytest.importorskip("myst_nb")
from nbformat import NotebookNode  # noqa: E402 (after the skip)

_path = Path(__file__).resolve().parents[1] / "book" / "_ext" / "book_extras.py"
_spec = importlib.util.spec_from_file_location("book_extras", _path)
book_extras = importlib.util.module_from_spec(_spec)
sys.modules["book_extras"] = book_extras
_spec.loader.exec_module(book_extras)


def _stream(name, text):
    return NotebookNode(output_type="stream", name=name, text=text)


def test_progress_bar_renders_as_its_final_line():
    """tqdm's redraws arrive as separate messages; the page must show only the last one."""
    outputs = [_stream("stdout", "training\n")]
    outputs += [_stream("stderr", f"\r{p:3d}%|bar| {p}/100") for p in range(0, 100, 10)]
    outputs += [_stream("stderr", "\r100%|bar| 100/100\n"), _stream("stdout", "done\n")]
    merged = book_extras._coalesce_streams(outputs)
    by_name = {o["name"]: o["text"] for o in merged}
    assert by_name == {"stdout": "training\ndone\n", "stderr": "100%|bar| 100/100\n"}
    assert outputs[1]["text"] == "\r  0%|bar| 0/100"    # the notebook's own outputs are not changed


def test_separate_prints_keep_their_lines():
    merged = book_extras._coalesce_streams([_stream("stdout", "a\n"), _stream("stdout", "b\n")])
    assert [o["text"] for o in merged] == ["a\nb\n"]


def test_markdown_code_spans_become_literals_in_docstrings():
    lines = ["Returns `x` of shape (B, L); see :func:`f` and ``y``; |Y| counts tokens."]
    book_extras._markdown_code_to_literal(None, "function", "f", None, {}, lines)
    assert (lines
            == ["Returns ``x`` of shape (B, L); see :func:`f` and ``y``; \\|Y\\| counts tokens."])


def test_the_themes_colour_mode_defaults_to_auto():
    """Without it the theme's script logs 'Got invalid theme mode' on a reader's first visit."""
    from types import SimpleNamespace
    config = SimpleNamespace(html_context={"github_user": "x"})
    book_extras._default_mode(None, config)
    assert config.html_context == {"default_mode": "auto", "github_user": "x"}
    config = SimpleNamespace(html_context={"default_mode": "dark"})
    book_extras._default_mode(None, config)
    assert config.html_context == {"default_mode": "dark"}             # the book's own choice
