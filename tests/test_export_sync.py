"""transformer_lib/ must equal a fresh `nbdev-export` of notebooks/ (the notebooks are the
source)."""
import json
import shutil

from export_check import ROOT, drift, export_into


def test_package_matches_notebook_export(tmp_path):
    problems = drift(ROOT / "transformer_lib", export_into(tmp_path))
    assert not problems, ("transformer_lib/ is out of sync with the notebooks:\n"
                          + "\n".join(problems))


def test_check_catches_a_notebook_edited_without_reexport(tmp_path):
    """Edit an exported cell in a copy of the notebooks: the check must report the module."""
    edited = tmp_path / "edited"
    edited.mkdir()
    (edited / "transformer_lib").mkdir()
    nb_dir = ROOT / "notebooks"
    # Build a copy of the repo whose notebook differs from its (unchanged) exported module.
    shutil.copytree(nb_dir, edited / "notebooks")
    shutil.copy(ROOT / "pyproject.toml", edited / "pyproject.toml")
    shutil.copytree(ROOT / "transformer_lib", edited / "transformer_lib", dirs_exist_ok=True,
                    ignore=shutil.ignore_patterns("__pycache__"))
    nb_path = edited / "notebooks" / "01_self_attention.ipynb"
    nb = json.loads(nb_path.read_text())
    cell = next(c for c in nb["cells"] if c["cell_type"] == "code"
                and "".join(c["source"]).startswith("#| export\ndef basic_self_attention"))
    cell["source"] = "".join(cell["source"]).replace("each row of the weights",
                                                     "every row of the weights")
    nb_path.write_text(json.dumps(nb, indent=1))

    fresh = tmp_path / "fresh"
    fresh.mkdir()
    problems = drift(edited / "transformer_lib", export_into(fresh, root=edited))
    assert (problems
            == ["self_attention.py: differs from what the notebooks export (run nbdev-export)"])


def test_check_catches_a_stale_module(tmp_path):
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    lib = tmp_path / "lib"
    shutil.copytree(ROOT / "transformer_lib", lib, ignore=shutil.ignore_patterns("__pycache__"))
    (lib / "old_module.py").write_text("x = 1\n")
    problems = drift(lib, export_into(fresh))
    assert problems == [f"old_module.py: in {lib} but no notebook exports it (stale?)"]
