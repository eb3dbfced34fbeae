"""The notebooks' set-up cell (tests/setup_cell.py), run in a fresh interpreter with packages hidden
(`sys.modules[name] = None`: `find_spec` and `import` then behave as if it were not installed) and
pip faked, or real pip pointed at a repository that cannot be reached, at a local repository without
the release's tag, or at a local repository with it (installing into a scratch folder)."""
import json
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from setup_cell import MAIN_LINE, REF_LINE, REPO_URL, VERSION, setup_cell_source

import transformer_lib

ROOT = Path(__file__).resolve().parents[1]
TAG = f"v{VERSION}"                                     # the release the notebooks pin
# What the error adds about tags: a copy published from main alone has none until `make tags`.
NO_TAGS = ("A copy published from main alone has no tags until `make tags` and `git push origin "
           "--tags` make them")
PIP_CALL = [sys.executable, "-m", "pip", "install", "-q", "--upgrade",
            f"transformer-lib[colab] @ git+{REPO_URL}@{TAG}"]
PIP_CALL_MAIN = PIP_CALL[:-1] + [f"transformer-lib[colab] @ git+{REPO_URL}@main"]
UNINSTALL = [sys.executable, "-m", "pip", "uninstall", "-q", "-y", "transformer-lib"]

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
else:                          # real pip: never let a test uninstall the environment's own copy
    real_run = subprocess.run
    def guarded_run(cmd, **kwargs):
        assert "uninstall" not in cmd, f"a test ran a real pip uninstall: {cmd}"
        calls.append(cmd)
        return real_run(cmd, **kwargs)
    subprocess.run = guarded_run
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
    assert printed == [f"Installed transformer_lib {TAG} from {REPO_URL} (missing: tqdm)."]


def test_installs_a_missing_package_and_names_everything_missing():
    rc, printed, calls, _ = run_cell(hidden=["transformer_lib", "matplotlib", "sacrebleu"])
    assert rc == 0 and calls == [PIP_CALL]
    assert (printed == [f"Installed transformer_lib {TAG} from {REPO_URL} (missing: "
                        "transformer_lib, sacrebleu, matplotlib)."])


def test_repairs_another_version(tmp_path):
    (tmp_path / "transformer_lib").mkdir()
    (tmp_path / "transformer_lib" / "__init__.py").write_text('__version__ = "0.0.1"\n')
    extras = Path(__import__("tqdm").__file__).parents[1]   # the extras stay importable
    rc, printed, calls, _ = run_cell(pythonpath=f"{tmp_path}{os.pathsep}{extras}")
    assert rc == 0 and calls == [PIP_CALL]
    assert printed == [f"Installed transformer_lib {TAG} from {REPO_URL} "
                       f"(missing: transformer_lib {transformer_lib.__version__} (another version "
                       "is installed))."]


FAILED = (f"RuntimeError: Could not install transformer_lib {TAG} from {REPO_URL} (is this runtime "
          f"online, and is {TAG} a tag or branch there? {NO_TAGS}): ")


def test_a_failed_install_is_one_clear_error():
    stderr = ("  error: subprocess-exited-with-error\n  × git clone --filter=blob:none --quiet ... "
              "did not run successfully.\n  │ exit code: 128\n      fatal: unable to access 'x': "
              "Could not resolve host: github.com\n")
    rc, printed, calls, err = run_cell(hidden=["tqdm"], fake_pip={"rc": 1, "stderr": stderr})
    assert rc != 0 and calls == [PIP_CALL] and printed == []
    assert err.strip().splitlines()[-1] == (f"{FAILED}fatal: unable to access 'x': Could not "
                                            "resolve host: github.com")


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
    assert err.strip().splitlines()[-1] == (f"{FAILED}fatal: unable to access 'x': Could not "
                                            "resolve host: github.com ERROR: Failed to build "
                                            "installable wheels for some pyproject.toml based "
                                            "projects")


