"""What every test file shares: the markers.

- `needs_data` (or `needs_data("tinyshakespeare")`): the test reads that dataset from the directory
  TRANSFORMER_LIB_DATA names. Skipped where it is not there, except under CI (CI=true), where a
  missing dataset is a failure: CI must run every test.
- `slow` (registered in pyproject.toml): the test takes more than about fifteen seconds on two
  cores (`--durations` shows which); `make quick` leaves these out.
- `needs_browser(name, found)`: the test drives a headless browser ("chromium" or "firefox";
  `found` is the executable its module looked up, or None). Skipped where it is missing, with the
  Debian package to install (and one line at the end of the run naming all of them), except under
  CI (CI=true), where a missing browser is a failure: `.ci/run` installs both, and CI must run
  every browser test.

And the scripts of benchmarks/: `benchmark_script(name)` is the path of one (benchmarks/ is split
by kind into folders), and the folders are importable, so a test imports a script by its name, as
`python benchmarks/KIND/NAME.py` imports its neighbours.

And the exercises' reference answers, which the package does not hold (an exercise's answer is not
one import away): `solution(name)` runs the cells tagged "solution" of
notebooks/exercises/solutions/NAME_solution.ipynb and returns what they define, e.g.
`solution("ex3_char_model")["CharModel"]`.
"""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
KINDS = ("speed", "experiments", "trials", "tools")         # benchmarks/README.md: what each is
for kind in KINDS:
    sys.path.insert(0, str(BENCHMARKS / kind))


EXERCISES = Path(__file__).resolve().parents[1] / "notebooks" / "exercises"


def tagged_cells(path: Path, tag: str) -> dict:
    """Execute the code cells of a notebook that carry `tag`, in order, in a fresh namespace."""
    nb = json.loads(path.read_text())
    namespace: dict = {"__name__": f"nb_{path.stem}"}
    sources = ["".join(c["source"]) for c in nb["cells"]
               if c["cell_type"] == "code" and tag in c.get("metadata", {}).get("tags", [])]
    assert sources, f"{path.name} has no cell tagged {tag!r}"
    for src in sources:
        exec(compile(src, str(path), "exec"), namespace)
    return namespace


def solution(name: str) -> dict:
    """What the reference solution of exercise `name` ('ex3_char_model') defines."""
    return tagged_cells(EXERCISES / "solutions" / f"{name}_solution.ipynb", "solution")


def benchmark_script(name: str) -> Path:
    "The path of the script `name` (e.g. 'parity.py') in its folder of benchmarks/."
    found = [BENCHMARKS / kind / name for kind in KINDS if (BENCHMARKS / kind / name).is_file()]
    if len(found) != 1:
        raise FileNotFoundError(f"benchmarks/*/{name}: found {len(found)}")
    return found[0]

ENV_VAR = "TRANSFORMER_LIB_DATA"        # transformer_lib.data.ENV_VAR (tested to agree)
CACHE = Path.home() / ".cache" / "transformer_lib"


def have_dataset(name: str = "multi30k") -> bool:
    root = os.environ.get(ENV_VAR)
    return bool(root) and Path(root, name).exists() or (CACHE / name).exists()


# The browsers the page checks drive, by the name a test gives, and Debian's package of each.
BROWSER_PACKAGES = {"chromium": "chromium", "firefox": "firefox-esr"}
BROWSER_SKIP = "no {name} installed (Debian: apt-get install {package})"


def pytest_configure(config):
    config.addinivalue_line("markers", "needs_data(name='multi30k'): reads a dataset of "
                            "TRANSFORMER_LIB_DATA; skipped without it, except under CI")
    config.addinivalue_line("markers", "needs_browser(name, found): drives headless `name` "
                            "(found: its executable or None); skipped without it, except under CI")


def pytest_runtest_setup(item):
    for mark in item.iter_markers("needs_browser"):
        name, found = mark.args
        if not found:
            why = BROWSER_SKIP.format(name=name, package=BROWSER_PACKAGES[name])
            if os.environ.get("CI"):
                pytest.fail(f"CI=true and {why}: .ci/run installs it when it runs as root",
                            pytrace=False)
            pytest.skip(why)
    for mark in item.iter_markers("needs_data"):
        name = mark.args[0] if mark.args else "multi30k"
        if not have_dataset(name) and not os.environ.get("CI"):
            pytest.skip(f"{ENV_VAR} does not point at the shared datasets ({name} not found)")


def pytest_terminal_summary(terminalreporter):
    """One line after a run that skipped browser tests: what to install to run them."""
    packages = sorted({package for report in terminalreporter.stats.get("skipped", [])
                       for name, package in BROWSER_PACKAGES.items()
                       if BROWSER_SKIP.format(name=name, package=package) in str(report.longrepr)})
    if packages:
        terminalreporter.write_line("browser tests skipped: to run them, install "
                                    f"{' and '.join(packages)} (Debian: apt-get install "
                                    f"{' '.join(packages)}); CI=true makes a missing browser fail")
