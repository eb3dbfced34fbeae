"""Versions a reader can pin: the release record (`transformer_lib.__version__`, CHANGELOG.md's
newest entry, the notebooks' set-up cells and the newest `v*` git tag agree; the routine is at the
top of CHANGELOG.md), and the `tokenizers` versions that `text._joint_bpe` is tested with (it edits
the library's internal JSON, so a change of that format must fail here, not in a reader's chapter
17)."""
import json
import re
import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.version import InvalidVersion, Version
from setup_cell import REF_LINE, REPO_URL, VERSION, notebooks

ROOT = Path(__file__).resolve().parents[1]
TAG = f"v{VERSION}"
ROUTINE = "the release routine at the top of CHANGELOG.md"


# --- the release record ------------------------------------------------------------------------

def test_version_is_a_release_number():
    assert re.fullmatch(r"\d+\.\d+\.\d+", VERSION), \
        f"transformer_lib.__version__ is {VERSION!r}, not X.Y.Z (tags are vX.Y.Z)"


def test_the_package_reports_the_version_of_its_source():
    import transformer_lib

    if Path(transformer_lib.__file__).resolve().parents[1] != ROOT:
        pytest.skip(f"transformer_lib imported from {transformer_lib.__file__}, not this checkout")
    assert transformer_lib.__version__ == VERSION


def test_the_books_colab_links_open_the_release():
    """The site's launch buttons (book/_config.yml's repository.branch) and every notebook's badge
    open the notebooks of the tag v{__version__}, the release their set-up cells install."""
    import yaml
    from setup_cell import badge_source, colab_link
    branch = yaml.safe_load((ROOT / "book" / "_config.yml").read_text())["repository"]["branch"]
    assert branch == TAG, f"book/_config.yml's repository.branch is {branch}: run {ROUTINE}"
    assert colab_link("notebooks/x.ipynb").endswith(f"/blob/{TAG}/notebooks/x.ipynb")
    for path in notebooks():
        rel = path.relative_to(ROOT).as_posix()
        assert "".join(json.loads(path.read_text())["cells"][0]["source"]) == badge_source(rel), rel


def changelog_entries() -> list[tuple[str, str | None, str]]:
    """(version, date or None, text) of each `## [X.Y.Z] - YYYY-MM-DD` entry, newest first; an
    `## [Unreleased]` section is not an entry."""
    text = (ROOT / "CHANGELOG.md").read_text()
    heads = list(re.finditer(r"^## \[([^\]]+)\](?: - (\S+))?[ \t]*$", text, re.M))
    return [(m[1], m[2], text[m.end():heads[i + 1].start() if i + 1 < len(heads) else None])
            for i, m in enumerate(heads) if m[1].lower() != "unreleased"]


def test_changelog_newest_entry_is_this_version():
    entries = changelog_entries()
    assert entries, "CHANGELOG.md has no '## [X.Y.Z] - YYYY-MM-DD' entry"
    version, date, text = entries[0]
    assert version == VERSION, \
        (f"CHANGELOG.md's newest entry is {version}, transformer_lib.__version__ is {VERSION}: "
         f"write the entry or bump the version ({ROUTINE})")
    assert date and re.fullmatch(r"\d{4}-\d{2}-\d{2}", date), \
        f"CHANGELOG.md's entry {version} needs a date: '## [{version}] - YYYY-MM-DD'"
    assert text.strip(), f"CHANGELOG.md's entry {version} says nothing"


def test_changelog_entries_are_newest_first_and_unique():
    versions = [Version(v) for v, _, _ in changelog_entries()]
    assert versions == sorted(set(versions), reverse=True), \
        f"CHANGELOG.md's entries must be unique and newest first: {[str(v) for v in versions]}"


