"""The standard set-up cell, the first code cell of every notebook, and a script that writes it into
all of them: `python tests/setup_cell.py` (run it after changing the cell, the repository URL in
book/_config.yml or transformer_lib.__version__). tests/test_notebooks_clean.py checks every
notebook against `setup_cell_source()`; tests/test_setup_cell.py runs the cell with packages
hidden."""
import json
import re
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
REPO_URL = yaml.safe_load((ROOT / "book" / "_config.yml").read_text())["repository"]["url"]
VERSION = re.search(r'^__version__ = "([^"]+)"',
                    (ROOT / "transformer_lib" / "__init__.py").read_text(), re.M)[1]


def setup_cell_source(url: str = REPO_URL, version: str = VERSION) -> str:
    """The cell: installs transformer_lib with its [colab] extra (pyproject.toml) when it, one of
    the extra's packages, or the version this notebook was written for is missing; says in one line
    what it installed; a failed install (no internet, repository unreachable) is one clear error."""
    return f'''\
# Set-up for a fresh Colab runtime: installs transformer_lib and what the notebooks use (torch is
# already there and is left alone). Where all of it is installed, in this version, the cell does
# nothing.
import importlib, importlib.util, re, subprocess, sys
URL, VERSION = "{url}", "{version}"
missing = [m for m in ("transformer_lib", "tqdm", "tokenizers", "sacrebleu", "matplotlib")
           if importlib.util.find_spec(m) is None]
spec = importlib.util.find_spec("transformer_lib")
if spec and f'__version__ = "{{VERSION}}"' not in open(spec.origin).read():
    missing.append(f"transformer_lib {{VERSION}} (another version is installed)")
if missing:
    pip = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--upgrade",
                          f"transformer-lib[colab] @ git+{{URL}}"], capture_output=True, text=True)
    if pip.returncode:
        err = re.sub(r"\\x1b\\[[0-9;]*[A-Za-z]", "", pip.stderr)   # colour codes (FORCE_COLOR=1)
        why = [s.strip() for s in err.splitlines() if s.strip().startswith(("fatal:", "ERROR:"))]
        raise RuntimeError(f"Could not install transformer_lib from {{URL}} "
                           "(is this runtime online?): "
                           + " ".join(why or err.strip().splitlines()[-1:]))
    importlib.invalidate_caches()
    print(f"Installed transformer_lib from {{URL}} (missing: {{', '.join(missing)}}).")'''


def notebooks() -> list[Path]:
    return sorted(p for p in (ROOT / "notebooks").rglob("*.ipynb")
                  if ".ipynb_checkpoints" not in p.parts)


def main() -> int:
    """Write the standard set-up cell into every notebook (only that cell is touched)."""
    source = setup_cell_source()
    for path in notebooks():
        nb = json.loads(path.read_text())
        cell = nb["cells"][1]
        assert cell["cell_type"] == "code" and "remove-cell" in cell["metadata"].get("tags", []), \
            f"{path}: the second cell is not the set-up cell"
        lines = source.split("\n")
        new = [line + "\n" for line in lines[:-1]] + [lines[-1]]
        if cell["source"] != new:
            cell["source"] = new
            path.write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n")
            print(f"updated {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
