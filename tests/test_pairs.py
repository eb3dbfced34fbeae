"""Parallel text from files (appendix A2, the recipe of A5, chapter 18's run): a tab-separated file
or two aligned files of a tiny two-language corpus written here, read, checked and split; `cpu-tiny`
trained and scored on it from the command line; the Tatoeba loader as the same reader; and every
bad input a clear one-line error that writes nothing."""
import json
import random
import re
import shutil
import zipfile
from pathlib import Path

import pytest

from transformer_lib import data
from transformer_lib.data import (
    DataError,
    check_language_code,
    load_parallel_text,
    out_of_step,
    parse_columns,
    read_aligned_files,
    read_tsv_pairs,
    split_heldout,
)
from transformer_lib.recipe import (
    RecipeError,
    as_recorded,
    parse_args,
    preset,
    recipe_from_dict,
)
from transformer_lib.train import main

# A made-up language and its English: word for word, the adjective after the noun.
NOUNS = {"chat": "cat", "chien": "dog", "oiseau": "bird", "poisson": "fish", "cheval": "horse",
         "enfant": "child", "homme": "man", "femme": "woman"}
ADJECTIVES = {"noir": "black", "blanc": "white", "petit": "small", "grand": "big",
              "rouge": "red", "vieux": "old"}
VERBS = {"mange": "eats", "voit": "sees", "aime": "likes", "suit": "follows"}


def corpus(n: int = 240, seed: int = 0) -> list[tuple[str, str]]:
    """`n` distinct (made-up French, English) pairs, then two more translations of the first
    source (a source with three translations, as Tatoeba has many)."""
    rng, pairs, seen = random.Random(seed), [], set()
    while len(pairs) < n:
        (n1, e1), (a1, b1), (v, w), (n2, e2) = (rng.choice(list(d.items())) for d in
                                                (NOUNS, ADJECTIVES, VERBS, NOUNS))
        src, tgt = f"le {n1} {a1} {v} le {n2}.", f"The {b1} {e1} {w} the {e2}."
        if src not in seen:
            seen.add(src)
            pairs.append((src, tgt))
    return pairs + [(pairs[0][0], pairs[0][1].replace("The", "A")),
                    (pairs[0][0], pairs[0][1].replace("the", "a"))]


def write_tsv(path: Path, pairs, extra: list[str] = ()) -> Path:
    """Tatoeba's layout: English, a tab, the other language, a tab, an attribution column."""
    lines = [f"{en}\t{fr}\tCC-BY 2.0 (France) #{i}" for i, (fr, en) in enumerate(pairs)]
    path.write_text("\n".join(lines + list(extra)) + "\n", encoding="utf-8")
    return path


def write_two_files(folder: Path, pairs) -> tuple[Path, Path]:
    folder.mkdir(parents=True, exist_ok=True)
    src, tgt = folder / "train.fr", folder / "train.en"
    src.write_text("".join(fr + "\n" for fr, _ in pairs), encoding="utf-8")
    tgt.write_text("".join(en + "\n" for _, en in pairs), encoding="utf-8")
    return src, tgt


# A run that trains in seconds on the CPU (as tests/test_train.py's TINY).
TINY = ["--preset", "cpu-tiny", "--vocab-size", "300", "--d-model", "32", "--n-heads", "2",
        "--n-layers", "1", "--d-ff", "64", "--batch-tokens", "400", "--warmup-steps", "5",
        "--time-budget-s", "0", "--epochs", "0", "--max-steps", "6", "--log-every", "1",
        "--checkpoint-every", "3", "--beam-size", "2", "--no-progress", "--heldout", "20"]
FR_EN = ["--src-lang", "fr", "--tgt-lang", "en"]


# --- reading --------------------------------------------------------------------------------------
def test_the_two_forms_read_the_same_pairs(tmp_path):
    pairs = corpus()
    tsv = read_tsv_pairs(write_tsv(tmp_path / "fra-eng.tsv", pairs), columns="2,1")
    two = read_aligned_files(*write_two_files(tmp_path / "two", pairs))
    assert tsv.pairs == two.pairs == pairs and tsv.too_long == two.too_long == []
    # columns as `cut -f` counts them: the default (1, 2) reads English as the source
    assert read_tsv_pairs(tmp_path / "fra-eng.tsv").pairs[0] == (pairs[0][1], pairs[0][0])


