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
    return [line for line in public_api.LIST.read_text().splitlines()
            if line and not line.startswith("#")]


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


def test_a_signature_is_written_without_addresses():
    def f(x, key=lambda v: v):
        return x
    assert public_api.describe("f", f) == "f(x, key=<function test_a_signature_is_written_" \
        "without_addresses.<locals>.<lambda>>)"
    assert public_api.describe("C", type("C", (), {"__init__": lambda self, n=1: None})) \
        == "class C(n=1)"
