"""Every module of the package says what it holds, and no docstring cites a label that only the book
resolves.

The book labels its equations and sections in MyST, `$$ ... $$ (eq-param-count)` and
`(chapter-masking)=`, and
cites them with `{eq}` and `{ref}`. In the book those become numbers and links; in `help()` or an
editor they are
dead names ("eqs. mha-head, mha"). A docstring cites the paper (section, equation number) and the
chapter instead.
"""
import ast
import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "transformer_lib"
MODULES = sorted(p for p in PACKAGE.rglob("*.py")              # exercises/ included
                 if p.name != "_modidx.py" and "__pycache__" not in p.parts)

LABEL_TARGET = re.compile(r"^\(([\w-]+)\)=", re.M)              # (chapter-masking)=
EQUATION_LABEL = re.compile(r"\$\$\s*\(([\w-]+)\)")               # $$ ... $$ (eq-param-count)
MYST_ROLE = re.compile(r"\{(?:eq|ref|numref|doc|cite(?::\w+)?)\}`")
# "eq. param-count", "eqs. mha-head, mha", "equation layer-norm": an equation named, not numbered
NAMED_EQUATION = re.compile(r"\b(?:eqs?\.?|equations?)\s*\(?([a-z][a-z0-9]*(?:-[a-z0-9]+)+)", re.I)


def book_labels() -> set[str]:
    """Every label the book defines, in the notebooks' markdown and in book/*.md."""
    texts = [p.read_text() for p in (ROOT / "book").glob("*.md")]
    for path in (ROOT / "notebooks").rglob("*.ipynb"):
        texts += ["".join(c["source"]) for c in json.loads(path.read_text())["cells"]
                  if c["cell_type"] == "markdown"]
    return {m for t in texts for m in LABEL_TARGET.findall(t) + EQUATION_LABEL.findall(t)}


def book_only_citations(text: str, labels: set[str]) -> list[str]:
    """The places in `text` that cite the book by label: MyST roles, its hyphenated labels, named
    equations."""
    found = ([m.group(0) for m in MYST_ROLE.finditer(text)]
             + [m.group(0) for m in NAMED_EQUATION.finditer(text)])
    for label in labels:
        if "-" in label and re.search(rf"(?<![\w-]){re.escape(label)}(?![\w-])", text):
            found.append(label)
    return found


def docstrings(path: Path):
    """(where, docstring) for the module and every class and function in it, nested ones
    included."""
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            doc = ast.get_docstring(node)
            if doc:
                name = getattr(node, "name", "<module>")
                yield f"{path.stem}.{name}:{getattr(node, 'lineno', 1)}", doc


@pytest.mark.parametrize("path", MODULES, ids=[p.relative_to(PACKAGE).as_posix() for p in MODULES])
def test_every_module_has_a_docstring(path):
    doc = ast.get_docstring(ast.parse(path.read_text()))
    assert doc, (f"{path.name} has no module docstring (put it first in the notebook's first `#| "
                 "export` cell)")
    if path != PACKAGE / "__init__.py":
        # nbdev-export rewrites __init__.py's docstring as a list of modules as soon as one module's
        # docstring has more than 3 lines (nbdev.config._substantive), replacing the one written by
        # hand.
        assert 2 <= len(doc.splitlines()) <= 3, (f"{path.name}: a module docstring of "
                                                 f"{len(doc.splitlines())} lines")


def test_package_docstring_is_the_one_written_by_hand():
    doc = ast.get_docstring(ast.parse((PACKAGE / "__init__.py").read_text()))
    assert "Mask convention" in doc and "Modules:" not in doc


def test_module_docstrings_name_the_chapter_they_come_from():
    for path in MODULES:
        if path == PACKAGE / "__init__.py":        # by hand (exercises/__init__.py is exported)
            continue
        doc = ast.get_docstring(ast.parse(path.read_text()))
        source = re.search(r"File to edit: (?:\.\./)+(notebooks/\S+\.ipynb)",
                           path.read_text()).group(1)
        assert source in doc, f"{path.name}: the docstring does not name its notebook {source}"


def test_no_docstring_cites_a_book_only_label():
    labels = book_labels()
    assert {"eq-param-count", "chapter-masking", "appendix-data"} <= labels
    bad = {where: cited for path in MODULES for where, doc in docstrings(path)
           if (cited := book_only_citations(doc, labels))}
    assert not bad, f"docstrings citing labels only the book resolves: {bad}"


@pytest.mark.parametrize("text", [
    "Parameters by part (eq. param-count).",
    "as in chapter 05 eqs. mha-head, mha",
    "LayerNorm written out (equation layer-norm-stats).",
    "see {eq}`eq-ffn`",
    "see {ref}`chapter-masking`",
    "see chapter-masking",
])
def test_the_check_finds_book_labels(text):
    assert book_only_citations(text, book_labels())


@pytest.mark.parametrize("text", [
    "softmax(Q K^T / sqrt(d_k)) V: the paper's eq. (1), section 3.2.1 (chapter 02).",
    "The paper's warm-up schedule (eq. 3); eqs. (1) and (2).",
    "Multi-head attention (section 3.2.2; chapter 05, notebooks/05_multi_head_attention.ipynb).",
    "pre-LN and post-LN layers; a key/value cache; a mask broadcast to (B, h, L_q, L_k).",
])
def test_the_check_passes_paper_citations(text):
    assert not book_only_citations(text, book_labels())