def test_line_ends_byte_order_mark_blank_lines_and_white_space(tmp_path):
    path = tmp_path / "p.tsv"
    path.write_bytes("\ufeffun chat \ta cat\r\n\r\n  \ndeux\t two\n".encode())
    assert read_tsv_pairs(path).pairs == [("un chat", "a cat"), ("deux", "two")]


def test_a_very_long_line_is_left_out_and_counted(tmp_path):
    pairs = corpus(30)
    long = ("le chat " * 80).strip()                                    # 639 characters
    text = read_tsv_pairs(write_tsv(tmp_path / "p.tsv", pairs, [f"a cat\t{long}"]), "2,1",
                          max_chars=500)
    assert text.pairs == pairs and text.too_long == [len(pairs) + 1]
    assert len(read_tsv_pairs(tmp_path / "p.tsv", "2,1", max_chars=0).pairs) == len(pairs) + 1


def test_a_gzipped_file_reads_as_its_text(tmp_path):
    import gzip
    plain = write_tsv(tmp_path / "p.tsv", corpus(20))
    with gzip.open(tmp_path / "p.tsv.gz", "wb") as f:
        f.write(plain.read_bytes())
    assert read_tsv_pairs(tmp_path / "p.tsv.gz", "2,1").pairs == read_tsv_pairs(plain, "2,1").pairs


# --- the held-out split ---------------------------------------------------------------------------
def test_heldout_split_is_seeded_disjoint_and_independent_of_the_files_order(tmp_path):
    pairs = corpus()
    a = split_heldout(pairs, {"test": 20, "val": 20}, seed=0)
    shuffled = pairs[:]
    random.Random(1).shuffle(shuffled)
    b = split_heldout(shuffled, {"test": 20, "val": 20}, seed=0)
    assert a["test"] == b["test"] and a["val"] == b["val"]           # the same pairs, same order
    assert sorted(a["train"]) == sorted(b["train"])
    assert split_heldout(pairs, {"test": 20, "val": 20}, seed=1)["test"] != a["test"]
    held = {src for split in ("val", "test") for src, _ in a[split]}
    assert len(held) == 40 and not held & {src for src, _ in a["train"]}
    assert len(a["train"]) + sum(src in held for src, _ in pairs) == len(pairs)


def test_every_pair_of_a_test_source_leaves_training(tmp_path):
    pairs = corpus()
    three = pairs[0][0]                                    # a source with three translations
    seed = next(s for s in range(200)
                if three in {src for src, _ in split_heldout(pairs, {"test": 20}, s)["test"]})
    splits, record = load_parallel_text(write_tsv(tmp_path / "p.tsv", pairs), columns="2,1",
                                        heldout=20, seed=seed)
    assert three in {src for src, _ in splits["test"]}
    assert three not in {src for src, _ in splits["train"]}
    assert record["removed_from_train"] == 2                  # its two other translations
    assert len(splits["train"]) == len(pairs) - 40 - 2 == record["train"]["pairs"]
    assert record["test"]["seed"] == seed and "SHA-256" in record["test"]["rule"]


def test_given_validation_and_test_files(tmp_path):
    pairs = corpus()
    train, val, test = pairs[:200], pairs[200:220], pairs[220:240]
    tsv = write_tsv(tmp_path / "train.tsv", train + test[:5])           # five test sources
    write_tsv(tmp_path / "val.tsv", val)
    src, tgt = write_two_files(tmp_path / "test", test)
    splits, record = load_parallel_text(tsv, columns="2,1", val=tmp_path / "val.tsv",
                                        test=f"{src},{tgt}")
    assert splits["val"] == val and splits["test"] == test
    assert splits["train"] == train                          # the five test pairs removed
    assert record["removed_from_train"] == 5 and record["test"]["from"] == f"{src} and {tgt}"


# --- bad input: a clear error naming the file and the line ----------------------------------------
def varied(n: int = 30) -> list[tuple[str, str]]:
    "Pairs whose lengths vary from line to line, as real sentences do."
    rng = random.Random(3)
    out = []
    for i in range(n):
        k = rng.randint(1, 12)
        out.append((" ".join(["mot"] * k) + f" {i}", " ".join(["word"] * k) + f" {i}"))
    return out


