"""The README's "Using the package" runs as written: each Python block in a fresh interpreter, in an
empty directory, with nothing but the package and the data directory (a reader's first hour)."""
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DATA = os.environ.get("TRANSFORMER_LIB_DATA")


def section(text: str, title: str) -> str:
    """The text of the `## title` section of a markdown document, up to the next `## ` heading."""
    match = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## |\Z)", text, re.M | re.S)
    assert match, f"no section '## {title}'"
    return match.group(1)


def python_blocks(text: str) -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", text, re.M | re.S)


BLOCKS = python_blocks(section((ROOT / "README.md").read_text(), "Using the package"))


def run_block(code: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "MPL"))}
    env.update(PYTHONPATH=str(ROOT), MPLBACKEND="Agg",
               OMP_NUM_THREADS=env.get("OMP_NUM_THREADS", "1"))
    if DATA:
        env["TRANSFORMER_LIB_DATA"] = DATA
    return subprocess.run([sys.executable, "-c", code], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=300)


def test_the_section_has_the_five_first_steps():
    assert len(BLOCKS) >= 2
    first = BLOCKS[0]
    for call in ("TransformerConfig.base(", "count_parameters(", "load_multi30k(", "tok.encode(",
                 "load_translator(", "translate(", "plot_attention("):
        assert call in first, f"the README's first block no longer shows {call}"


def test_block_extraction():
    text = ("## Using the package\n\n```python\nx = 1\n```\n\n```bash\nls\n```\n```python\ny = "
            "2\n```\n## Next\n")
    assert python_blocks(section(text, "Using the package")) == ["x = 1\n", "y = 2\n"]


@pytest.mark.needs_data
def test_the_five_first_steps_run_as_written(tmp_path):
    pytest.importorskip("tokenizers")
    pytest.importorskip("matplotlib")
    pytest.importorskip("tqdm")
    r = run_block(BLOCKS[0], tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    lines = r.stdout.splitlines()
    assert lines[0] == "63,082,496 parameters"
    assert lines[1].startswith("[") and lines[1].endswith("'<eos>']")
    assert " -> " in lines[2] and len(lines[2].split(" -> ")[1]) > 0
    assert (tmp_path / "attention.png").stat().st_size > 10_000


@pytest.mark.parametrize("index", range(1, len(BLOCKS)))
def test_the_other_blocks_run_as_written(tmp_path, index):
    r = run_block(BLOCKS[index], tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