@pytest.mark.parametrize("colour", [{}, {"FORCE_COLOR": "1"}])       # a Jupyter kernel's setting
def test_an_unreachable_repository_with_real_pip(colour):
    # nothing listens on port 9 of this machine; PIP_NO_INDEX keeps pip off the package index as
    # well
    url = "https://127.0.0.1:9/attention-derived/attention-derived"
    rc, printed, _, err = run_cell(hidden=["tqdm"], fake_pip=False,
                                   source=setup_cell_source(url=url), env=colour)
    last = err.strip().splitlines()[-1]
    assert rc != 0 and printed == [] and "CalledProcessError" not in err
    assert last.startswith(f"RuntimeError: Could not install transformer_lib {TAG} from {url} (is "
                           f"this runtime online, and is {TAG} a tag or branch there? {NO_TAGS}): ")
    assert "fatal:" in last or "ERROR:" in last, last
    assert "\x1b" not in last


def test_the_cell_checks_the_colab_extra():
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    extra = pyproject["project"]["optional-dependencies"]["colab"]
    wanted = {re.match(r"[A-Za-z0-9_-]+", req)[0].lower() for req in extra}
    checked = re.search(r"missing = \[m for m in \(([^)]*)\)", setup_cell_source())[1]
    assert {name.strip().strip('"') for name in checked.split(",")} == wanted | {"transformer_lib"}


# --- the pinned release and the opt-in for main ------------------------------------------------

def main_source(**kwargs) -> str:
    """The cell after the documented one-line change (the reader's switch to the newest code)."""
    source = setup_cell_source(**kwargs)
    assert source.count(REF_LINE) == 1 and f"instead: {MAIN_LINE}" in source, \
        "the cell must hold the REF line once and name the line that replaces it"
    return source.replace(REF_LINE, MAIN_LINE, 1)


def fake_install(folder: Path, version: str, revision: str | None) -> str:
    """A transformer_lib installed as pip records it (PEP 610 direct_url.json) from `revision` of
    the repository (None: installed from elsewhere, no record); returns a PYTHONPATH that finds
    it first, and the extras after it."""
    (folder / "transformer_lib").mkdir(parents=True)
    (folder / "transformer_lib" / "__init__.py").write_text(f'__version__ = "{version}"\n')
    info = folder / f"transformer_lib-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: transformer-lib\n"
                                   f"Version: {version}\n")
    if revision is not None:
        (info / "direct_url.json").write_text(json.dumps(
            {"url": REPO_URL, "vcs_info": {"vcs": "git", "commit_id": "0" * 40,
                                           "requested_revision": revision}}))
    extras = Path(__import__("tqdm").__file__).parents[1]
    return f"{folder}{os.pathsep}{extras}"


def test_the_cell_pins_the_release_tag_of_this_version():
    source = setup_cell_source()
    assert f'URL, VERSION = "{REPO_URL}", "{transformer_lib.__version__}"' in source
    assert REF_LINE == 'REF = f"v{VERSION}"' and '@{REF}"' in source


def test_main_is_opt_in_and_replaces_a_local_install():
    # the package is installed (here: editable, not by pip from main): the switch to main must
    # install anyway, so the installed copy is removed first (pip keeps a same-version install)
    rc, printed, calls, _ = run_cell(source=main_source())
    assert rc == 0 and calls == [UNINSTALL, PIP_CALL_MAIN]
    assert printed == [f"Installed transformer_lib main from {REPO_URL} (missing: transformer_lib "
                       "main (another install is there))."]


def test_main_in_a_fresh_runtime_installs_without_uninstalling():
    rc, printed, calls, _ = run_cell(hidden=["transformer_lib"], source=main_source())
    assert rc == 0 and calls == [PIP_CALL_MAIN]
    assert printed == [f"Installed transformer_lib main from {REPO_URL} (missing: "
                       "transformer_lib)."]


