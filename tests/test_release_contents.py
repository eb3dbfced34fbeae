"""Every notebook opens in Colab from a release that holds it and runs there: its badge and set-up
cell name the tag `vX.Y.Z`, and at that tag (as `make tags` recreates it on a clone without tags)
the notebook exists, and so does every `transformer_lib` module and name that the notebook of this
checkout imports, because a reader who opens today's notebook gets the package of its pinned
release. The site's launch buttons (book/_config.yml's repository.branch) open a release that holds
every page of book/_toc.yml.

The names are checked by importing them from the tag's own `transformer_lib/` (extracted from git)
in a fresh interpreter, not by reading the source, so a name that only a lazy `__getattr__` or a
star import provides counts, and one that fails to import does not. When this test fails after a
notebook starts to use something new, make a release (the routine at the top of CHANGELOG.md)."""
from __future__ import annotations

import ast
import importlib.util
import json
import re
import subprocess
import sys
import tarfile
from io import BytesIO
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("release_tags", ROOT / "tools" / "release_tags.py")
release_tags = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(release_tags)

ROUTINE = "make a release: the routine at the top of CHANGELOG.md"


def git(*args, cwd: Path = ROOT, binary: bool = False):
    out = subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True,
                         text=not binary).stdout
    return out if binary else out.strip()


@pytest.fixture(scope="module")
def tagged_clone(tmp_path_factory) -> Path:
    """A clone of this checkout without its tags, given them again by `make tags`."""
    if git("rev-parse", "--is-shallow-repository") == "true":
        pytest.skip("this checkout is shallow: the releases' commits are not in it, so the tags "
                    "`make tags` makes cannot be checked (git fetch --unshallow)")
    path = tmp_path_factory.mktemp("release") / "repo"
    subprocess.run(["git", "clone", "--quiet", "--no-tags", "--single-branch", str(ROOT),
                    str(path)], check=True)
    # the working tree's HEAD commit may be ahead of the clone's branch only by uncommitted edits
    assert release_tags.make_tags(path) == 0
    return path


def notebooks() -> list[Path]:
    return sorted(p for p in (ROOT / "notebooks").rglob("*.ipynb")
                  if ".ipynb_checkpoints" not in p.parts)


def pinned_release(nb: dict) -> tuple[str | None, str | None]:
    """(the tag the Colab badge opens, the tag the set-up cell installs)."""
    badge = re.search(r"/blob/(v[^/]+)/", "".join(nb["cells"][0]["source"]))
    setup = "".join(nb["cells"][1]["source"])
    version = re.search(r'^URL, VERSION = "[^"]*", "([^"]*)"$', setup, re.M)
    installs = f"v{version[1]}" if version and 'REF = f"v{VERSION}"' in setup else None
    return (badge[1] if badge else None), installs


def code_of(nb: dict) -> list[str]:
    """The Python of each code cell, with IPython's `%magic` and `!shell` lines made Python as
    IPython makes them."""
    from IPython.core.inputtransformer2 import TransformerManager
    python = TransformerManager().transform_cell
    return [python("".join(cell["source"])) for cell in nb["cells"][2:]   # 0, 1: badge, set-up
            if cell["cell_type"] == "code"]


def package_uses(sources: list[str]) -> set[tuple[str, str | None]]:
    """(module, name or None) for every use of transformer_lib in the code: `import
    transformer_lib.m`, `from transformer_lib.m import n`, and `alias.n` where `alias` is a name
    bound to transformer_lib or one of its modules by an import."""
    uses: set[tuple[str, str | None]] = set()
    aliases: dict[str, str] = {}
    trees = [ast.parse(src) for src in sources]
    for tree in trees:
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for a in node.names:
                    if a.name.split(".")[0] == "transformer_lib":
                        uses.add((a.name, None))
                        aliases[a.asname or "transformer_lib"] = a.name if a.asname else \
                            "transformer_lib"
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module and \
                    node.module.split(".")[0] == "transformer_lib":
                uses.add((node.module, None))
                for a in node.names:
                    if a.name != "*":
                        uses.add((node.module, a.name))
                        aliases.setdefault(a.asname or a.name, f"{node.module}.{a.name}")
    for tree in trees:
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) \
                    and node.value.id in aliases:
                uses.add((aliases[node.value.id], node.attr))
    return uses


CHECK = r"""
import importlib, json, sys
root, uses = sys.argv[1], json.loads(sys.stdin.read())
sys.path.insert(0, root)
# an editable install of this checkout would hand out its own modules where the tag has none
editable = lambda f: "editable" in (getattr(f, "__module__", "") or "").lower()
sys.meta_path[:] = [f for f in sys.meta_path if not editable(f)]
sys.path_hooks[:] = [h for h in sys.path_hooks if not editable(h)]
sys.path_importer_cache.clear()
import transformer_lib
assert transformer_lib.__file__.startswith(root), transformer_lib.__file__
missing = []
for module, name in uses:
    try:
        m = importlib.import_module(module)
    except ImportError as e:
        # `from transformer_lib import exercises` then `exercises.pre_ln`: a name, not a module
        parent, _, last = module.rpartition(".")
        try:
            m = getattr(importlib.import_module(parent), last)
        except AttributeError:
            missing.append([module, name, module])
            continue
        except ImportError:
            missing.append([module, name, f"{module} ({type(e).__name__}: {e})"])
            continue
    assert not hasattr(m, "__file__") or m.__file__.startswith(root), m.__file__
    if name is None or hasattr(m, name):
        continue
    try:
        importlib.import_module(f"{module}.{name}")
    except ImportError:
        missing.append([module, name, f"{module}.{name}"])
print(json.dumps(missing))
"""


