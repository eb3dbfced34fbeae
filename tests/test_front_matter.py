"""What the front matter says about the chapters, checked against the chapters.

book/appendix.md and book/intro.md list which chapters use which helper, measure speed, or load
which data; the notation page says which letters a chapter writes. Each list here is recomputed
from the notebooks' own code and text, so a chapter that starts or stops using a helper, or a
page that forgets an appendix, fails a test instead of leaving a sentence that is no longer true.
"""
from __future__ import annotations

import json
import re
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = ROOT / "notebooks"


@cache
def cells(path: Path) -> list[dict]:
    return json.loads(path.read_text())["cells"]


def markdown(path: Path) -> str:
    return "\n\n".join("".join(c["source"]) for c in cells(path) if c["cell_type"] == "markdown")


def code(path: Path, exported: bool = True) -> str:
    """The code cells of a notebook; with `exported=False`, only the cells that stay in the
    notebook (not `#| export`)."""
    return "\n\n".join("".join(c["source"]) for c in cells(path) if c["cell_type"] == "code"
                       and (exported or not "".join(c["source"]).startswith("#| export")))


def chapters() -> dict[str, Path]:
    "The numbered chapters, '00' to '19'."
    return {p.name[:2]: p for p in sorted(NOTEBOOKS.glob("[0-9][0-9]_*.ipynb"))}


def exercises(solutions: bool = True) -> dict[str, Path]:
    "Exercise number -> its notebooks (the exercise, and with `solutions` its solution)."
    found: dict[str, list[Path]] = {}
    for p in sorted((NOTEBOOKS / "exercises").rglob("ex[0-9]_*.ipynb")):
        if solutions or "solutions" not in p.parts:
            found.setdefault(p.name[2], []).append(p)
    return found


def chapters_where(test, exported: bool = True) -> set[str]:
    return {n for n, p in chapters().items() if test(code(p, exported))}


def exercises_where(test, exported: bool = True) -> set[str]:
    return {n for n, ps in exercises().items() if any(test(code(p, exported)) for p in ps)}


def listed(text: str) -> set[str]:
    """The chapter numbers of a list as the prose writes it: "01–05, 09, 18 and 19"."""
    out = set()
    for a, b in re.findall(r"\b(\d{2})(?:–(\d{2}))?\b", text):
        out |= {f"{i:02d}" for i in range(int(a), int(b or a) + 1)}
    return out


def one(pattern: str, text: str) -> re.Match:
    m = re.search(pattern, re.sub(r"\s+", " ", text))
    assert m, f"sentence not found (reworded? update the test with it): {pattern!r}"
    return m


def calls(name: str):
    return lambda src: re.search(rf"\b{name}\(", src) is not None


def test_listed_reads_ranges_and_lists():
    assert listed("01–05, 09, 10, 12, 16, 18 and 19") == {"01", "02", "03", "04", "05", "09",
                                                          "10", "12", "16", "18", "19"}
    assert listed("02 and 05") == {"02", "05"}


# --- book/appendix.md -----------------------------------------------------------------------------

APPENDIX = (ROOT / "book" / "appendix.md").read_text()
NUMBERS = {"one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8,
           "nine": 9}


def test_the_appendix_overview_names_every_appendix():
    appendices = sorted(p.stem for p in NOTEBOOKS.glob("A[0-9]_*.ipynb"))
    modules = [a for a in appendices if "#| default_exp" in code(NOTEBOOKS / f"{a}.ipynb")]
    count = one(r"^.*?\b(\w+) (?:small )?modules that the chapters use", APPENDIX).group(1)
    assert NUMBERS[count.lower()] == len(modules), (count, modules)
    linked = re.findall(r"\{doc\}`\.\./notebooks/(A\d_\w+)`", APPENDIX)
    assert sorted(linked) == appendices


def test_the_heatmap_chapters_are_the_ones_that_plot_attention():
    m = one(r"the heatmaps of attention weights in chapters ([\d–, and]+?) and in exercises? "
            r"([\d, and]+?)\.", APPENDIX)
    heat = lambda src: calls("plot_attention")(src) or calls("plot_attention_heads")(src)  # noqa: E731
    assert listed(m.group(1)) == chapters_where(heat)
    assert set(re.findall(r"\d", m.group(2))) == {
        n for n, ps in exercises().items() if any(heat(code(p)) for p in ps if "solutions"
                                                  not in p.parts)}


def test_the_architecture_map_and_diagram_chapters():
    m = one(r"the map of the architecture that opens chapters ([\d–, and]+?) \(`plot_architecture`",
            APPENDIX)
    assert listed(m.group(1)) == chapters_where(calls("plot_architecture"))
    m = one(r"an attention block in chapters ([\d–, and]+?) \(`plot_attention_diagram`", APPENDIX)
    assert listed(m.group(1)) == chapters_where(calls("plot_attention_diagram"))