@pytest.mark.parametrize("installed, ref, expected", [
    (TAG, "release", []),                         # pip installed this release: nothing to do
    ("main", "main", []),                         # pip installed main, main asked for: nothing
    ("main", "release", [UNINSTALL, PIP_CALL]),   # main installed, the release asked for
    (TAG, "main", [UNINSTALL, PIP_CALL_MAIN]),    # the release installed, main asked for
    ("v0.0.1", "release", [UNINSTALL, PIP_CALL]),  # another release's tag
])
def test_an_install_by_pip_is_kept_only_if_it_came_from_the_ref_asked_for(tmp_path, installed, ref,
                                                                         expected):
    path = fake_install(tmp_path, transformer_lib.__version__, installed)
    rc, _, calls, err = run_cell(pythonpath=path,
                                 source=main_source() if ref == "main" else None)
    assert rc == 0 and calls == expected, err


def git(*args, cwd):
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=cwd,
                   check=True, capture_output=True, text=True)


def local_repository(folder: Path, tag: str | None) -> str:
    """A git repository holding a tiny package named transformer-lib at this version (its [colab]
    extra empty), tagged `tag`, with one more commit on main; returns its URL."""
    (folder / "transformer_lib").mkdir(parents=True)
    (folder / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["setuptools>=64"]\nbuild-backend = "setuptools.build_meta"\n'
        f'[project]\nname = "transformer-lib"\nversion = "{VERSION}"\n'
        '[project.optional-dependencies]\ncolab = []\n')
    (folder / "transformer_lib" / "__init__.py").write_text(f'__version__ = "{VERSION}"\n')
    git("init", "-q", "-b", "main", cwd=folder)
    git("add", "-A", cwd=folder)
    git("commit", "-q", "-m", "release", cwd=folder)
    if tag:
        git("tag", tag, cwd=folder)
    (folder / "NEWS").write_text("after the release\n")
    git("add", "-A", cwd=folder)
    git("commit", "-q", "-m", "after the release", cwd=folder)
    return f"file://localhost{folder}"


@pytest.mark.slow
def test_a_missing_tag_with_real_pip_is_one_clear_error(tmp_path):
    url = local_repository(tmp_path / "repo", tag=None)          # the release was never tagged
    rc, printed, _, err = run_cell(hidden=["transformer_lib"], fake_pip=False,
                                   source=setup_cell_source(url=url),
                                   env={"PIP_TARGET": str(tmp_path / "target")})
    last = err.strip().splitlines()[-1]
    assert rc != 0 and printed == [] and "CalledProcessError" not in err
    assert last.startswith(f"RuntimeError: Could not install transformer_lib {TAG} from {url} (is "
                           f"this runtime online, and is {TAG} a tag or branch there? "
                           f"{NO_TAGS}): "), last
    assert "pathspec" in last and TAG in last, last
    assert not (tmp_path / "target").exists()


@pytest.mark.slow
def test_real_pip_installs_the_tag_and_the_cell_then_recognises_it(tmp_path):
    """Real pip installs the tagged release into a scratch folder (PIP_TARGET) and records where it
    came from; run again with that folder first on the path, the cell does nothing; switched to
    main, it would replace it (pip faked from there on)."""
    url = local_repository(tmp_path / "repo", tag=TAG)
    target = tmp_path / "target"
    env = {"PIP_TARGET": str(target), "PIP_NO_BUILD_ISOLATION": "0"}  # setuptools from here
    rc, printed, calls, err = run_cell(hidden=["transformer_lib"], fake_pip=False,
                                       source=setup_cell_source(url=url), env=env)
    assert rc == 0, err
    assert printed == [f"Installed transformer_lib {TAG} from {url} (missing: transformer_lib)."]
    record = json.loads(next(target.glob("transformer_lib-*.dist-info/direct_url.json"))
                        .read_text())
    assert record["vcs_info"]["requested_revision"] == TAG
    assert not (target / "NEWS").exists()
    path = f"{target}{os.pathsep}{ROOT}"
    rc, printed, calls, err = run_cell(pythonpath=path, source=setup_cell_source(url=url))
    assert (rc, printed, calls) == (0, [], []), err
    rc, printed, calls, err = run_cell(pythonpath=path, source=main_source(url=url))
    assert rc == 0 and calls == [UNINSTALL, [*PIP_CALL_MAIN[:-1],
                                             f"transformer-lib[colab] @ git+{url}@main"]], err
