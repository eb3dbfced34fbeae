"""Each class of transformer_lib is written in one body: no method is attached after the class by
assignment (`Transformer.forward = _forward`), which the reader of a chapter would have to find in
another cell. The chapters may keep the math in small free functions that a method calls."""
import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MODULES = sorted(p for p in (ROOT / "transformer_lib").rglob("*.py")   # exercises/ included
                 if "__pycache__" not in p.parts)


def _targets(node: ast.expr):
    """The single targets of an assignment target, tuple and list targets unpacked."""
    if isinstance(node, (ast.Tuple, ast.List)):
        for elt in node.elts:
            yield from _targets(elt)
    elif isinstance(node, ast.Starred):
        yield from _targets(node.value)
    else:
        yield node


def attached_methods(source: str, filename: str = "<string>") -> list[str]:
    """'file:line Class.attr' for each assignment to an attribute of a class defined in `source`
    (`Name.attr = ...`, `A.x, A.y = ...`, `Name.attr: T = ...`, `Name.attr += ...`)."""
    tree = ast.parse(source, filename)
    classes = {n.name for n in ast.walk(tree) if isinstance(n, ast.ClassDef)}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, (ast.AnnAssign, ast.AugAssign)):
            targets = [node.target]
        else:
            continue
        for target in (t for tt in targets for t in _targets(tt)):
            if (isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name)
                    and target.value.id in classes):
                found.append(f"{filename}:{target.lineno} {target.value.id}.{target.attr}")
    return found


def test_the_detector_finds_an_attached_method_and_passes_a_class_body():
    bad = ("class A:\n"
           "    def f(self):\n"
           "        return 1\n"
           "\n"
           "def _g(self):\n"
           "    return 2\n"
           "\n"
           "A.g, A.h = _g, _g\n")
    good = ("class B:\n"
            "    x = 1\n"
            "\n"
            "    def g(self):\n"
            "        self.y = 2              # an instance attribute, not the class's\n"
            "        return _helper(self)\n"
            "\n"
            "def _helper(b):\n"
            "    return b.x\n"
            "\n"
            "other.attr = 3                  # not a class of this module\n")
    assert attached_methods(bad, "bad.py") == ["bad.py:8 A.g", "bad.py:8 A.h"]
    assert attached_methods(good, "good.py") == []


def test_the_modules_are_found():
    assert any(p.name == "model.py" for p in MODULES) and len(MODULES) > 10


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.name)
def test_every_method_is_defined_in_its_class_body(path):
    found = attached_methods(path.read_text(), str(path.relative_to(ROOT)))
    assert not found, ("methods attached to a class after its body; define them inside the class "
                       "(in the chapter's class cell), calling free functions for the math if need "
                       "be:\n" + "\n".join(found))
