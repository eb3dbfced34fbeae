"""book/_ext/nbdev_directives.py: nbdev's `#| ...` lines stay in the notebooks, not on the pages."""
import html
import importlib.util
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

pytest.importorskip("myst_nb")

ROOT = Path(__file__).resolve().parents[1]
_path = ROOT / "book" / "_ext" / "nbdev_directives.py"
_spec = importlib.util.spec_from_file_location("nbdev_directives", _path)
nbdev_directives = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(nbdev_directives)
strip = nbdev_directives.strip_directives


def test_leading_directives_go_and_the_code_stays():
    assert strip("#| export\ndef f(x):\n    return x\n") == "def f(x):\n    return x\n"
    assert strip("#| hide\n# | exporti\n\n#|eval: false\nx = 1") == "x = 1"
    assert strip("#| default_exp model") == ""
    assert strip("#| default_exp model\n\n") == ""


def test_code_without_a_leading_directive_is_untouched():
    for source in ["x = 1", "", "\n\nx = 1", "# a comment\n#| export\nx = 1",
                   "s = '#| export'\n", "%%time\nx = 1"]:
        assert strip(source) is source


def test_magics_and_later_directive_like_lines_are_kept():
    assert strip("%%time\n#| export\nx = 1") == "%%time\nx = 1"
    later = "x = 1\n#| not a directive here\n"
    assert strip("#| export\n" + later) == later


def test_the_book_loads_the_extension():
    config = yaml.safe_load((ROOT / "book" / "_config.yml").read_text())
    assert config["sphinx"]["local_extensions"].get("nbdev_directives") == "_ext"


def _page_text(page: str) -> str:
    """The article's visible text: tags dropped, entities decoded."""
    article = page[page.index('<article class="bd-article">'):page.index("</article>")]
    return html.unescape(re.sub(r"<[^>]+>", "", article))


def test_a_built_page_shows_the_code_without_its_directives(tmp_path):
    """A one-page Jupyter Book built (and executed) with the book's own local extensions."""
    jupyter_book = Path(sys.executable).parent / "jupyter-book"
    if not jupyter_book.exists():
        pytest.skip("jupyter-book is not installed next to this Python")
    nbformat = pytest.importorskip("nbformat")
    book = yaml.safe_load((ROOT / "book" / "_config.yml").read_text())
    extensions = {name: str((ROOT / "book" / path).resolve())
                  for name, path in book["sphinx"]["local_extensions"].items()}
    (tmp_path / "_config.yml").write_text(yaml.safe_dump({
        "title": "toy", "only_build_toc_files": True,
        "execute": {"execute_notebooks": "force", "allow_errors": False},
        "sphinx": {"extra_extensions": book["sphinx"].get("extra_extensions", []),
                   "local_extensions": extensions}}))
    (tmp_path / "_toc.yml").write_text("format: jb-book\nroot: toy\n")
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                                 "language": "python"}
    folded = nbformat.v4.new_code_cell("#| export\ndef _helper():\n    return 'folded'")
    folded.metadata["tags"] = ["hide-input"]
    nb.cells = [nbformat.v4.new_markdown_cell("# Toy"),
                nbformat.v4.new_code_cell("#| default_exp toy"),
                nbformat.v4.new_code_cell("#| export\ndef twice(x):\n    return 2 * x"),
                folded,
                nbformat.v4.new_code_cell("# | hide\nmarker = '#| kept'\nprint(twice(21), marker)")]
    notebook = tmp_path / "toy.ipynb"
    nbformat.write(nb, notebook)
    before = notebook.read_bytes()

    nice = ["nice", "-n", "19"] if shutil.which("nice") else []
    done = subprocess.run([*nice, str(jupyter_book), "build", str(tmp_path), "-W", "-n"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]

    text = _page_text((tmp_path / "_build" / "html" / "toy.html").read_text())
    assert "def twice(x):" in text and "return 2 * x" in text
    assert "def _helper():" in text                     # the folded cell, shown when opened
    assert "42 #| kept" in text                         # executed; a `#|` inside code is kept
    assert "marker = '#| kept'" in text
    assert "export" not in text and "default_exp" not in text and "| hide" not in text
    assert text.count("#|") == 2                        # the string and its printed copy only
    assert notebook.read_bytes() == before              # the notebook itself is not changed
    source = json.loads((tmp_path / "_build" / "html" / "_sources" / "toy.ipynb").read_text())
    assert "".join(source["cells"][2]["source"]).startswith("#| export")   # nor its download
