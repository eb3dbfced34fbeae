"""Every file under results/ has an entry in a README: results/README.md, or the README.md of the
folder that holds it (results/gpu-2026-11-28/README.md).

An entry names a file in backticks: by its path under results/ or its folder's README
(`tuning-zen4/fp32-peak-1e-3.averages.json`, `gpu-5min.json`), by a pattern with `*` or with a
placeholder in capitals (`ablations/*.json`, `rematch/gru-WIDTH-lrLR.json`, `tuning/TRIAL.json`),
or as a sibling of a named record (`X.json` named, and `.history.json` or another `.KIND.json`
named beside it: "(+ `.history.json`)"). Appendix A7 tells the reader that the README describes
every record; a record added without an entry fails here.
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest

RESULTS = Path(__file__).resolve().parents[1] / "results"
PLACEHOLDER = re.compile(r"[A-Z]+")         # TRIAL, ROW, N, WIDTH, LR, S (names are lower case)


def files() -> list[str]:
    return sorted(p.relative_to(RESULTS).as_posix() for p in RESULTS.rglob("*")
                  if p.is_file() and p.name != "README.md")


def named(readme: Path) -> set[str]:
    "Every backticked word of a README that names a file or a pattern of files."
    text = readme.read_text()
    return {m for m in re.findall(r"`([^`\s]+)`", text) if re.search(r"\.(json|txt|log)$", m)
            and ("/" in m or not is_pattern(m))}     # a pattern names its folder: not `*.json`


def is_pattern(name: str) -> bool:
    return "*" in name or bool(PLACEHOLDER.search(name))


def pattern(name: str) -> re.Pattern:
    """`ablations/*.json` and `rematch/gru-WIDTH-lrLR.json` as regular expressions over paths;
    a plain name matches itself only."""
    parts = []
    for piece in re.split(r"(\*|" + PLACEHOLDER.pattern + ")", name):
        if piece == "*" or (piece and PLACEHOLDER.fullmatch(piece)):
            parts.append(r"[^/]+")
        elif piece:
            parts.append(re.escape(piece))
    return re.compile("".join(parts))


def entries() -> dict[Path, set[str]]:
    "Each README under results/ with the names it gives, relative to its own folder."
    return {readme: named(readme) for readme in sorted(RESULTS.rglob("README.md"))}


def described(path: str, readmes: dict[Path, set[str]]) -> bool:
    for readme, names in readmes.items():
        folder = readme.parent.relative_to(RESULTS).as_posix()
        rel = path if folder == "." else path.removeprefix(folder + "/")
        if folder != "." and rel == path:                 # not in this README's folder
            continue
        candidates = {rel, rel.rsplit("/", 1)[-1]} if folder == "." else {rel}
        for name in names:
            if any(pattern(name).fullmatch(c) for c in candidates):
                return True
        sibling = re.fullmatch(r"(.+?)\.([a-z-]+)\.json", rel)       # X.history.json, X.load.json
        if sibling and f".{sibling.group(2)}.json" in names:
            base = sibling.group(1) + ".json"
            if any(pattern(name).fullmatch(c) for name in names
                   for c in ({base, base.rsplit("/", 1)[-1]} if folder == "." else {base})):
                return True
    return False


def test_there_are_records():
    assert len(files()) > 100 and (RESULTS / "README.md").is_file()


@pytest.mark.parametrize("path", files())
def test_every_record_has_an_entry(path):
    assert described(path, entries()), (
        f"results/{path} has no entry in results/README.md (or its folder's README.md): add one "
        "that names it, the command that made it, the commit, the machine and the conditions")


def test_the_matcher_is_not_too_lenient():
    readmes = {RESULTS / "README.md": {"ablations/*.json", "rematch/gru-WIDTH-lrLR.json",
                                       "tuning/TRIAL.json", ".history.json", "gpu-30s.json"}}
    assert described("ablations/base.seed1.json", readmes)
    assert described("rematch/gru-344-lr1e-3.json", readmes)
    assert described("tuning/layers_2.history.json", readmes)
    assert described("gpu-30s.json", readmes)
    assert not described("rematch/transformer-seed0.json", readmes)
    assert not described("ablations/earlier/base.json", readmes)      # `*` stays in its folder
    assert not described("gpu-30s.shipped.json", readmes)             # no `.shipped.json` named
    assert not described("host-cost-cpu.json", readmes)