def test_every_set_up_cell_installs_this_release():
    """Each notebook's set-up cell pins the version of the package beside it and installs its tag
    (tests/test_notebooks_clean.py checks the whole cell; this names the release mismatch)."""
    pinned = {}
    for path in notebooks():
        source = "".join(json.loads(path.read_text())["cells"][1]["source"])
        m = re.search(r'^URL, VERSION = "[^"]*", "([^"]*)"$', source, re.M)
        pinned[path.relative_to(ROOT).as_posix()] = m[1] if m else None
        assert REF_LINE in source and '@{REF}"' in source, \
            f"{path.name}: the set-up cell does not install the tag v{{VERSION}} ({REF_LINE})"
    wrong = {name: v for name, v in pinned.items() if v != VERSION}
    assert not wrong, (f"set-up cells pinning another version than {VERSION}: {wrong}; run "
                       f"`python tests/setup_cell.py` ({ROUTINE})")


def test_the_readme_pins_this_release():
    """The README's first screen tells a reader how to pin a release, with this one's tag."""
    readme = (ROOT / "README.md").read_text()
    pins = re.findall(r"@ git\+(\S+?)@(v[^\s\"]+)", readme)
    assert pins, "the README shows no pinned install (pip install \"... @ git+URL@vX.Y.Z\")"
    assert all(pin == (REPO_URL, TAG) for pin in pins), \
        f"the README pins {sorted(set(pins))}, not {TAG} of {REPO_URL} ({ROUTINE})"


def git(*args) -> subprocess.CompletedProcess:
    return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True)


def release_tags() -> list[tuple[Version, str]]:
    """The checkout's `v*` tags that name a version, oldest first; skips (saying why) where there
    is no git or no such tag: a CI clone or a copy of the tree may have none, and then the tag
    cannot be checked."""
    if shutil.which("git") is None or git("rev-parse", "--git-dir").returncode:
        pytest.skip("not a git checkout: the newest v* tag was NOT checked against __version__")
    tags = []
    for name in git("tag", "--list", "v*").stdout.split():
        try:
            tags.append((Version(name[1:]), name))
        except InvalidVersion:
            continue
    if not tags:
        pytest.skip("this checkout has no v* tags (a shallow or tagless clone): the newest tag was "
                    "NOT checked against __version__")
    return sorted(tags)


def test_newest_tag_is_this_version_and_tags_a_commit_of_it():
    """Where the checkout has release tags, the newest is `v{__version__}`, on a commit of this
    branch's history whose own `__version__` is that version. A version bumped but not yet tagged
    fails here until the tag is made (step 6 of the routine)."""
    tags = release_tags()
    newest = tags[-1][1]
    assert newest == TAG, (f"the newest release tag is {newest} but transformer_lib.__version__ "
                           f"is {VERSION}: tag the release commit {TAG} ({ROUTINE}), or bump the "
                           "version to the tag's")
    assert git("merge-base", "--is-ancestor", TAG, "HEAD").returncode == 0, \
        f"the tag {TAG} is not on this branch's history (HEAD does not contain it)"
    tagged = git("show", f"{TAG}:transformer_lib/__init__.py").stdout
    assert f'__version__ = "{VERSION}"' in tagged, \
        f"the tag {TAG} is on a commit whose transformer_lib.__version__ is not {VERSION}"


# --- tokenizers: the versions _joint_bpe is tested with ------------------------------------------

try:
    import tokenizers
except ImportError:                        # a core install: the release record is still checked
    tokenizers = None
needs_tokenizers = pytest.mark.skipif(tokenizers is None, reason="tokenizers is not installed")