def missing_at(clone: Path, tag: str, uses: set, tmp: Path) -> dict[tuple, str]:
    """The uses that the tag's transformer_lib does not provide, each with what is missing,
    checked in a fresh interpreter."""
    tree = tmp / tag
    if not tree.exists():
        archive = git("archive", tag, "transformer_lib", cwd=clone, binary=True)
        with tarfile.open(fileobj=BytesIO(archive)) as tar:
            tar.extractall(tree, filter="data")
    run = subprocess.run([sys.executable, "-c", CHECK, str(tree)], input=json.dumps(sorted(
        uses, key=str)), capture_output=True, text=True, cwd=tmp)
    assert run.returncode == 0, run.stderr[-2000:]
    return {(module, name): what for module, name, what in json.loads(run.stdout)}


def test_uses_are_found_in_a_notebooks_code():
    """The parser sees each form of use (a test of the test)."""
    src = ["import transformer_lib\nimport transformer_lib.train as tr\n"
           "from transformer_lib.data import load_multi30k as lm, DataError\n"
           "from transformer_lib import exercises\n"
           "x = transformer_lib.load_translator()\ntr.reader_commands\nexercises.pre_ln\n"]
    assert package_uses(src) == {
        ("transformer_lib", None), ("transformer_lib.train", None),
        ("transformer_lib.data", None), ("transformer_lib.data", "load_multi30k"),
        ("transformer_lib.data", "DataError"), ("transformer_lib", "exercises"),
        ("transformer_lib", "load_translator"), ("transformer_lib.train", "reader_commands"),
        ("transformer_lib.exercises", "pre_ln")}


def test_every_notebook_runs_from_the_release_it_names(tagged_clone, tmp_path):
    tags = set(git("tag", "--list", "v*", cwd=tagged_clone).split())
    problems, uses_by_tag = [], {}
    for path in notebooks():
        rel = path.relative_to(ROOT).as_posix()
        nb = json.loads(path.read_text())
        badge, installs = pinned_release(nb)
        if badge != installs or badge is None:
            problems.append(f"{rel}: the badge opens {badge}, the set-up cell installs {installs}")
            continue
        if badge not in tags:
            problems.append(f"{rel}: names {badge}, which `make tags` does not make (tags: "
                            f"{sorted(tags)})")
            continue
        try:
            git("cat-file", "-e", f"{badge}:{rel}", cwd=tagged_clone)
        except subprocess.CalledProcessError:
            problems.append(f"{rel}: not in {badge}, so its Colab badge is a 404")
            continue
        for use in package_uses(code_of(nb)):
            uses_by_tag.setdefault(badge, {}).setdefault(use, []).append(path.name)
    for tag, uses in uses_by_tag.items():
        lacking: dict[str, set] = {}
        for use, what in missing_at(tagged_clone, tag, set(uses), tmp_path).items():
            lacking.setdefault(what, set()).update(uses[use])
        problems += [f"{what}: {tag} does not have it; used by {', '.join(sorted(who))}"
                     for what, who in sorted(lacking.items())]
    assert not problems, f"{ROUTINE}:\n" + "\n".join(problems)


def toc_files(toc: dict) -> list[str]:
    found = []

    def walk(node):
        if isinstance(node, dict):
            if "file" in node:
                found.append(node["file"])
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)
    walk(toc)
    return found


def test_the_sites_launch_buttons_open_a_release_with_every_page(tagged_clone):
    config = yaml.safe_load((ROOT / "book" / "_config.yml").read_text())
    branch = config["repository"]["branch"]
    assert branch in git("tag", "--list", "v*", cwd=tagged_clone).split(), \
        f"book/_config.yml's repository.branch {branch} is not a release tag ({ROUTINE})"
    toc = yaml.safe_load((ROOT / "book" / "_toc.yml").read_text())
    pages = [toc["root"]] + toc_files(toc)
    assert len(pages) > 30
    held = set(git("ls-tree", "-r", "--name-only", branch, cwd=tagged_clone).split("\n"))
    absent = [page for page in pages
              if not any(f"{page}{ext}" in held for ext in ("", ".ipynb", ".md"))]
    assert not absent, (f"pages of book/_toc.yml that {branch} does not hold, so their launch "
                        f"buttons open nothing: {absent} ({ROUTINE})")


def test_a_name_a_release_lacks_is_found_and_one_it_has_is_not(tagged_clone, tmp_path):
    """Against the release 0.3.0, which never changes: it had the model and chapter 18's
    `translate`, not the export module of appendix A8 nor chapter 18's `reader_commands`."""
    uses = {("transformer_lib", "Transformer"), ("transformer_lib.train", "translate"),
            ("transformer_lib.export", None), ("transformer_lib.train", "reader_commands"),
            ("transformer_lib", "no_such_name")}
    assert missing_at(tagged_clone, "v0.3.0", uses, tmp_path) == {
        ("transformer_lib.export", None): "transformer_lib.export",
        ("transformer_lib.train", "reader_commands"): "transformer_lib.train.reader_commands",
        ("transformer_lib", "no_such_name"): "transformer_lib.no_such_name"}
