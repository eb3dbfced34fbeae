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


# --- the README as a map: its commands exist, its links land ------------------------------------

README = (ROOT / "README.md").read_text()
DOCS = sorted((ROOT / "docs").glob("*.md"))


def test_ci_runs_the_readmes_test_command():
    """`.ci/run` is the README's `make test` with CI=true, after installing the browsers."""
    lines = [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()
             if line.strip() and not line.lstrip().startswith("#")]
    assert lines[-2:] == ["export CI=true", "exec make test"], lines
    # before it, only the browsers the page's tests drive, so that none of them skips under CI
    assert lines[:-2] == ["set -euo pipefail", 'cd "$(dirname "$0")/.."',
                          "bash tools/install_browsers.sh"], lines
    install = section(README, "Install")
    for command in ("make book", "make test"):
        assert re.search(rf"^{command} +#", install, re.M), f"the Install shows no `{command}`"


def test_the_test_section_names_each_test_target():
    """Every test target of the Makefile is in the README's table, and every one there exists."""
    targets = set(re.findall(r"^(test|test-kernels|quick|unit|nbval):",
                             (ROOT / "Makefile").read_text(), re.M))
    named = set(re.findall(r"^\| `make ([\w-]+)` \|", section(README, "Test"), re.M))
    assert named == targets == {"test", "test-kernels", "quick", "unit", "nbval"}, (named, targets)


def slug(heading: str) -> str:
    "The anchor GitHub gives a markdown heading: lower case, punctuation dropped, spaces to '-'."
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


@pytest.mark.parametrize("page", [ROOT / "README.md", *DOCS],
                         ids=lambda p: p.relative_to(ROOT).as_posix())
def test_relative_links_land(page):
    """A link from the README or a page of docs/ names a file that exists, and a heading of it."""
    text = re.sub(r"^```.*?^```", "", page.read_text(), flags=re.M | re.S)
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+:", target):
            continue
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        assert file.is_file(), f"{page.name} links to {target}, which is not there"
        if anchor:
            headings = re.findall(r"^#+ (.+)$", file.read_text(), re.M)
            assert anchor in {slug(h) for h in headings}, f"{page.name}: no heading #{anchor}"


def test_slug_is_githubs():
    assert slug("The translator in your browser") == "the-translator-in-your-browser"
    assert slug("Eager, not compiled") == "eager-not-compiled"
