"""Size limits of the package (issue: "the math reads first"): no module longer than 450 lines (its module
docstring not counted), no function longer than 90 lines, and in the model modules (attention ... model) none
longer than 30, docstring included. Counted with ast over the exported files."""
import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "transformer_lib"
MODULES = sorted(p for p in PACKAGE.glob("*.py") if p.name != "_modidx.py")
MODEL_MODULES = ("attention", "self_attention", "cross_attention", "masking", "multi_head_attention", "positional",
                 "layer_norm", "feed_forward", "encoder", "decoder", "model")


def function_lengths(path: Path) -> dict[str, int]:
    """Lines of every function and method (from `def`, decorators excluded, to its last line)."""
    tree = ast.parse(path.read_text())
    out = {}
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            out[f"{path.stem}.{node.name}:{node.lineno}"] = node.end_lineno - node.lineno + 1
    return out


def code_lines(path: Path) -> int:
    """Lines of the module, its module docstring (what it holds, where it comes from) not counted."""
    tree = ast.parse(path.read_text())
    n = len(path.read_text().splitlines())
    if ast.get_docstring(tree) is not None:
        n -= tree.body[0].end_lineno - tree.body[0].lineno + 1
    return n


def test_code_lines_leave_out_the_module_docstring(tmp_path):
    path = tmp_path / "m.py"
    path.write_text('# comment\n"""One.\nTwo.\nThree."""\nx = 1\n')
    assert code_lines(path) == 2
    path.write_text("x = 1\ny = 2\n")
    assert code_lines(path) == 2


@pytest.mark.parametrize("path", MODULES, ids=[p.stem for p in MODULES])
def test_module_at_most_450_lines(path):
    n = code_lines(path)
    assert n <= 450, f"{path.name} has {n} lines besides its module docstring (limit 450)"


@pytest.mark.parametrize("path", MODULES, ids=[p.stem for p in MODULES])
def test_functions_at_most_90_lines(path):
    long = {name: n for name, n in function_lengths(path).items() if n > 90}
    assert not long, f"functions longer than 90 lines: {long}"


@pytest.mark.parametrize("module", MODEL_MODULES)
def test_model_module_functions_at_most_30_lines(module):
    long = {name: n for name, n in function_lengths(PACKAGE / f"{module}.py").items() if n > 30}
    assert not long, f"functions longer than 30 lines: {long}"
