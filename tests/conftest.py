"""What every test file shares: the markers.

- `needs_data` (or `needs_data("tinyshakespeare")`): the test reads that dataset from the directory
  TRANSFORMER_LIB_DATA names. Skipped where it is not there, except under CI (CI=true), where a
  missing dataset is a failure: CI must run every test.
- `needs_program("chromium", ..., debian="chromium")`: the test drives one of these programs (a
  browser, pdftotext). Skipped where none is installed, with one line naming the Debian package to
  install, except under CI (CI=true), where it is a failure: .ci/run installs them
  (tools/install_browsers.sh), so a page that breaks cannot land green on a machine without them.
  `needs_chromium` is that marker for Chromium. `needs_browser(name, found)` does the same for a
  browser ("chromium" or "firefox") that the test's module looked up itself (`found`: the
  executable, or None).
- `slow` (registered in pyproject.toml): the test takes more than about fifteen seconds on two
  cores (`--durations` shows which); `make quick` leaves these out.

And the scripts of benchmarks/: `benchmark_script(name)` is the path of one (benchmarks/ is split
by kind into folders), and the folders are importable, so a test imports a script by its name, as
`python benchmarks/KIND/NAME.py` imports its neighbours.

And the exercises' reference answers, which the package does not hold (an exercise's answer is not
one import away): `solution(name)` runs the cells tagged "solution" of
notebooks/exercises/solutions/NAME_solution.ipynb and returns what they define, e.g.
`solution("ex3_char_model")["CharModel"]`.
"""
from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
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

def process_tree(pid: int) -> list[int]:
    "`pid` and every process below it (from /proc: children, their children, ...)."
    parents: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parents.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    todo, tree = [pid], []
    while todo:
        tree.append(todo.pop())
        todo += parents.get(tree[-1], [])
    return tree


def kill_tree(pid: int, sig: int = signal.SIGKILL) -> None:
    """Send `sig` (SIGKILL: as when a machine dies) to `pid` and every process below it. torchrun
    starts each worker in a session of its own, so killing torchrun's process group alone leaves
    the workers running, holding the pipe a test reads: the test would wait forever."""
    for p in process_tree(pid):
        with contextlib.suppress(ProcessLookupError):
            os.kill(p, sig)


ENV_VAR = "TRANSFORMER_LIB_DATA"        # transformer_lib.data.ENV_VAR (tested to agree)
CACHE = Path.home() / ".cache" / "transformer_lib"


def have_dataset(name: str = "multi30k") -> bool:
    root = os.environ.get(ENV_VAR)
    return bool(root) and Path(root, name).exists() or (CACHE / name).exists()


# book/check_site.py's find_chromium looks for the same names
needs_chromium = pytest.mark.needs_program("chromium", "chromium-browser", "google-chrome",
                                           "google-chrome-stable", debian="chromium")


def pytest_configure(config):
    config.addinivalue_line("markers", "needs_data(name='multi30k'): reads a dataset of "
                            "TRANSFORMER_LIB_DATA; skipped without it, except under CI")
    config.addinivalue_line("markers", "needs_program(*names, debian=package): drives one of "
                            "these programs; skipped without them, except under CI")
    config.addinivalue_line("markers", "needs_browser(name, found): drives the browser `name` "
                            "('chromium' or 'firefox'), whose executable its module found (or "
                            "None); skipped without it, except under CI")


def pytest_runtest_setup(item):
    for mark in item.iter_markers("needs_data"):
        name = mark.args[0] if mark.args else "multi30k"
        if not have_dataset(name) and not os.environ.get("CI"):
            pytest.skip(f"{ENV_VAR} does not point at the shared datasets ({name} not found)")
    for mark in item.iter_markers("needs_browser"):
        name, found = mark.args
        if not found:
            missing_program(f"{name}", {"chromium": "chromium", "firefox": "firefox-esr"}[name])
    for mark in item.iter_markers("needs_program"):
        if any(shutil.which(name) for name in mark.args):
            continue
        missing_program(mark.args[0], mark.kwargs.get("debian", mark.args[0]))


def missing_program(name: str, package: str) -> None:
    "Skip a test that needs `name` (a Debian `package`), or under CI=true fail it."
    why = (f"no {name} installed (Debian: apt-get install {package}; .ci/run installs it with "
           "tools/install_browsers.sh)")
    if os.environ.get("CI"):
        pytest.fail(f"{why}: under CI=true the browser tests must run, not skip", pytrace=False)
    pytest.skip(why)