def test_the_data_chapters():
    m = one(r"Multi30k \(chapters ([\d–, and]+?)\)", APPENDIX)
    assert listed(m.group(1)) == chapters_where(calls("load_multi30k"))
    m = one(r"Tiny Shakespeare \(exercises ([\d, and]+?)\)", APPENDIX)
    assert set(re.findall(r"\d", m.group(1))) == exercises_where(calls("load_tiny_shakespeare"))
    m = one(r"`load_translator`, the capstone's trained weights, which chapters ([\d–, and]+?) "
            r"load", APPENDIX)
    assert listed(m.group(1)) == chapters_where(calls("load_translator"))


# --- who measures speed: book/appendix.md and book/intro.md --------------------------------------

def uses_benchmarking(src: str) -> bool:
    return re.search(r"from transformer_lib\.benchmarking import|transformer_lib\.benchmarking\.",
                     src) is not None


def test_the_benchmark_chapters_are_the_ones_that_use_the_timing_helpers():
    timed = chapters_where(uses_benchmarking, exported=False)        # the chapters' own cells
    timed_exercises = exercises_where(uses_benchmarking, exported=False)
    m = one(r"benchmark cells of chapters? ([\d–, and]+?) and exercises? (\d)\b", APPENDIX)
    assert listed(m.group(1)) == timed and {m.group(2)} == timed_exercises
    intro = (ROOT / "book" / "intro.md").read_text()
    m = one(r"The other chapters that measure speed \(([\d–, and]+?), and the solution of "
            r"exercises? (\d)\)", intro)
    assert listed(m.group(1)) == timed and {m.group(2)} == timed_exercises


def test_chapter_09b_times_its_layers_on_one_thread():
    intro = (ROOT / "book" / "intro.md").read_text()
    one(r"Chapter 09b times four kinds of layer on one CPU thread, whatever the runtime\.", intro)
    src = code(NOTEBOOKS / "09b_why_self_attention.ipynb")
    assert "torch.set_num_threads(1)" in src and "time.perf_counter()" in src
    assert not uses_benchmarking(src)
    timed = re.search(r'layers = \{(.*?)\}\n', src, re.DOTALL).group(1)
    assert len(re.findall(r'^\s*"[^"]+":', timed, re.MULTILINE)) == 4


# --- book/notation.md -----------------------------------------------------------------------------

NOTATION = (ROOT / "book" / "notation.md").read_text()


def claims(text: str) -> list[tuple[str, str]]:
    """(chapter, symbol) for every "chapter NN: $a$, $b$" of the notation tables."""
    out = []
    for number, symbols in re.findall(r"chapter (\d{2}): ((?:\$[^$]+\$(?:, )?)+)", text):
        out += [(number, s) for s in re.findall(r"\$([^$]+)\$", symbols)]
    return out


def test_the_claims_are_read():
    assert ("17", r"\lvert\mathcal V_0\rvert + M") in claims(NOTATION)
    assert claims("| chapter 00: $N_q$, $N_k$ |") == [("00", "N_q"), ("00", "N_k")]


def spelled(tex: str) -> str:
    "TeX without the spellings that do not change what is printed: spaces, \\lvert and \\rvert."
    return re.sub(r"\s+", "", tex.replace(r"\lvert", "|").replace(r"\rvert", "|"))


@pytest.mark.parametrize("number, symbol", claims(NOTATION))
def test_a_chapter_writes_the_letters_the_notation_page_says_it_writes(number, symbol):
    assert spelled(symbol) in spelled(markdown(chapters()[number])), (
        f"the notation page says chapter {number} writes ${symbol}$; it does not")


def top_level_items(text: str) -> list[str]:
    """A list "a (x, y), b, and c" split at its commas outside brackets and $...$."""
    items, depth, math, start = [], 0, False, 0
    for i, ch in enumerate(text):
        if ch == "$":
            math = not math
        elif ch == "(" and not math:
            depth += 1
        elif ch == ")" and not math:
            depth -= 1
        elif ch == "," and depth == 0 and not math:
            items.append(text[start:i])
            start = i + 1
    return [s.strip().removeprefix("and ") for s in items + [text[start:]]]


def test_the_meanings_of_m_are_counted():
    m = one(r"\$m\$ is still (\w+) things, each kept because its source uses it: (.*?)\. "
            r"Chapter 02", NOTATION)
    items = top_level_items(m.group(2))
    assert NUMBERS[m.group(1)] == len(items), items
    assert any("m_t" in item for item in items)                     # Adam's first moment, ch. 14
    assert "m_t" in markdown(chapters()["14"])


def test_the_number_of_layers_is_never_L():
    """The notation page: L is a sequence length everywhere, N_layers the number of layers."""
    one(r"\$L\$ is a sequence length everywhere", NOTATION)
    pages = [chapters()["07"], *exercises()["1"]]
    for p in pages:
        text = markdown(p) + code(p)
        assert not re.search(r"\\mathbf x_L\b|x_\{L\}|blocks L\b|layers L\b", text), p.name
