"""The reader's path through chapters 00-20: the math in cells a reader can hold, the engineering
folded away, and the two longest chapters kept to a length a reader finishes.

These are smoke detectors, not targets: a long unfolded cell or a chapter that grows past its
length is a sign that plumbing or lab history moved back onto the reader's path.
"""
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CHAPTERS = sorted(p for p in (ROOT / "notebooks").glob("[0-9][0-9]*.ipynb"))
FOLDED = {"hide-input", "hide-cell", "remove-input", "remove-cell"}
MAX_UNFOLDED_LINES = 40
MAX_WORDS = {"11_model.ipynb": 4500, "18_capstone.ipynb": 4500}


def cells(path: Path) -> list[dict]:
    return json.loads(path.read_text())["cells"]


def unfolded_long_cells(path: Path) -> list[tuple[str, int]]:
    """(id, lines) of each code cell longer than the limit that is shown on the page."""
    return [(c.get("id"), len("".join(c["source"]).splitlines())) for c in cells(path)
            if c["cell_type"] == "code"
            and not FOLDED & set(c.get("metadata", {}).get("tags", []))
            and len("".join(c["source"]).splitlines()) > MAX_UNFOLDED_LINES]


def prose_words(path: Path) -> int:
    return sum(len("".join(c["source"]).split()) for c in cells(path)
               if c["cell_type"] == "markdown")


def test_the_chapters_are_found():
    names = [p.name for p in CHAPTERS]
    assert names[0].startswith("00_") and names[-1].startswith("20_") and len(names) == 22


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.stem)
def test_no_long_code_cell_is_unfolded(path):
    assert not unfolded_long_cells(path), (
        f"{path.name}: code cells longer than {MAX_UNFOLDED_LINES} lines on the reader's path; "
        "split the math, or fold the engineering (tag hide-input) with a sentence above it")


@pytest.mark.parametrize("name", sorted(MAX_WORDS))
def test_the_longest_chapters_stay_readable(name):
    words = prose_words(ROOT / "notebooks" / name)
    assert words <= MAX_WORDS[name], f"{name}: {words:,} words of prose"


def test_the_detectors_see_a_long_cell_and_a_folded_one(tmp_path):
    long = {"cell_type": "code", "id": "a", "metadata": {}, "source": ["x = 1\n"] * 41}
    folded = dict(long, id="b", metadata={"tags": ["hide-input"]})
    text = {"cell_type": "markdown", "id": "c", "metadata": {}, "source": ["two words"]}
    nb = tmp_path / "99_x.ipynb"
    nb.write_text(json.dumps({"cells": [long, folded, text]}))
    assert unfolded_long_cells(nb) == [("a", 41)] and prose_words(nb) == 2
