"""The package as a reader installs it (a wheel, not an editable install, used from outside the
repository, as in Colab): the records of measured runs travel inside it, byte for byte those of
results/, and chapter 18 runs against it and prints every record it reads. The chapter's one live
training run is left out here: nbval executes the whole chapter once, and running that cell a
second time would prove nothing the records' cells and nbval do not."""
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from transformer_lib import data

ROOT = Path(__file__).resolve().parents[1]
DATA = os.environ.get(data.ENV_VAR)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """A wheel built from a copy of what the repository commits for the package (as pip builds one
    from the repository: pyproject.toml, README.md, transformer_lib/, results/)."""
    src = tmp_path_factory.mktemp("src")
    files = subprocess.run(["git", "-C", str(ROOT), "ls-files", "pyproject.toml", "README.md",
                            "transformer_lib", "results"], capture_output=True, text=True)
    names = (files.stdout.split() if files.returncode == 0 and files.stdout.strip() else
             [p.relative_to(ROOT).as_posix() for d in ("transformer_lib", "results")
              for p in (ROOT / d).rglob("*") if p.is_file() and "__pycache__" not in p.parts]
             + ["pyproject.toml", "README.md"])
    for name in names:
        (src / name).parent.mkdir(parents=True, exist_ok=True)
        (src / name).write_bytes((ROOT / name).read_bytes())
    out = tmp_path_factory.mktemp("wheel")
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-index",
                        "--no-build-isolation", "-w", str(out), str(src)],
                       capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    return next(out.glob("transformer_lib-*.whl"))


@pytest.fixture(scope="module")
def site(wheel, tmp_path_factory) -> Path:
    """The wheel installed (pip install --target, no dependencies: they come from this
    environment)."""
    target = tmp_path_factory.mktemp("site")
    r = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-index",
                        "--target", str(target), str(wheel)],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    return target


def test_the_wheel_carries_every_record_as_results_holds_it(wheel):
    with zipfile.ZipFile(wheel) as z:
        shipped = {n.removeprefix("transformer_lib/results/"): z.read(n) for n in z.namelist()
                   if n.startswith("transformer_lib/results/")}
    records = {p.relative_to(ROOT / "results").as_posix(): p.read_bytes()
               for p in (ROOT / "results").rglob("*.json")}
    assert "multi30k-cpu-30min.json" in records and "ablations/base.json" in records
    assert sorted(shipped) == sorted(records)
    assert [name for name in records if shipped[name] != records[name]] == []


def test_records_dir_of_the_installed_package(site, tmp_path):
    code = ("import transformer_lib, transformer_lib.data as d\n"
            "print(transformer_lib.__file__)\nprint(d.records_dir())")
    r = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True,
                       env={**os.environ, "PYTHONPATH": str(site)}, timeout=300)
    assert r.returncode == 0, r.stderr
    module, records = r.stdout.splitlines()
    assert Path(module).is_relative_to(site)                       # not the checkout's package
    assert Path(records) == site / "transformer_lib" / "results"


def test_records_dir_of_a_checkout_is_results_itself():
    if Path(data.__file__).resolve().parent != ROOT / "transformer_lib":
        pytest.skip("transformer_lib is not imported from this checkout")
    assert data.records_dir() == ROOT / "results"


def test_records_dir_without_records_says_what_to_do(tmp_path, monkeypatch):
    monkeypatch.setattr(data, "__file__", str(tmp_path / "site" / "transformer_lib" / "data.py"))
    with pytest.raises(data.DataError, match=r"neither installed with transformer_lib "
                                             r".*/site/transformer_lib/results.*reinstall"):
        data.records_dir()


# Chapter 18's cells that read records, and what each prints from them.
RECORD_CELLS = {"9b981269": "test_2016_flickr (1000 sentences)",     # the 30-minute run
                "8c9322d0": "rate held (",                            # its log, watched
                "1c9d2e14": "measured when the file was made",        # the shipped file's scores
                "72df7dd0": "validation split, ",                     # the length-penalty sweep
                "e18a0002": "German subwords",                        # the test translations
                "e18a0004": "test sentences: mean largest weight"}    # its epoch snapshots
# The live training run (about a minute) and the cells that use what it made (the reader's
# translator, one of its heads): nbval runs them.
LIVE_CELLS = {"a60462ab", "a60462ad", "a60462af"}


@pytest.mark.slow
@pytest.mark.needs_data
def test_chapter_18_runs_against_the_installed_package(site, tmp_path, monkeypatch):
    """The chapter but its live training run, executed by a kernel that imports the installed
    package, in a directory outside the repository, with the translator fetched into the data
    directory as in Colab: every cell runs, and every cell that reads a record prints it."""
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    nb = nbformat.read(ROOT / "notebooks" / "18_capstone.ipynb", as_version=4)
    assert RECORD_CELLS.keys() | LIVE_CELLS <= {c.get("id") for c in nb.cells}
    nb.cells = [c for c in nb.cells if c.get("id") not in LIVE_CELLS]
    nb.cells.insert(0, nbformat.v4.new_code_cell(
        "import transformer_lib\nfrom pathlib import Path\n"
        f"assert Path(transformer_lib.__file__).is_relative_to({str(site)!r}), "
        "transformer_lib.__file__"))
    # the data directory of a fresh runtime: the datasets, and the translator as fetch() leaves it
    data_dir = tmp_path / "data"
    (data_dir / "pretrained").mkdir(parents=True)
    (data_dir / "multi30k").symlink_to(Path(DATA, "multi30k").resolve())
    (data_dir / data.TRANSLATOR_NAME).write_bytes((ROOT / data.TRANSLATOR_NAME).read_bytes())
    kernels = tmp_path / "kernels" / "kernels" / "installed"
    kernels.mkdir(parents=True)
    (kernels / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "installed transformer_lib", "language": "python"}))
    work = tmp_path / "work"                                          # outside the repository
    work.mkdir()
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path / "kernels"))
    monkeypatch.setenv("PYTHONPATH", str(site))
    monkeypatch.setenv(data.ENV_VAR, str(data_dir))
    monkeypatch.setenv("MPLBACKEND", "Agg")
    monkeypatch.setenv("PIP_NO_INDEX", "1")             # the set-up cell must find everything
    client = nbclient.NotebookClient(nb, kernel_name="installed", timeout=3600,
                                     resources={"metadata": {"path": str(work)}})
    client.execute()
    printed = {c.get("id"): "".join(o.get("text", "") for o in c.get("outputs", [])
                                    if o.get("output_type") == "stream")
               for c in nb.cells if c.cell_type == "code"}
    setup = next(c for c in nb.cells if "remove-cell" in c.metadata.get("tags", [])
                 and c.cell_type == "code")
    assert printed[setup.get("id")] == ""                               # nothing to install
    silent = {cell: phrase for cell, phrase in RECORD_CELLS.items() if phrase not in printed[cell]}
    assert silent == {}, {cell: printed[cell][:300] for cell in silent}
