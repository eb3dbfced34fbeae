"""The markers of tests/conftest.py behave as documented: a test that needs a program nobody
installed is skipped with one line naming the Debian package, and under CI=true it fails (so a
machine without a browser cannot pass the page's checks by skipping them)."""
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

TEST = '''
import pytest

@pytest.mark.needs_program("no-such-browser-x7", debian="no-such-package-x7")
def test_drives_it():
    raise AssertionError("ran without its program")
'''


def run_suite(tmp_path: Path, ci: bool) -> subprocess.CompletedProcess:
    shutil.copy(ROOT / "tests" / "conftest.py", tmp_path / "conftest.py")
    (tmp_path / "test_it.py").write_text(TEST)
    env = {k: v for k, v in os.environ.items() if k != "CI"} | ({"CI": "true"} if ci else {})
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider",
                           "-p", "no:xdist", str(tmp_path / "test_it.py")], cwd=tmp_path, env=env,
                          capture_output=True, text=True)


def test_a_missing_program_skips_naming_its_package(tmp_path):
    run = run_suite(tmp_path, ci=False)
    assert run.returncode == 0 and "1 skipped" in run.stdout, run.stdout
    assert "apt-get install no-such-package-x7" in run.stdout


def test_under_ci_a_missing_program_fails(tmp_path):
    run = run_suite(tmp_path, ci=True)
    assert run.returncode == 1 and "1 error" in run.stdout, run.stdout
    assert "under CI=true the browser tests must run" in run.stdout
