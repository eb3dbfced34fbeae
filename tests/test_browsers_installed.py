"""Browsers on every machine CI runs on: `.ci/run` installs Debian's chromium and firefox-esr where
they are missing and it can, and the `needs_browser` marker (tests/conftest.py) skips a browser
test without its browser locally, naming the package, but fails it under CI=true."""
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


class _Item:
    """What `pytest_runtest_setup` reads of a test: its markers."""

    def __init__(self, *marks):
        self.marks = marks

    def iter_markers(self, name):
        return [m.mark for m in self.marks if m.mark.name == name]


def test_a_missing_browser_skips_locally_and_names_the_package(monkeypatch):
    import conftest  # tests/conftest.py: the shared markers
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match="apt-get install firefox-esr"):
        conftest.pytest_runtest_setup(_Item(pytest.mark.needs_browser("firefox", None)))
    with pytest.raises(pytest.skip.Exception, match="apt-get install chromium"):
        conftest.pytest_runtest_setup(_Item(pytest.mark.needs_browser("chromium", None)))
    conftest.pytest_runtest_setup(_Item(pytest.mark.needs_browser("chromium", "/usr/bin/x")))


def test_the_run_ends_with_one_line_naming_what_to_install(monkeypatch):
    import conftest

    class Skipped:
        longrepr = ("tests/x.py", 1, "Skipped: " + conftest.BROWSER_SKIP.format(
            name="firefox", package="firefox-esr"))

    class Reporter:
        stats, lines = {"skipped": [Skipped(), Skipped()]}, []

        def write_line(self, line):
            self.lines.append(line)

    reporter = Reporter()
    conftest.pytest_terminal_summary(reporter)
    assert len(reporter.lines) == 1 and "apt-get install firefox-esr" in reporter.lines[0]
    reporter.stats, reporter.lines = {"skipped": []}, []
    conftest.pytest_terminal_summary(reporter)
    assert reporter.lines == []


def test_a_missing_browser_fails_under_ci(monkeypatch):
    import conftest
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="CI=true and no firefox installed"):
        conftest.pytest_runtest_setup(_Item(pytest.mark.needs_browser("firefox", None)))


@pytest.mark.parametrize("uid, installs", [(0, True), (1000, False)])
def test_ci_installs_the_missing_browsers_as_root_only(tmp_path, uid, installs):
    """The part of .ci/run before the README's command, on a PATH with neither browser and a fake
    `id` and `apt-get`: as root it installs both; as a user it changes nothing."""
    script = (ROOT / ".ci" / "run").read_text()
    before = script[:script.index("export CI=true")].replace('cd "$(dirname "$0")/.."', "")
    log = tmp_path / "apt.log"
    for tool, body in (("id", f"echo {uid}"), ("apt-get", f'echo "$@" >> {log}')):
        (tmp_path / tool).write_text(f"#!/bin/sh\n{body}\n")
        (tmp_path / tool).chmod(0o755)
    bash = subprocess.run(["sh", "-c", "command -v bash"], capture_output=True, text=True)
    done = subprocess.run([bash.stdout.strip(), "-c", before], env={"PATH": str(tmp_path)},
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    asked = log.read_text() if log.exists() else ""
    assert ("install" in asked and "chromium firefox-esr" in asked) == installs, asked
