"""Notebook hygiene: clean diffs, a Colab badge and set-up cell on every notebook (with the
repository URL taken from its one home, book/_config.yml), every notebook in the book, and package
layering."""
import ast
import json
import re
from pathlib import Path

import pytest
import yaml
from setup_cell import VERSION, badge_source, setup_cell_source

ROOT = Path(__file__).resolve().parents[1]
CONFIG = yaml.safe_load((ROOT / "book" / "_config.yml").read_text())
REPO_URL = CONFIG["repository"]["url"]
NOTEBOOKS = sorted(p for p in (ROOT / "notebooks").rglob("*.ipynb")
                   if ".ipynb_checkpoints" not in p.parts)
# Notebooks committed with their outputs on purpose (executed on a GPU; the book shows those
# outputs).
EXECUTED_ON_PURPOSE: set[str] = set()


def _ids(paths):
    return [str(p.relative_to(ROOT / "notebooks")) for p in paths]


def _toc_files(node):
    if isinstance(node, dict):
        if "file" in node:
            yield node["file"]
        for v in node.values():
            yield from _toc_files(v)
    elif isinstance(node, list):
        for v in node:
            yield from _toc_files(v)


def test_there_are_notebooks():
    assert len(NOTEBOOKS) >= 4


@pytest.mark.parametrize("path", NOTEBOOKS, ids=_ids(NOTEBOOKS))
def test_notebook_is_clean(path):
    nb = json.loads(path.read_text())
    rel = str(path.relative_to(ROOT / "notebooks"))
    if rel not in EXECUTED_ON_PURPOSE:
        for i, cell in enumerate(nb["cells"]):
            if cell["cell_type"] == "code":
                assert cell.get("execution_count") is None, (f"{rel} cell {i}: execution count "
                                                             "(run nbdev-clean)")
                assert not cell.get("outputs"), (f"{rel} cell {i} has outputs: commit notebooks "
                                                 "without outputs")
    assert set(nb["metadata"]) <= {"kernelspec", "language_info"}, f"{rel}: notebook metadata noise"


# MathJax (without its textmacros extension) shows \text{...} verbatim: \text{max\_len} renders
# "max\_len".
TEXT_WITH_ESCAPE = re.compile(r"\\text\{[^}]*\\[^}]*\}")


@pytest.mark.parametrize("path", NOTEBOOKS + sorted((ROOT / "book").glob("*.md")),
                         ids=_ids(NOTEBOOKS)
                         + [p.name for p in sorted((ROOT / "book").glob("*.md"))])
def test_no_macros_inside_text_in_math(path):
    text = "".join("".join(c["source"]) for c in json.loads(path.read_text())["cells"]
                   if c["cell_type"] == "markdown") \
        if path.suffix == ".ipynb" else path.read_text()
    bad = TEXT_WITH_ESCAPE.findall(text)
    assert not bad, (f"{path.name}: {bad} would render with its backslashes; write e.g. "
                     "\\mathrm{max\\_len}")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=_ids(NOTEBOOKS))
def test_colab_badge_and_setup_cell(path):
    nb = json.loads(path.read_text())
    rel = path.relative_to(ROOT).as_posix()
    badge, setup = nb["cells"][0], nb["cells"][1]
    assert (badge["cell_type"] == "markdown" and "".join(badge["source"]) == badge_source(rel)), \
        (f"{rel}: first cell must be the Open-in-Colab badge linking to this notebook in the "
         f"release v{VERSION} (`python tests/setup_cell.py` writes it)")
    cell = "".join(setup["source"])
    pinned = re.search(r'^URL, VERSION = "[^"]*", "([^"]*)"$', cell, re.M)
    assert not pinned or pinned[1] == VERSION, \
        (f"{rel}: the set-up cell installs release {pinned[1]} but transformer_lib.__version__ is "
         f"{VERSION}: run `python tests/setup_cell.py` (the release routine in CHANGELOG.md)")
    assert cell == setup_cell_source(), \
        f"{rel}: second cell must be the standard set-up cell (tests/setup_cell.py writes it)"
    for cell in (badge, setup):
        assert "remove-cell" in cell.get("metadata", {}).get("tags", []), (f"{rel}: hide "
                                                                           "badge/set-up in the "
                                                                           "book")


def test_every_notebook_is_in_the_book():
    toc = yaml.safe_load((ROOT / "book" / "_toc.yml").read_text())
    listed = set(_toc_files(toc))
    missing = [p.relative_to(ROOT).with_suffix("").as_posix() for p in NOTEBOOKS
               if p.relative_to(ROOT).with_suffix("").as_posix() not in listed]
    assert not missing, f"notebooks missing from book/_toc.yml: {missing}"


# Modules that may import more than torch. Every other module is a model module: torch and the
# standard library only, and no import of the modules listed here.
NON_MODEL = {"plotting", "data", "text", "bleu", "train", "stages", "records", "training",
             "trainer", "exercises", "toy", "engineering", "recipe",
             "checkpoint", "benchmark", "interop", "equal_time", "inside", "export", "wmt14"}
HEAVY = {"matplotlib", "tokenizers", "sacrebleu", "tqdm", "numpy", "pandas", "yaml"}


@pytest.mark.parametrize("module", sorted(p.stem for p in (ROOT / "transformer_lib").glob("*.py")
                                          if not p.stem.startswith("_")
                                          and p.stem not in NON_MODEL))
def test_model_modules_import_only_torch(module):
    tree = ast.parse((ROOT / "transformer_lib" / f"{module}.py").read_text())
    for node in ast.walk(tree):
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            names = [("." * node.level) + (node.module or "")]
        for name in names:
            top = name.lstrip(".").split(".")[0]
            assert top not in HEAVY, f"model module {module} imports {name}"
            if name.startswith(".") or name.startswith("transformer_lib"):
                sub = (name.lstrip(".").split(".")[-1] if name.startswith(".")
                       else name.split(".")[1])
                assert sub not in NON_MODEL, (f"model module {module} imports the non-model module "
                                              f"{sub}")
