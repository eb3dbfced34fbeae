"""The top-level names of `transformer_lib` are its public API, kept stable: the list in
book/public_api.txt (what the API page shows) must be the package's, name by name and signature by
signature. Removing a name or changing a signature is then a decision made in a diff of that file
(`python tools/public_api.py --write`) with a line in CHANGELOG.md, never a side effect."""
import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("public_api", ROOT / "tools" / "public_api.py")
public_api = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(public_api)


def committed() -> list[str]:
    return public_api.read(public_api.LIST.read_text())


def test_the_committed_list_is_the_package():
    for extra in ("matplotlib", "tokenizers", "tqdm", "sacrebleu"):
        pytest.importorskip(extra)           # the list names every extra's names
    live, listed = public_api.public_api(), committed()
    gone, new = sorted(set(listed) - set(live)), sorted(set(live) - set(listed))
    assert not gone and not new, (
        "transformer_lib's public API changed: "
        + (f"gone or changed {gone}; " if gone else "") + (f"new {new}; " if new else "")
        + "if that is intended, run `python tools/public_api.py --write` and say so in "
          "CHANGELOG.md")


def test_the_api_page_shows_the_list():
    page = (ROOT / "book" / "api.md").read_text()
    assert "```{literalinclude} public_api.txt" in page


def test_every_line_fits_the_books_code_column():
    assert max(map(len, public_api.LIST.read_text().splitlines())) <= public_api.WIDTH


def test_a_long_entry_is_wrapped_and_read_back_whole():
    entry = "f(" + ", ".join(f"argument_{i}: 'int' = {i}" for i in range(12)) + ")"
    text = public_api.wrap(entry)
    assert len(text.splitlines()) > 1 and max(map(len, text.splitlines())) <= public_api.WIDTH
    assert public_api.read("# a comment\n" + text + "\nclass B()\n") == [entry, "class B()"]


def test_a_signature_is_written_without_addresses():
    def f(x, key=lambda v: v):
        return x
    assert public_api.describe("f", f) == "f(x, key=<function test_a_signature_is_written_" \
        "without_addresses.<locals>.<lambda>>)"
    assert public_api.describe("C", type("C", (), {"__init__": lambda self, n=1: None})) \
        == "class C(n=1)"


def private_reaches(source: str) -> list[str]:
    """`from transformer_lib.x import _y` (or `from .x import _y`), and `obj._y` on anything but
    `self`, `cls` or `super()`: the places a module uses another's private names."""
    import ast
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").startswith(
                "transformer_lib")):
            found += [f"import {a.name}" for a in node.names
                      if a.name.startswith("_") and not a.name.startswith("__")]
        elif (isinstance(node, ast.Attribute) and node.attr.startswith("_")
              and not node.attr.startswith("__")
              and not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"))
              and not (isinstance(node.value, ast.Call) and getattr(node.value.func, "id", "")
                       == "super")):
            found.append(f".{node.attr}")
    return found


# Private attributes of PyTorch that the package reads on purpose, and the standard library's
# documented os._exit (train.py: a torchrun worker leaves without the interpreter's teardown).
THIRD_PARTY = {"._qkv_same_embed_dim", "._orig_mod",   # nn.MultiheadAttention, torch.compile
               "._exit"}


@pytest.mark.parametrize("path", sorted(p for p in (ROOT / "transformer_lib").rglob("*.py")
                                        if p.name != "_modidx.py" and "__pycache__" not in p.parts),
                         ids=lambda p: p.relative_to(ROOT / "transformer_lib").as_posix())
def test_no_module_uses_another_modules_private_names(path):
    """A helper that several modules need is public in its own module (issue: `from .model import
    _check_tokens` tied recurrent.py to model.py's internals, which may change unannounced)."""
    reaches = [r for r in private_reaches(path.read_text()) if r not in THIRD_PARTY]
    assert not reaches, f"{path.name} uses private names of other modules: {sorted(set(reaches))}"


def test_the_private_name_detector_sees_imports_and_attributes():
    assert private_reaches("from transformer_lib.model import _x\nfrom .a import b, _c\n"
                           "self._ok()\nsuper()._ok()\nattn._split()\nm.public()") == \
        ["import _x", "import _c", "._split"]