def test_line_counts_that_differ_name_both_counts_and_where_they_go_out_of_step(tmp_path):
    pairs = varied()
    src, tgt = write_two_files(tmp_path, pairs)
    tgt.write_text("".join(en + "\n" for i, (_, en) in enumerate(pairs) if i != 6))  # line 7 gone
    with pytest.raises(DataError) as e:
        read_aligned_files(src, tgt)
    message = str(e.value)
    assert f"{src} has 30 lines but {tgt} has 29" in message
    assert "first differ in character at line 7" in message and "lines 7 to 7" in message
    # the extra line at the end of the source: the lengths agree to the end of the target
    assert "likely the last 1 of s" in out_of_step([p[0] for p in pairs],
                                                   [p[1] for p in pairs[:-1]], "s", "t")
    assert out_of_step(["un", "deux"], [], "s", "t").endswith("t holds no line")


def test_a_split_line_is_found_where_it_was_split(tmp_path):
    pairs = varied(40)
    lines = [en for _, en in pairs]
    lines[20:21] = lines[20].split(" ", 1)                            # line 21 broken in two
    assert "first differ in character at line 21" in out_of_step(
        [fr for fr, _ in pairs], lines, "a.fr", "a.en")


@pytest.mark.parametrize("content, message", [
    (b"un\tone\ndeux\n", r"p.tsv, line 2 has 1 tab-separated column\(s\), but columns 2 \(source\) "
                         r"and 1 \(target\) are asked for: 'deux'"),
    (b"un\tone\n\tdeux\n", r"p.tsv, line 2: the target side \(column 1\) is empty"),
    (b"un\tone\ndeux\t \n", r"p.tsv, line 2: the source side \(column 2\) is empty"),
    (b"un\tone\ndeux\ttwo\ntrois\ttr\xe8s\n", r"p.tsv, line 3: not UTF-8 \(byte 0xE8 at byte 9"),
])
def test_bad_lines_of_a_tsv(tmp_path, content, message):
    (tmp_path / "p.tsv").write_bytes(content)
    with pytest.raises(DataError, match=message):
        read_tsv_pairs(tmp_path / "p.tsv", "2,1")


def test_bad_lines_of_two_files(tmp_path):
    src, tgt = write_two_files(tmp_path, [("un", "one"), ("deux", "two"), ("trois", "three")])
    tgt.write_text("one\n\nthree\n")
    with pytest.raises(DataError, match=rf"line 2: the target side \({re.escape(str(tgt))}\) is "
                                        "empty"):
        read_aligned_files(src, tgt)
    src.write_bytes(b"un\ndeux\n\xff\n")
    with pytest.raises(DataError, match=rf"{re.escape(str(src))}, line 3: not UTF-8"):
        read_aligned_files(src, tgt)
    with pytest.raises(DataError, match=rf"source file {re.escape(str(tmp_path / 'x'))} does not "
                                        "exist"):
        read_aligned_files(tmp_path / "x", tgt)


def test_too_few_pairs_for_the_split(tmp_path):
    tsv = write_tsv(tmp_path / "p.tsv", corpus(40))
    with pytest.raises(DataError, match="holds 42 pairs with 40 distinct sources: too few to hold "
                                        "out 20 test and 20 val pairs"):
        load_parallel_text(tsv, columns="2,1", heldout=20)
    splits, _ = load_parallel_text(tsv, columns="2,1", heldout=19)
    assert len({src for src, _ in splits["train"]}) == 2          # the two sources not held out


def test_language_codes_and_columns():
    for code in ("fr", "en", "zh-Hant", "pt-BR", "sr-Latn-RS", "es-419", "fra", "yue"):
        assert check_language_code(code) == code
    for code, hint in [("french", ""), ("xx", ""), ("FR", "did you mean 'fr'"),
                       ("pt_br", "did you mean 'pt-BR'"), ("", ""), ("f", "")]:
        with pytest.raises(ValueError, match="src_lang must be a language code such as 'fr'") as e:
            check_language_code(code, "src_lang")
        assert hint in str(e.value)
    assert parse_columns("2,1") == (2, 1) == parse_columns([2, 1])
    for bad in ("1", "0,1", "1,1", "a,b", "1,2,3"):
        with pytest.raises(ValueError, match="columns must name two different columns"):
            parse_columns(bad)


