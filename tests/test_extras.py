"""A core install (torch only) works on its own, and a module that needs an extra says which one.

Each case runs with some packages hidden (`sys.modules[name] = None`, which makes `import name`
fail exactly as if it were not installed) and every `transformer_lib` module unloaded first, so
that the package is imported afresh as on a machine without the extra. The cases share one
interpreter (a fresh one costs seconds); `run_hidden` is the one-case, fresh-interpreter form
that `test_reader_facing_helpers_are_at_the_top_level` needs, since it watches what `import
transformer_lib` brings into a new process."""
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import transformer_lib

ROOT = Path(__file__).resolve().parents[1]
EXTRAS = {"matplotlib", "tqdm", "tokenizers", "sacrebleu"}

# Runs each case of a JSON list {"hidden": [...], "code": "..."} and prints one JSON result per
# case: what it printed and the error it raised (type and message), if any. Between cases the
# hidden packages come back (their modules stay loaded: an extension module cannot be loaded
# twice) and transformer_lib's modules are unloaded.
RUNNER = r"""
import contextlib, io, json, sys, traceback
cases = json.loads(sys.stdin.read())
results = []
for case in cases:
    for name in [m for m in sys.modules if m.split(".")[0] == "transformer_lib"]:
        del sys.modules[name]
    hidden = {m: sys.modules[m] for m in list(sys.modules)
              if m.split(".")[0] in case["hidden"]}
    for m in set(case["hidden"]) | set(hidden):
        sys.modules[m] = None
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out):
            exec(case["code"], {"__name__": "__case__"})
        error = None
    except BaseException as e:
        error = {"type": type(e).__name__, "import_error": isinstance(e, ImportError),
                 "message": str(e), "traceback": traceback.format_exc()[-1500:]}
    finally:
        for m in case["hidden"]:
            sys.modules.pop(m, None)
        sys.modules.update(hidden)
    results.append({"stdout": out.getvalue(), "error": error})
print(json.dumps(results))
"""

CASES: list[tuple[frozenset, str]] = []             # every case the tests below ask for


def case(hidden, code: str) -> tuple[frozenset, str]:
    """Register a case (at collection time) and return its key."""
    key = (frozenset(hidden), textwrap.dedent(code))
    if key not in CASES:
        CASES.append(key)
    return key


