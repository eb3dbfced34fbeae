"""The run times of the exercises (book/exercises.md) are measured, not typed: the page's run-time
table is what benchmarks/experiments/exercise_times.py writes from its record,
results/exercise-times-cpu.json, and the script itself is checked on a two-cell notebook."""
from __future__ import annotations

import json
import re
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[1]
import exercise_times  # noqa: E402

PAGE = ROOT / "book" / "exercises.md"
RECORD = ROOT / "results" / "exercise-times-cpu.json"
SOLUTIONS = sorted((ROOT / "notebooks" / "exercises" / "solutions").glob("ex*_solution.ipynb"))


def test_the_page_quotes_run_times_only_from_the_record():
    """With the record, the page's block is the table the script renders from it, for every
    exercise; without it, the page states no run time at all."""
    text = PAGE.read_text()
    block = exercise_times.page_block(text)
    if RECORD.is_file():
        record = json.loads(RECORD.read_text())
        assert block == exercise_times.render(record), (
            "book/exercises.md's run times differ from results/exercise-times-cpu.json: run "
            "python benchmarks/experiments/exercise_times.py --page book/exercises.md "
            "--from-record "
            "results/exercise-times-cpu.json")
        assert [n["path"] for n in record["notebooks"]] == [
            p.relative_to(ROOT).as_posix() for p in SOLUTIONS]
    else:
        assert block == ""
        outside = text.replace(block, "")
        assert not re.search(r"run time|\b\d+ s\b", outside, re.IGNORECASE), (
            "book/exercises.md states run times that no record in results/ holds")


def test_the_script_times_every_cell_and_writes_the_page(tmp_path):
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell("A two-cell notebook."),
                nbformat.v4.new_code_cell("import time\nx = 1"),
                nbformat.v4.new_code_cell("time.sleep(0.5)\nassert x == 1")]
    path = tmp_path / "ex9_tiny_solution.ipynb"
    nbformat.write(nb, path)
    page = tmp_path / "exercises.md"
    page.write_text(PAGE.read_text())
    out = tmp_path / "record.json"
    record = exercise_times.main(["--notebooks", str(path), "--threads", "1", "--json", str(out),
                                  "--page", str(page)])
    assert json.loads(out.read_text()) == record
    (run,) = record["notebooks"]
    assert [c["index"] for c in run["cells"]] == [1, 2]
    assert run["slowest"]["index"] == 2 and 0.5 <= run["slowest"]["seconds"] < 5
    assert run["seconds"] >= sum(c["seconds"] for c in run["cells"])
    assert record["threads"] == 1 and record["kernel_threads"] == 1
    for field in ("git_commit", "date", "device", "cpu", "torch", "command_line",
                  "load_average_before"):
        assert field in record, field
    block = exercise_times.page_block(page.read_text())
    assert block == exercise_times.render(record) and "| 9 |" in block
    # the page's other text is untouched, and a second write replaces the block, not adds one
    exercise_times.main(["--page", str(page), "--from-record", str(out)])
    assert page.read_text().count(exercise_times.BEGIN) == 1
    original = PAGE.read_text()
    original_block = exercise_times.page_block(original)
    assert page.read_text().replace(block + "\n", "") == (
        original.replace(original_block + "\n", "") if original_block else original)


def test_a_failing_cell_stops_the_measurement(tmp_path):
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("raise ValueError('wrong')")]
    path = tmp_path / "ex8_bad_solution.ipynb"
    nbformat.write(nb, path)
    with pytest.raises(Exception, match="wrong"):
        exercise_times.main(["--notebooks", str(path), "--threads", "1"])


def test_the_page_says_which_notebooks_changed_after_the_record(tmp_path):
    """The record keeps each notebook's SHA-256; the page says which of them were edited after
    it was made, so that it never presents the times of an earlier version as the current one's."""
    import hashlib
    paths = [tmp_path / f"ex{i}_x_solution.ipynb" for i in (1, 2, 3)]
    for p in paths:
        p.write_text(p.name)
    runs = [{"path": str(p), "sha256": hashlib.sha256(p.read_bytes()).hexdigest(), "seconds": 2.0,
             "slowest": {"seconds": 1.0}} for p in paths]
    record = {"load_average_before": [0.1], "kernel_threads": 1, "cpu": "a CPU", "torch": "2",
              "date": "2026-01-01T00:00:00", "git_commit": "abcdef0123", "notebooks": runs}
    assert exercise_times.edited_since(record) == []
    assert "at commit abcdef0; " not in exercise_times.render(record)
    paths[1].write_text("edited")
    assert exercise_times.edited_since(record) == ["2"]
    assert "exercise 2's notebook has been edited since" in exercise_times.render(record)
    for p in paths:
        p.write_text("edited")
    assert "every one of them has been edited since" in exercise_times.render(record)
