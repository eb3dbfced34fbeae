"""The standard set-up cell, the first code cell of every notebook, and a script that writes it into
all of them: `python tests/setup_cell.py` (run it after changing the cell, the repository URL in
book/_config.yml or transformer_lib.__version__, as the release routine in CHANGELOG.md does).
tests/test_notebooks_clean.py checks every notebook against `setup_cell_source()`;
tests/test_setup_cell.py runs the cell with packages hidden; tests/test_versions.py checks that the
cell, `__version__`, CHANGELOG.md and the newest `v*` git tag agree."""
import json
import re
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
REPO_URL = yaml.safe_load((ROOT / "book" / "_config.yml").read_text())["repository"]["url"]
VERSION = re.search(r'^__version__ = "([^"]+)"',
                    (ROOT / "transformer_lib" / "__init__.py").read_text(), re.M)[1]
# The line that pins the release (the git tag v{VERSION}, made by the release routine in
# CHANGELOG.md) and the documented one-line change that installs the newest code of `main` instead.
REF_LINE = 'REF = f"v{VERSION}"'
MAIN_LINE = 'REF = "main"'


def setup_cell_source(url: str = REPO_URL, version: str = VERSION) -> str:
    """The cell: installs transformer_lib at the git tag `v{version}` (the release this notebook
    was written for) with its [colab] extra (pyproject.toml) when it, one of the extra's packages,
    or this version is missing; says in one line what it installed; a failed install (no internet,
    repository or tag unreachable) is one clear error. Changing the REF line to MAIN_LINE (the
    documented one-line change) installs the newest code of `main` instead, replacing any install
    that pip did not make from `main` (pip keeps an installed copy of the same version)."""
    return f'''\
# Set-up for a fresh Colab runtime: installs transformer_lib, the release this notebook was written
# for (git tag REF), and what the notebooks use (torch is already there and is left alone). Where
# all of it is installed, in this version, the cell does nothing.
import importlib, importlib.metadata, importlib.util, json, re, subprocess, sys
URL, VERSION = "{url}", "{version}"
{REF_LINE}   # for the newest, unreleased code instead: {MAIN_LINE}
missing = [m for m in ("transformer_lib", "tqdm", "tokenizers", "sacrebleu", "matplotlib",
                     "sacremoses")
           if importlib.util.find_spec(m) is None]
spec, replace = importlib.util.find_spec("transformer_lib"), False
if spec:                                           # is it the install that REF asks for?
    try:
        dist = importlib.metadata.distribution("transformer-lib")
        vcs = json.loads(dist.read_text("direct_url.json") or "{{}}").get("vcs_info", {{}})
    except importlib.metadata.PackageNotFoundError:
        vcs = {{}}
    if (vcs or REF != f"v{{VERSION}}") and vcs.get("requested_revision") != REF:
        missing.append(f"transformer_lib {{REF}} (another install is there)")
        replace = True                      # pip would keep an installed copy of the same version
    elif REF == f"v{{VERSION}}" and f'__version__ = "{{VERSION}}"' not in open(spec.origin).read():
        missing.append(f"transformer_lib {{VERSION}} (another version is installed)")
if missing:
    if replace:
        subprocess.run([sys.executable, "-m", "pip", "uninstall", "-q", "-y", "transformer-lib"],
                       capture_output=True, text=True)
    pip = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--upgrade",
                          f"transformer-lib[colab] @ git+{{URL}}@{{REF}}"],
                         capture_output=True, text=True)
    if pip.returncode:
        err = re.sub(r"\\x1b\\[[0-9;]*[A-Za-z]", "", pip.stderr)   # colour codes (FORCE_COLOR=1)
        why = [s.strip() for s in err.splitlines()
               if s.strip().startswith(("fatal:", "ERROR:", "error: pathspec"))]
        raise RuntimeError(f"Could not install transformer_lib {{REF}} from {{URL}} (is this "
                           f"runtime online, and is {{REF}} a tag or branch there? A copy "
                           "published from main alone has no tags until `make tags` and `git "
                           "push origin --tags` make them): "
                           + " ".join(why or err.strip().splitlines()[-1:]))
    importlib.invalidate_caches()
    print(f"Installed transformer_lib {{REF}} from {{URL}} (missing: {{', '.join(missing)}}).")'''


def notebooks() -> list[Path]:
    return sorted(p for p in (ROOT / "notebooks").rglob("*.ipynb")
                  if ".ipynb_checkpoints" not in p.parts)


def colab_link(rel: str, url: str = REPO_URL, version: str = VERSION) -> str:
    """The Colab address of the notebook at `rel` in the release v{version}: the notebook a reader
    opens matches the package its set-up cell installs (main's newer notebook might not)."""
    colab = url.replace("https://github.com/", "https://colab.research.google.com/github/")
    return f"{colab}/blob/v{version}/{rel}"


def badge_source(rel: str) -> str:
    "The first cell of every notebook: the Open-in-Colab badge of its release."
    return ("[![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)]"
            f"({colab_link(rel)})")


def pin_book_branch() -> bool:
    """book/_config.yml's repository.branch (the site's launch buttons) names the release tag."""
    path = ROOT / "book" / "_config.yml"
    text = path.read_text()
    new = re.sub(r"^(  branch: ).*$", rf"\g<1>v{VERSION}", text, count=1, flags=re.M)
    if new != text:
        path.write_text(new)
    return new != text


def main() -> int:
    """Write the badge and the standard set-up cell into every notebook (only those two cells are
    touched), and the release tag into book/_config.yml's repository.branch."""
    source = setup_cell_source()
    if pin_book_branch():
        print("updated book/_config.yml (repository.branch)")
    for path in notebooks():
        nb = json.loads(path.read_text())
        rel = path.relative_to(ROOT).as_posix()
        badge = nb["cells"][0]
        assert badge["cell_type"] == "markdown" and "colab" in "".join(badge["source"]), \
            f"{path}: the first cell is not the Colab badge"
        if "".join(badge["source"]) != badge_source(rel):
            badge["source"] = [badge_source(rel)]
            path.write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n")
            print(f"updated {rel} (badge)")
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
