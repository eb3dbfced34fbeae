"""A core install (torch only) works on its own, and a module that needs an extra says which one.

Each case runs in a fresh interpreter with some packages hidden (`sys.modules[name] = None`, which
makes `import name` fail exactly as if it were not installed)."""
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


def run_hidden(hidden, code: str) -> subprocess.CompletedProcess:
    prelude = f"import sys\nfor _m in {sorted(hidden)!r}:\n    sys.modules[_m] = None\n"
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    return subprocess.run([sys.executable, "-c", prelude + textwrap.dedent(code)], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=120)


def import_error(hidden, statement: str) -> str:
    """The message of the ImportError that `statement` raises with `hidden` hidden ('' if none)."""
    r = run_hidden(hidden, f"""
        try:
            {statement}
        except ImportError as e:
            print("IMPORTERROR", e)
        else:
            print("OK")
        """)
    assert r.returncode == 0, r.stderr
    line = r.stdout.strip().splitlines()[-1]
    return line.removeprefix("IMPORTERROR ") if line.startswith("IMPORTERROR") else ""


@pytest.mark.parametrize("module, hidden, extra", [
    ("plotting", "matplotlib", "plot"),
    ("training", "tqdm", "nlp"),
    ("train", "tqdm", "nlp"),
    ("exercises", "tqdm", "nlp"),   # the exercises' checkers train with transformer_lib.training
    ("char_model", "tqdm", "nlp"),  # ... and so do the exercise solutions
                                    # (the README's extras table says so)
    ("reading_heads", "tqdm", "nlp"),
    ("rope", "tqdm", "nlp"),
])
def test_module_without_its_extra_names_the_extra(module, hidden, extra):
    message = import_error({hidden}, f"import transformer_lib.{module}")
    assert f'pip install "transformer-lib[{extra}]"' in message and hidden in message, message


def test_top_level_lazy_name_without_its_extra_names_the_extra():
    message = import_error({"matplotlib"}, "import transformer_lib; transformer_lib.plot_attention")
    assert 'pip install "transformer-lib[plot]"' in message, message


def test_load_translator_without_tokenizers_names_the_extra():
    # was: a bare "ModuleNotFoundError: import of tokenizers halted" after the weights had been read
    message = (import_error({"tokenizers"}, "import transformer_lib; "
                                            "transformer_lib.load_translator('no-such-file.pt')"))
    assert 'pip install "transformer-lib[nlp]"' in message and "tokenizers" in message, message


@pytest.mark.parametrize("hidden, statement", [
    ("tokenizers", "SubwordTokenizer.train(['ein hund', 'a dog'], vocab_size=300)"),
    ("tokenizers", "SubwordTokenizer.load('tokenizer.json')"),
    ("sacrebleu", "corpus_bleu(['a dog'], ['a dog'])"),
])
def test_text_imports_without_nlp_and_names_the_extra_where_it_is_needed(hidden, statement):
    message = import_error({hidden}, "from transformer_lib.text import SubwordTokenizer, "
                                     "corpus_bleu, learn_bpe\n"
                                     "            learn_bpe(['a dog'], 2)\n            "
                                     f"{statement}")
    assert 'pip install "transformer-lib[nlp]"' in message and hidden in message, message


def test_star_import_on_a_core_install():
    # issue: `from transformer_lib import *` failed without matplotlib (the plotting names are in
    # __all__)
    r = run_hidden(EXTRAS, """
        from transformer_lib import *
        names = dir()
        print("Transformer" in names, "load_multi30k" in names, "plot_attention" in names,
              "train" in names)
        """)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["True", "True", "False", "False"]


def test_star_import_without_matplotlib_only():
    r = (run_hidden({"matplotlib"}, "from transformer_lib import *\nprint('plot_attention' in "
                                    "dir(), 'train' in dir())"))
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["False", "True"]


def test_star_import_with_everything_installed_gives_every_name():
    r = run_hidden(set(), "import transformer_lib\nfrom transformer_lib import *\n"
                          "names = dir()\nprint(all(n in names for n in transformer_lib._LAZY))")
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["True"]


@pytest.mark.parametrize("module", sorted(set(transformer_lib._LAZY.values())))
def test_lazy_modules_need_only_what_init_says(module):
    """`_NEEDS` is complete: each lazily loaded module imports with every other extra package
    hidden."""
    needed = transformer_lib._NEEDS.get(module, (None,))[0]
    r = run_hidden(EXTRAS - {needed}, f"import transformer_lib.{module}")
    assert r.returncode == 0, (f"transformer_lib.{module} needs more than {needed}: "
                               f"{r.stderr[-500:]}")


def test_lazy_names_are_listed_by_dir():
    names = dir(transformer_lib)
    assert set(transformer_lib._LAZY) <= set(names)
    assert {"translate", "load_multi30k", "load_tiny_shakespeare", "Transformer"} <= set(names)


def test_reader_facing_helpers_are_at_the_top_level():
    from transformer_lib.data import load_multi30k
    from transformer_lib.train import translate

    assert transformer_lib.translate is translate and transformer_lib.load_multi30k is load_multi30k
    # (torch itself may import tqdm: what counts is that transformer_lib adds none of them)
    code = ("import sys, json, torch\nbefore = "
            f"{{m for m in sys.modules if m in {EXTRAS!r}}}\nimport transformer_lib\n"
            f"print(json.dumps(sorted(m for m in sys.modules if m in {EXTRAS!r} and m not in "
            "before)))")
    r = run_hidden(set(), code)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == [], "import transformer_lib must not import the extras"
