"""What every test file shares: the markers.

- `needs_data` (or `needs_data("tinyshakespeare")`): the test reads that dataset from the directory
  TRANSFORMER_LIB_DATA names. Skipped where it is not there, except under CI (CI=true), where a
  missing dataset is a failure: CI must run every test.
- `slow` (registered in pyproject.toml): the test takes more than about fifteen seconds on two
  cores (`--durations` shows which); `make quick` leaves these out.
"""
from __future__ import annotations

import os
from pathlib import Path

import pytest

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