# --- the recipe -----------------------------------------------------------------------------------
def test_files_choose_the_dataset_and_need_their_languages():
    r, _ = parse_args(["--pairs", "x.tsv", "--columns", "2,1", *FR_EN])
    assert (r.dataset, r.src_lang, r.tgt_lang, r.columns) == ("files", "fr", "en", "2,1")
    assert parse_args(["--source", "a", "--target", "b", *FR_EN])[0].dataset == "files"
    assert (preset("cpu-30min").src_lang, preset("cpu-30min").tgt_lang) == ("de", "en")
    assert (preset("wmt14-base").src_lang, preset("wmt14-base").tgt_lang) == ("en", "de")
    assert recipe_from_dict({"dataset": "wmt14"}).src_lang == "en"
    assert as_recorded({"dataset": "wmt14"})["src_lang"] == "en"      # a record before the field
    assert as_recorded({})["src_lang"] == "de"
    for argv, message in [
        (["--pairs", "x.tsv"], "needs its two languages: src_lang and tgt_lang"),
        (["--pairs", "x", "--src-lang", "french", "--tgt-lang", "en"],
         "src_lang must be a language code"),
        (["--pairs", "x", "--src-lang", "fr", "--tgt-lang", "fr"], "are both 'fr'"),
        (["--source", "a", *FR_EN], "one of the two; got source='a'"),
        (["--pairs", "x", "--source", "a", "--target", "b", *FR_EN], "one of the two"),
        (["--pairs", "x", "--columns", "1", *FR_EN], "columns must name two different columns"),
        (["--src-lang", "fr"], "dataset 'multi30k' translates de→en, not fr→en"),
        (["--val", "v.tsv"], "val name\\(s\\) files of parallel text, which dataset 'multi30k'"),
        (["--heldout", "0"], "heldout must be >= 1"),
    ]:
        with pytest.raises(RecipeError, match=message):
            parse_args(argv)


# --- the command line, end to end -----------------------------------------------------------------
def test_cpu_tiny_trains_and_scores_fr_en_from_a_tsv(tmp_path):
    """A TSV with Tatoeba's columns (English first, a third column), validation held out of it, a
    test file given; a line over max_chars and a test pair past the positional table (MAX_LEN
    ids) are left out and counted; the record, the translations and translator.pt name the pair."""
    pairs = corpus()
    long = ("le chat " * 80).strip()
    tsv = write_tsv(tmp_path / "fra-eng.tsv", pairs[:200], [f"a cat\t{long}\tx"])
    test = write_tsv(tmp_path / "test.tsv", pairs[200:220] + [("A long one.", "語" * 100)])
    out = tmp_path / "run"
    assert main(TINY + FR_EN + ["--pairs", str(tsv), "--columns", "2,1", "--test", str(test),
                                "--max-chars", "500", "--out-dir", str(out)]) == 0
    rec = json.loads((out / "results.json").read_text())
    assert rec["task"] == f"fr→en, from {tsv}"
    assert (rec["recipe"]["dataset"], rec["recipe"]["src_lang"], rec["recipe"]["tgt_lang"]) == (
        "files", "fr", "en")
    d = rec["data"]
    assert d["train"]["too_long"] == 1 and d["train"]["too_long_lines"] == [201]
    assert d["val"]["pairs"] == 20 and d["val"]["from"] == f"held out of {tsv}"
    assert d["test"] == {"from": str(test), "pairs": 21, "too_long": 0}
    assert d["over_max_len_tokens"] == {"train": 0, "val": 0, "test": 1}
    assert d["train"]["pairs"] == 180 and d["removed_from_train"] == 0
    t = rec["test"]
    assert t["sentences"] == 20 and "tok:13a" in t["signature"] and 0 <= t["bleu_greedy"] <= 100
    assert rec["steps"] == 6
    shown = json.loads((out / "translations.json").read_text())
    assert len(shown) == 20 and set(shown[0]) == {"fr", "en", "greedy", "beam"}
    assert {(x["fr"], x["en"]) for x in shown} == set(pairs[200:220])
    _, _, info = data.load_translator(out / "translator.pt")
    assert (info["source_lang"], info["target_lang"]) == ("fr", "en")      # what the export reads


