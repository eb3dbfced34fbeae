"""Is transformer_lib/ exactly what the notebooks export? Used by tests/test_export_sync.py.

Exports a copy of the notebooks into a scratch directory with nbdev and compares it, file by file,
with the package in the repository, so a notebook edited without `nbdev-export` is caught (and so
is a module edited by hand, or a stale module no notebook exports any more).
"""
from __future__ import annotations

import filecmp
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HAND_WRITTEN = {"__init__.py"}  # the only module not exported from a notebook


def export_into(scratch: Path, root: Path = ROOT) -> Path:
    """Copy pyproject.toml and notebooks/ of `root` into `scratch`, run nbdev-export there, return
    the lib."""
    shutil.copy(root / "pyproject.toml", scratch / "pyproject.toml")
    shutil.copytree(root / "notebooks", scratch / "notebooks",
                    ignore=shutil.ignore_patterns(".ipynb_checkpoints", "__pycache__"))
    (scratch / "transformer_lib").mkdir()
    for name in HAND_WRITTEN:
        shutil.copy(root / "transformer_lib" / name, scratch / "transformer_lib" / name)
    exporter = Path(sys.executable).with_name("nbdev-export")
    subprocess.run([str(exporter)], cwd=scratch, check=True, capture_output=True, text=True)
    return scratch / "transformer_lib"


def drift(lib: Path, exported: Path) -> list[str]:
    """Differences between the package `lib` and a fresh export `exported`, one line per file."""
    def modules(root: Path) -> set[str]:     # the subpackage transformer_lib/exercises/ included
        return {p.relative_to(root).as_posix() for p in root.rglob("*.py")
                if "__pycache__" not in p.parts}
    mine, fresh = modules(lib), modules(exported)
    problems = [f"{n}: exported by a notebook but missing from {lib}" for n in sorted(fresh - mine)]
    problems += [f"{n}: in {lib} but no notebook exports it (stale?)"
                 for n in sorted(mine - fresh - HAND_WRITTEN)]
    problems += [f"{n}: differs from what the notebooks export (run nbdev-export)"
                 for n in sorted(mine & fresh)
                 if not filecmp.cmp(lib / n, exported / n, shallow=False)]
    return problems