def tokenizers_requirements() -> dict[str, Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    return {extra: Requirement(req) for extra, reqs in extras.items() for req in reqs
            if Requirement(req).name == "tokenizers"}


def bound_of_tokenizers() -> str:
    return str(tokenizers_requirements()["nlp"].specifier)


def test_tokenizers_is_bounded_alike_in_every_extra():
    reqs = tokenizers_requirements()
    assert set(reqs) == {"nlp", "colab", "wmt"}, \
        f"tokenizers is required by the extras {sorted(reqs)}"
    specs = {extra: req.specifier for extra, req in reqs.items()}
    assert len(set(map(str, specs.values()))) == 1, f"the extras bound tokenizers apart: {specs}"
    spec = specs["nlp"]
    assert any(s.operator in ("<", "<=", "==", "~=") for s in spec), \
        f"tokenizers{spec} has no upper bound: _joint_bpe edits its internal JSON"


@needs_tokenizers
def test_the_installed_and_the_pinned_tokenizers_are_in_the_tested_range():
    spec = tokenizers_requirements()["nlp"].specifier
    pins = re.findall(r"^tokenizers==(\S+)", (ROOT / "requirements.txt").read_text(), re.M)
    assert pins and pins[0] in spec, \
        f"requirements.txt pins tokenizers {pins}, outside pyproject.toml's tokenizers{spec}"
    assert tokenizers.__version__ in spec, \
        (f"tokenizers {tokenizers.__version__} is installed, outside pyproject.toml's "
         f"tokenizers{spec}: run this file under it and widen the bound only if it passes")


def bpe_format_problems(spec) -> list[str]:
    """What `_joint_bpe` relies on in `json.loads(Tokenizer.to_str())` of a freshly trained BPE
    tokenizer, and finds missing in `spec`: a BPE model with a `vocab` of token -> id whose ids are
    0..n-1 (so `len(vocab)` is the next free id), the special tokens at ids 0-3 both there and in
    `added_tokens`, and a boolean `byte_fallback` (False) for it to switch on."""
    from transformer_lib.text import SPECIAL_TOKENS

    if not isinstance(spec, dict) or not isinstance(spec.get("model"), dict):
        return ["the JSON has no 'model' object"]
    model, problems = spec["model"], []
    if model.get("type") != "BPE":
        problems.append(f"model.type is {model.get('type')!r}, not 'BPE'")
    vocab = model.get("vocab")
    if not (isinstance(vocab, dict) and all(isinstance(t, str) and type(i) is int
                                            for t, i in vocab.items())):
        problems.append("model.vocab is not an object of token -> integer id")
    elif sorted(vocab.values()) != list(range(len(vocab))):
        problems.append("model.vocab's ids are not 0..n-1, so len(vocab) is not the next free id")
    elif [vocab.get(t) for t in SPECIAL_TOKENS] != [0, 1, 2, 3]:
        problems.append(f"the special tokens are not at ids 0-3 of model.vocab: "
                        f"{[vocab.get(t) for t in SPECIAL_TOKENS]}")
    if "byte_fallback" not in model:
        problems.append("model has no 'byte_fallback' key")
    elif model["byte_fallback"] is not False:
        problems.append(f"model.byte_fallback is {model['byte_fallback']!r}, not false")
    added = spec.get("added_tokens")
    if not (isinstance(added, list) and all(isinstance(a, dict) for a in added)
            and [(a.get("id"), a.get("content")) for a in added[:4]]
            == list(enumerate(SPECIAL_TOKENS))):
        problems.append("added_tokens does not start with the special tokens at ids 0-3")
    return problems


def format_message(problems: list[str]) -> str:
    return (f"tokenizers {tokenizers.__version__} serialises a BPE tokenizer differently from what "
            "transformer_lib.text._joint_bpe edits (tested with "
            f"tokenizers{bound_of_tokenizers()}): "
            + "; ".join(problems) + ". Adapt _joint_bpe (notebooks/17_subwords_and_bleu.ipynb) "
            "or bound tokenizers below this version in pyproject.toml")


TEXTS = ["ein hund läuft", "a dog runs", "ein mann und ein hund", "a man and a dog"]


@pytest.fixture
def joint_bpe_json(monkeypatch):
    """Train through `_joint_bpe` itself, with the real library, and catch the JSON it reads from
    `Tokenizer.to_str()` (before its edit) and writes back (after it). Skips without tokenizers."""
    if tokenizers is None:
        pytest.skip("tokenizers is not installed")
    from transformer_lib import text

    seen = {}
    real = text.json

    class Spy:
        @staticmethod
        def loads(s, *args, **kwargs):
            seen["read"] = real.loads(s, *args, **kwargs)
            return real.loads(s, *args, **kwargs)

        @staticmethod
        def dumps(obj, *args, **kwargs):
            seen["written"] = real.loads(real.dumps(obj))
            return real.dumps(obj, *args, **kwargs)

    monkeypatch.setattr(text, "json", Spy)
    tok = text._joint_bpe(TEXTS, vocab_size=300, min_frequency=1)
    monkeypatch.undo()
    assert set(seen) == {"read", "written"}, \
        ("_joint_bpe no longer reads and writes the tokenizer's JSON through json.loads/dumps: "
         "update this test to what it edits now")
    return tok, seen["read"], seen["written"]


def test_bpe_json_has_what_joint_bpe_edits(joint_bpe_json):
    _, read, _ = joint_bpe_json
    problems = bpe_format_problems(read)
    assert not problems, format_message(problems)


def test_the_edit_takes_effect(joint_bpe_json):
    """The library reads back what `_joint_bpe` wrote: the 256 byte tokens after the learned
    vocabulary, in byte order, and byte fallback on, so an unseen character becomes its UTF-8
    bytes, not `<unk>`, and decodes back."""
    from transformer_lib.text import BYTE_TOKENS, UNK_ID

    tok, read, written = joint_bpe_json
    n = len(read["model"]["vocab"])
    back = json.loads(tok.to_str())["model"]
    problems = []
    if back.get("byte_fallback") is not True:
        problems.append(f"byte_fallback reads back as {back.get('byte_fallback')!r}, not true")
    if [back.get("vocab", {}).get(b) for b in BYTE_TOKENS] != list(range(n, n + 256)):
        problems.append(f"the byte tokens do not read back at ids {n}..{n + 255}")
    if tok.get_vocab_size() != n + 256:
        problems.append(f"vocabulary size {tok.get_vocab_size()}, not {n} + 256")
    unseen = "€"                                                   # not in TEXTS: bytes E2 82 AC
    enc = tok.encode(unseen, add_special_tokens=False)
    want = [f"<0x{b:02X}>" for b in unseen.encode()]
    if UNK_ID in enc.ids or enc.tokens[-3:] != want:
        problems.append(f"{unseen!r} encodes to {enc.tokens}, not its bytes {want}")
    elif tok.decode(enc.ids) != unseen:
        problems.append(f"{unseen!r} decodes back as {tok.decode(enc.ids)!r}")
    assert written["model"]["byte_fallback"] is True
    assert not problems, format_message(problems)


@pytest.mark.parametrize("break_it, expected", [
    (lambda s: s["model"].pop("byte_fallback"), "no 'byte_fallback' key"),
    (lambda s: s["model"].update(vocab=sorted(s["model"]["vocab"])), "token -> integer id"),
    (lambda s: s["model"]["vocab"].update({"<pad>": 10 ** 6}), "not 0..n-1"),
    (lambda s: s["model"].update(type="Unigram"), "not 'BPE'"),
    (lambda s: s.pop("model"), "no 'model' object"),
    (lambda s: s.update(added_tokens=s["added_tokens"][1:]), "added_tokens"),
])
def test_a_format_change_fails_with_the_version(joint_bpe_json, break_it, expected):
    """The check above can fail: each change that would break `_joint_bpe` is named, with the
    installed tokenizers version."""
    spec = json.loads(json.dumps(joint_bpe_json[1]))
    break_it(spec)
    problems = bpe_format_problems(spec)
    assert any(expected in p for p in problems), problems
    assert f"tokenizers {tokenizers.__version__} " in format_message(problems)