def test_two_files_train_resume_and_keep_their_files(tmp_path, capsys):
    """The two-file form, both splits held out; --resume continues it (the same files), and a
    resume with other files is refused, naming the field."""
    src, tgt = write_two_files(tmp_path / "text", corpus())
    flags = TINY + FR_EN + ["--source", str(src), "--target", str(tgt),
                            "--out-dir", str(tmp_path / "run")]
    assert main(flags + ["--max-steps", "3"]) == 0
    assert main(flags + ["--resume"]) == 0
    rec = json.loads((tmp_path / "run" / "results.json").read_text())
    assert rec["steps"] == 6 and rec["task"] == f"fr→en, from {src} and {tgt}"
    assert rec["data"]["test"]["pairs"] == rec["data"]["val"]["pairs"] == 20
    capsys.readouterr()
    other = shutil.copy(src, tmp_path / "other.fr")
    assert main(flags[:-6] + ["--source", str(other), "--target", str(tgt), "--out-dir",
                              str(tmp_path / "run"), "--max-steps", "9", "--resume"]) == 2
    assert f"source: '{src}' in the checkpoint, '{other}' now" in capsys.readouterr().err


@pytest.mark.parametrize("case", ["counts", "columns", "empty", "utf8", "too_few", "language",
                                  "missing"])
def test_bad_input_is_one_line_and_writes_nothing(tmp_path, capsys, case):
    pairs = varied()
    src, tgt = write_two_files(tmp_path / "text", pairs)
    tsv = tmp_path / "p.tsv"
    tsv.write_text("".join(f"{en}\t{fr}\n" for fr, en in pairs))
    files = ["--pairs", str(tsv), "--columns", "2,1"]
    langs = FR_EN
    if case == "counts":
        tgt.write_text("".join(en + "\n" for i, (_, en) in enumerate(pairs) if i != 6))
        files, message = ["--source", str(src), "--target", str(tgt)], "has 30 lines but"
    elif case == "columns":
        tsv.write_text(tsv.read_text() + "only one column\n")
        message = "line 31 has 1 tab-separated column"
    elif case == "empty":
        tsv.write_text(tsv.read_text() + "\tsans traduction\n")
        message = r"line 31: the target side \(column 1\) is empty"
    elif case == "utf8":
        tsv.write_bytes(tsv.read_bytes() + "ete\t\u00e9t\u00e9\n".encode("latin-1"))
        message = "line 31: not UTF-8"
    elif case == "too_few":
        message = "too few to hold out 20 test and 20 val pairs"
    elif case == "language":
        langs, message = ["--src-lang", "French", "--tgt-lang", "en"], "got 'French'"
    else:
        files, message = ["--pairs", str(tmp_path / "nope.tsv")], "does not exist"
    out = tmp_path / "run"
    assert main(TINY + langs + files + ["--out-dir", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and len(err.strip().splitlines()) == 1
    assert re.search(message, err), err
    assert not out.exists()


# --- Tatoeba: one use of the same reader ----------------------------------------------------------
@pytest.mark.needs_data("tatoeba_fra_eng")
def test_the_tatoeba_loader_is_the_tsv_reader(tmp_path):
    with zipfile.ZipFile(data.fetch("tatoeba_fra_eng/fra-eng.zip")) as z:
        z.extract("fra.txt", tmp_path)
    loaded = data.load_tatoeba_fra_eng()
    assert read_tsv_pairs(tmp_path / "fra.txt", max_chars=0).pairs == loaded
    assert len(loaded) == 142_787 and loaded[0] == ("Go.", "Va !")
    splits, record = load_parallel_text(tmp_path / "fra.txt", columns="2,1")
    assert splits["train"][0] == ("Va !", "Go.")                          # (French, English)
    assert len(splits["val"]) == len(splits["test"]) == 1000
    assert record["train"]["too_long"] == 0
    assert (record["train"]["pairs"] + record["removed_from_train"] + 2000 == len(loaded))
