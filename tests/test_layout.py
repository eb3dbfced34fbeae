"""benchmarks/ says what each script is: one folder per kind, each folder's scripts listed under its
heading of benchmarks/README.md and nowhere else, and no script edits `sys.path` or imports a script
of another folder (what two scripts share lives in the package)."""
import ast
import re

from conftest import BENCHMARKS, KINDS


def readme_sections() -> dict[str, set[str]]:
    "The scripts named in the first column of each folder's table in benchmarks/README.md."
    text = (BENCHMARKS / "README.md").read_text()
    parts = re.split(r"^## `(\w+)/`", text, flags=re.M)
    return {kind: {name for cell in re.findall(r"^\| ([^|]+) \|", body, flags=re.M)
                   for name in re.findall(r"`([\w.]+\.(?:py|sh))`", cell)}
            for kind, body in zip(parts[1::2], parts[2::2])}


def test_every_script_is_in_the_folder_of_its_kind():
    loose = [p.name for p in BENCHMARKS.iterdir() if p.is_file() and p.name != "README.md"]
    assert loose == [], f"scripts outside a kind's folder: {loose}"
    assert sorted(p.name for p in BENCHMARKS.iterdir() if p.is_dir()
                  and p.name != "__pycache__") == sorted(KINDS)


def test_the_readme_lists_each_folder():
    sections = readme_sections()
    assert sorted(sections) == sorted(KINDS)
    for kind in KINDS:
        have = {p.name for p in (BENCHMARKS / kind).iterdir() if p.suffix in (".py", ".sh")}
        assert sections[kind] == have, (kind, sections[kind] ^ have)


def test_no_script_edits_sys_path_or_imports_another_folder():
    scripts = {p.stem: p.parent.name for kind in KINDS for p in (BENCHMARKS / kind).glob("*.py")}
    for kind in KINDS:
        for path in (BENCHMARKS / kind).glob("*.py"):
            tree = ast.parse(path.read_text())
            assert "sys.path" not in ast.unparse(tree), path
            for node in ast.walk(tree):
                names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                         else [node.module] if isinstance(node, ast.ImportFrom) and node.module
                         else [])
                for name in names:
                    top = name.split(".")[0]
                    if top in scripts:
                        assert scripts[top] == kind, f"{path.name} imports {top} of {scripts[top]}/"
