"""The capstone's three modules keep to their meaning (issue 65, item 6): `train` is the command
line and `run`, `stages` the run's stages (chapter 18), `records` what a finished run writes and
prints (appendix A7). The command line and the records use the stages, the stages know neither,
and the model modules still import only torch and the standard library."""
import ast
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LIB = ROOT / "transformer_lib"
# The model of Part I and II: what `Transformer` is built from.
MODEL_MODULES = ["self_attention", "attention", "masking", "cross_attention",
                 "multi_head_attention", "positional", "layer_norm", "feed_forward", "encoder",
                 "decoder", "model"]


def tree(module: str) -> ast.Module:
    return ast.parse((LIB / f"{module}.py").read_text())


def imported(module: str) -> set[str]:
    """Every module `module` imports, by its full name (`.x` is `transformer_lib.x`)."""
    names = set()
    for node in ast.walk(tree(module)):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = "transformer_lib" + ("." + base if base else "")
            names.add(base)
            if base == "transformer_lib":            # from transformer_lib import x
                names |= {f"transformer_lib.{a.name}" for a in node.names}
    return names


def defined(module: str) -> set[str]:
    "The top-level functions and classes of `module`."
    return {n.name for n in tree(module).body
            if isinstance(n, (ast.FunctionDef, ast.ClassDef))}


def test_the_command_line_defines_no_stage_and_no_record():
    stages, records, cli = defined("stages"), defined("records"), defined("train")
    assert {"prepare", "fit", "finalize", "RunResult", "translate"} <= stages
    assert {"write_records", "results_record", "run_report"} <= records
    assert not cli & (stages | records), sorted(cli & (stages | records))
    assert not cli & {"prepare", "fit", "finalize", "evaluate", "snapshot", "save",
                      "choose_weights", "prepare_model", "read_inputs"}
    assert {"main", "run"} <= cli


@pytest.mark.parametrize("module", ["stages", "records"])
def test_the_stages_and_records_do_not_parse_a_command_line(module):
    assert "argparse" not in imported(module)
    assert "transformer_lib.train" not in imported(module)     # the command line is above them


def test_the_stages_know_nothing_of_the_records():
    assert "transformer_lib.records" not in imported("stages")
    assert "transformer_lib.stages" in imported("records")


@pytest.mark.parametrize("module", MODEL_MODULES)
def test_model_modules_import_only_torch(module):
    for name in imported(module):
        top = name.split(".")[0]
        if top == "transformer_lib":
            assert name.split(".")[1] in MODEL_MODULES, f"{module} imports {name}"
        else:
            assert top == "torch" or top in sys.stdlib_module_names, f"{module} imports {name}"


def test_the_detector_sees_each_kind_of_import(tmp_path, monkeypatch):
    (tmp_path / "probe.py").write_text("import argparse\nfrom . import train\n"
                                       "from .records import x\nfrom torch import nn\n")
    monkeypatch.setattr(sys.modules[__name__], "LIB", tmp_path)
    assert imported("probe") == {"argparse", "transformer_lib", "transformer_lib.train",
                                 "transformer_lib.records", "torch"}
