"""The package's modules import one another without a circle, lazy imports (inside functions)
included: a chapter's module never reaches up into a later chapter's module that imports it."""
import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "transformer_lib"


def imports_of(path: Path, modules: set[str]) -> set[str]:
    """The package modules `path` imports anywhere in its code (top level or inside functions)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level == 1:                        # from .x import y, from . import x
                found |= ({node.module.split(".")[0]} if node.module
                          else {a.name for a in node.names})
            elif node.module == "transformer_lib":                # from transformer_lib import x
                found |= {a.name for a in node.names}
            elif node.module and node.module.startswith("transformer_lib."):
                found.add(node.module.split(".")[1])
        elif isinstance(node, ast.Import):
            found |= {a.name.split(".")[1] for a in node.names
                      if a.name.startswith("transformer_lib.")}
    return (found & modules) - {path.stem}


def import_graph() -> dict[str, set[str]]:
    modules = {p.stem for p in PACKAGE.glob("*.py") if p.stem != "__init__"}
    return {m: imports_of(PACKAGE / f"{m}.py", modules) for m in modules}


def find_circle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import circle [a, b, ..., a], or None (depth-first search with colours)."""
    state, path = {}, []

    def visit(node):
        state[node] = "open"
        path.append(node)
        for dep in sorted(graph[node]):
            if state.get(dep) == "open":
                return path[path.index(dep):] + [dep]
            if dep not in state and (circle := visit(dep)):
                return circle
        state[node] = "done"
        path.pop()
        return None

    for node in sorted(graph):
        if node not in state and (circle := visit(node)):
            return circle
    return None


def test_the_finder_finds_a_circle():
    assert find_circle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]
    assert find_circle({"a": {"b"}, "b": set()}) is None


def test_the_graph_sees_lazy_and_relative_imports(tmp_path):
    source = tmp_path / "x.py"
    source.write_text("from .y import f\ndef g():\n    from transformer_lib.z import h\n"
                      "    import transformer_lib.w\n")
    assert imports_of(source, {"x", "y", "z", "w"}) == {"y", "z", "w"}


def test_no_import_circles_in_the_package():
    circle = find_circle(import_graph())
    assert circle is None, "import circle: " + " -> ".join(circle)
