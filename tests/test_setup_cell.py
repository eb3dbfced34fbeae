"""The notebooks' set-up cell (tests/setup_cell.py), run in a fresh interpreter with packages hidden
(`sys.modules[name] = None`: `find_spec` and `import` then behave as if it were not installed) and
pip faked, or real pip pointed at a repository that cannot be reached."""
import json
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from setup_cell import REPO_URL, setup_cell_source

import transformer_lib

ROOT = Path(__file__).resolve().parents[1]
PIP_CALL = [sys.executable, "-m", "pip", "install", "-q", "--upgrade",
            f"transformer-lib[colab] @ git+{REPO_URL}"]

DRIVER = """
import json, subprocess, sys
HIDDEN, FAKE_PIP, SOURCE = json.loads(sys.argv[1]), json.loads(sys.argv[2]), sys.argv[3]
for name in HIDDEN:
    sys.modules[name] = None
calls = []
def fake_run(cmd, **kwargs):
    calls.append(cmd)
    return subprocess.CompletedProcess(cmd, FAKE_PIP["rc"], "", FAKE_PIP["stderr"])
if FAKE_PIP is not None:
    subprocess.run = fake_run
try:
    exec(compile(SOURCE, "<set-up cell>", "exec"), {"__name__": "__main__"})
finally:
    print("PIP CALLS " + json.dumps(calls))
"""


def run_cell(hidden=(), fake_pip=None, source=None, pythonpath=ROOT, env=None):
    """Run the cell; returns (return code, what it printed, the pip commands it ran (faked),
    stderr)."""
    fake_pip = {"rc": 0, "stderr": ""} if fake_pip is None else fake_pip
    env = {**os.environ, "PYTHONPATH": str(pythonpath), "PIP_NO_INDEX": "1", **(env or {})}
    r = subprocess.run([sys.executable, "-c", DRIVER, json.dumps(list(hidden)),
                        json.dumps(fake_pip or None),
                        # where notebooks run
                        source or setup_cell_source()], cwd=ROOT / "notebooks", env=env,
                       capture_output=True, text=True, timeout=300)
    lines = r.stdout.strip().splitlines()
    assert lines and lines[-1].startswith("PIP CALLS "), r.stdout + r.stderr
    return r.returncode, lines[:-1], json.loads(lines[-1].removeprefix("PIP CALLS ")), r.stderr


def test_does_nothing_when_everything_is_installed():
    rc, printed, calls, _ = run_cell()
    assert (rc, printed, calls) == (0, [], [])


def test_installs_a_missing_extra_and_says_so_in_one_line():
    # an install of transformer_lib without its extras: the reader met a bare ModuleNotFoundError
    # later
    rc, printed, calls, _ = run_cell(hidden=["tqdm"])
    assert rc == 0 and calls == [PIP_CALL]
    assert printed == [f"Installed transformer_lib from {REPO_URL} (missing: tqdm)."]


def test_installs_a_missing_package_and_names_everything_missing():
    rc, printed, calls, _ = run_cell(hidden=["transformer_lib", "matplotlib", "sacrebleu"])
    assert rc == 0 and calls == [PIP_CALL]
    assert (printed == [f"Installed transformer_lib from {REPO_URL} (missing: transformer_lib, "
                        "sacrebleu, matplotlib)."])


def test_repairs_another_version(tmp_path):
    (tmp_path / "transformer_lib").mkdir()
    (tmp_path / "transformer_lib" / "__init__.py").write_text('__version__ = "0.0.1"\n')
    extras = Path(__import__("tqdm").__file__).parents[1]   # the extras stay importable
    rc, printed, calls, _ = run_cell(pythonpath=f"{tmp_path}{os.pathsep}{extras}")
    assert rc == 0 and calls == [PIP_CALL]
    assert printed == [f"Installed transformer_lib from {REPO_URL} "
                       f"(missing: transformer_lib {transformer_lib.__version__} (another version "
                       "is installed))."]


def test_a_failed_install_is_one_clear_error():
    stderr = ("  error: subprocess-exited-with-error\n  × git clone --filter=blob:none --quiet ... "
              "did not run successfully.\n  │ exit code: 128\n      fatal: unable to access 'x': "
              "Could not resolve host: github.com\n")
    rc, printed, calls, err = run_cell(hidden=["tqdm"], fake_pip={"rc": 1, "stderr": stderr})
    assert rc != 0 and calls == [PIP_CALL] and printed == []
    assert err.strip().splitlines()[-1] == ("RuntimeError: Could not install transformer_lib from "
                                            f"{REPO_URL} (is this runtime online?): fatal: unable "
                                            "to access 'x': Could not resolve host: github.com")


def test_a_failed_install_in_colour_keeps_its_reason():
    """Jupyter kernels set FORCE_COLOR=1, so pip's `ERROR:` lines and git's `fatal:` lines can start
    with ANSI colour codes; the cell must still find them, and show them without the codes."""
    red, bold, reset = "\x1b[31m", "\x1b[1m", "\x1b[0m"
    stderr = (f"  {red}error{reset}: {bold}subprocess-exited-with-error{reset}\n"
              f"      {red}fatal: unable to access 'x': Could not resolve host: github.com{reset}\n"
              f"{red}ERROR: Failed to build installable wheels for some pyproject.toml based "
              f"projects{reset}\n")
    rc, printed, calls, err = run_cell(hidden=["tqdm"], fake_pip={"rc": 1, "stderr": stderr})
    assert rc != 0 and calls == [PIP_CALL] and printed == []
    assert err.strip().splitlines()[-1] == ("RuntimeError: Could not install transformer_lib from "
                                            f"{REPO_URL} (is this runtime online?): fatal: unable "
                                            "to access 'x': Could not resolve host: github.com "
                                            "ERROR: Failed to build installable wheels for some "
                                            "pyproject.toml based projects")


@pytest.mark.parametrize("colour", [{}, {"FORCE_COLOR": "1"}])       # a Jupyter kernel's setting
def test_an_unreachable_repository_with_real_pip(colour):
    # nothing listens on port 9 of this machine; PIP_NO_INDEX keeps pip off the package index as
    # well
    url = "https://127.0.0.1:9/attention-derived/attention-derived"
    rc, printed, _, err = run_cell(hidden=["tqdm"], fake_pip=False,
                                   source=setup_cell_source(url=url), env=colour)
    last = err.strip().splitlines()[-1]
    assert rc != 0 and printed == [] and "CalledProcessError" not in err
    assert (last.startswith(f"RuntimeError: Could not install transformer_lib from {url} (is this "
                            "runtime online?): "))
    assert "fatal:" in last or "ERROR:" in last, last
    assert "\x1b" not in last


def test_the_cell_checks_the_colab_extra():
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    extra = pyproject["project"]["optional-dependencies"]["colab"]
    wanted = {re.match(r"[A-Za-z0-9_-]+", req)[0].lower() for req in extra}
    checked = re.search(r"missing = \[m for m in \(([^)]*)\)", setup_cell_source())[1]
    assert {name.strip().strip('"') for name in checked.split(",")} == wanted | {"transformer_lib"}
