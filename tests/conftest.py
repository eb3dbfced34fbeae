"""What every test file shares: the markers.

- `needs_data` (or `needs_data("tinyshakespeare")`): the test reads that dataset from the directory
  TRANSFORMER_LIB_DATA names. Skipped where it is not there, except under CI (CI=true), where a
  missing dataset is a failure: CI must run every test.
- `slow` (registered in pyproject.toml): the test takes more than about fifteen seconds on two
  cores (`--durations` shows which); `make quick` leaves these out.

And the scripts of benchmarks/: `benchmark_script(name)` is the path of one (benchmarks/ is split
by kind into folders), and the folders are importable, so a test imports a script by its name, as
`python benchmarks/KIND/NAME.py` imports its neighbours.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
KINDS = ("speed", "experiments", "trials", "tools")         # benchmarks/README.md: what each is
for kind in KINDS:
    sys.path.insert(0, str(BENCHMARKS / kind))


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


def pytest_configure(config):
    config.addinivalue_line("markers", "needs_data(name='multi30k'): reads a dataset of "
                            "TRANSFORMER_LIB_DATA; skipped without it, except under CI")


def pytest_runtest_setup(item):
    for mark in item.iter_markers("needs_data"):
        name = mark.args[0] if mark.args else "multi30k"
        if not have_dataset(name) and not os.environ.get("CI"):
            pytest.skip(f"{ENV_VAR} does not point at the shared datasets ({name} not found)")