@pytest.fixture(scope="module")
def results() -> dict:
    """Every registered case, run in one fresh interpreter: key -> {"stdout", "error"}."""
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    payload = json.dumps([{"hidden": sorted(h), "code": c} for h, c in CASES])
    r = subprocess.run([sys.executable, "-c", RUNNER], input=payload, cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    return dict(zip(CASES, json.loads(r.stdout.strip().splitlines()[-1])))


def run_hidden(hidden, code: str) -> subprocess.CompletedProcess:
    prelude = f"import sys\nfor _m in {sorted(hidden)!r}:\n    sys.modules[_m] = None\n"
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    return subprocess.run([sys.executable, "-c", prelude + textwrap.dedent(code)], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=120)


def import_error(results: dict, key) -> str:
    """The message of the ImportError the case raised ('' if it raised none; any other error
    fails the test)."""
    error = results[key]["error"]
    if error is None:
        return ""
    assert error["import_error"], error["traceback"]
    return error["message"]


def finished(results: dict, key) -> str:
    """What the case printed; it must have raised nothing."""
    error = results[key]["error"]
    assert error is None, error["traceback"]
    return results[key]["stdout"]


MODULE_EXTRAS = [
    ("plotting", "matplotlib", "plot"),
    ("training", "tqdm", "nlp"),
    ("train", "tqdm", "nlp"),
    ("exercises", "tqdm", "nlp"),   # the exercises' checkers train with transformer_lib.training
    ("exercises.pre_ln", "tqdm", "nlp"),       # ... and so does every exercise's module
    ("exercises.positions", "tqdm", "nlp"),    # (the README's extras table says so)
    ("exercises.char_model", "tqdm", "nlp"),
    ("exercises.reading_heads", "tqdm", "nlp"),
    ("exercises.rope", "tqdm", "nlp"),
    ("inside", "tqdm", "nlp"),      # chapter 19: it translates with transformer_lib.stages
]
TEXT_STATEMENTS = [
    ("tokenizers", "SubwordTokenizer.train(['ein hund', 'a dog'], vocab_size=300)"),
    ("tokenizers", "SubwordTokenizer.load('tokenizer.json')"),
    ("sacrebleu", "corpus_bleu(['a dog'], ['a dog'])"),
]
LAZY_MODULES = sorted(set(transformer_lib._LAZY.values()))


def module_case(module, hidden):
    return case({hidden}, f"import transformer_lib.{module}")


def text_case(hidden, statement):
    return case({hidden}, "from transformer_lib.text import SubwordTokenizer, corpus_bleu, "
                          f"learn_bpe\nlearn_bpe(['a dog'], 2)\n{statement}")


def lazy_case(module):
    return case(EXTRAS - {transformer_lib._NEEDS.get(module, (None,))[0]},
                f"import transformer_lib.{module}")


STAR_CORE = case(EXTRAS, """
    from transformer_lib import *
    names = dir()
    print("Transformer" in names, "load_multi30k" in names, "plot_attention" in names,
          "train" in names)
    """)
STAR_NO_MATPLOTLIB = case({"matplotlib"}, "from transformer_lib import *\n"
                                          "print('plot_attention' in dir(), 'train' in dir())")
STAR_ALL = case(set(), "import transformer_lib\nfrom transformer_lib import *\n"
                       "names = dir()\nprint(all(n in names for n in transformer_lib._LAZY))")
LAZY_PLOT = case({"matplotlib"}, "import transformer_lib; transformer_lib.plot_attention")
TRANSLATOR = case({"tokenizers"}, "import transformer_lib; "
                                  "transformer_lib.load_translator('no-such-file.pt')")
for _args in MODULE_EXTRAS:
    module_case(*_args[:2])
for _args in TEXT_STATEMENTS:
    text_case(*_args)
for _module in LAZY_MODULES:
    lazy_case(_module)


def test_the_shared_interpreter_isolates_its_cases(results):
    """Hiding works in the shared interpreter as in a fresh one: a package hidden in one case is
    back in the next, and transformer_lib is imported afresh in each."""
    assert "matplotlib" in import_error(results, LAZY_PLOT)
    assert finished(results, STAR_ALL).split() == ["True"]            # a later case: all back


@pytest.mark.parametrize("module, hidden, extra", MODULE_EXTRAS)
def test_module_without_its_extra_names_the_extra(results, module, hidden, extra):
    message = import_error(results, module_case(module, hidden))
    assert f'pip install "transformer-lib[{extra}]"' in message and hidden in message, message


def test_top_level_lazy_name_without_its_extra_names_the_extra(results):
    message = import_error(results, LAZY_PLOT)
    assert 'pip install "transformer-lib[plot]"' in message, message


def test_load_translator_without_tokenizers_names_the_extra(results):
    # was: a bare "ModuleNotFoundError: import of tokenizers halted" after the weights had been read
    message = import_error(results, TRANSLATOR)
    assert 'pip install "transformer-lib[nlp]"' in message and "tokenizers" in message, message


@pytest.mark.parametrize("hidden, statement", TEXT_STATEMENTS)
def test_text_imports_without_nlp_and_names_the_extra_where_it_is_needed(results, hidden,
                                                                         statement):
    message = import_error(results, text_case(hidden, statement))
    assert 'pip install "transformer-lib[nlp]"' in message and hidden in message, message


def test_star_import_on_a_core_install(results):
    # issue: `from transformer_lib import *` failed without matplotlib (the plotting names are in
    # __all__)
    assert finished(results, STAR_CORE).split() == ["True", "True", "False", "False"]


def test_star_import_without_matplotlib_only(results):
    assert finished(results, STAR_NO_MATPLOTLIB).split() == ["False", "True"]


def test_star_import_with_everything_installed_gives_every_name(results):
    assert finished(results, STAR_ALL).split() == ["True"]


@pytest.mark.parametrize("module", LAZY_MODULES)
def test_lazy_modules_need_only_what_init_says(results, module):
    """`_NEEDS` is complete: each lazily loaded module imports with every other extra package
    hidden."""
    error = results[lazy_case(module)]["error"]
    assert error is None, (f"transformer_lib.{module} needs more than "
                           f"{transformer_lib._NEEDS.get(module, (None,))[0]}: "
                           f"{error['traceback'][-500:]}")


def test_lazy_names_are_listed_by_dir():
    names = dir(transformer_lib)
    assert set(transformer_lib._LAZY) <= set(names)
    assert {"translate", "load_multi30k", "load_tiny_shakespeare", "Transformer"} <= set(names)


def test_reader_facing_helpers_are_at_the_top_level():
    from transformer_lib.data import load_multi30k
    from transformer_lib.stages import translate

    assert transformer_lib.translate is translate and transformer_lib.load_multi30k is load_multi30k
    # (torch itself may import tqdm: what counts is that transformer_lib adds none of them)
    code = ("import sys, json, torch\nbefore = "
            f"{{m for m in sys.modules if m in {EXTRAS!r}}}\nimport transformer_lib\n"
            f"print(json.dumps(sorted(m for m in sys.modules if m in {EXTRAS!r} and m not in "
            "before)))")
    r = run_hidden(set(), code)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == [], "import transformer_lib must not import the extras"
