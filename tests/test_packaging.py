"""Package metadata tells the truth: one home for the version, and a Python floor the code really
needs."""
import re
import tomllib
from pathlib import Path

import transformer_lib

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


def test_version_has_one_home():
    project = PYPROJECT["project"]
    assert "version" not in project and "version" in project["dynamic"], ("pyproject must not type "
                                                                          "the version")
    assert (PYPROJECT["tool"]["setuptools"]["dynamic"]["version"]
            == {"attr": "transformer_lib.__version__"})


def test_setuptools_reads_the_version_from_the_package():
    from setuptools.config.pyprojecttoml import read_configuration

    config = read_configuration(ROOT / "pyproject.toml", expand=True)
    assert config["project"]["version"] == transformer_lib.__version__


def _python_floor() -> tuple[int, int]:
    m = re.fullmatch(r">=\s*3\.(\d+)", PYPROJECT["project"]["requires-python"].strip())
    assert m, "requires-python should be a plain lower bound '>=3.N'"
    return 3, int(m.group(1))


def test_requires_python_covers_the_standard_library_the_code_uses():
    # tomllib (3.11) is imported by transformer_lib.train; a floor below it installs a package that
    # fails.
    uses_tomllib = any("import tomllib" in p.read_text()
                       for p in (ROOT / "transformer_lib").glob("*.py"))
    assert uses_tomllib and _python_floor() >= (3, 11)


def test_ruff_targets_the_python_floor():
    major, minor = _python_floor()
    assert PYPROJECT["tool"]["ruff"]["target-version"] == f"py{major}{minor}"
