"""Chapter 21: WMT 2014 English-German as the paper used it. A fixture in the archives' own formats
(written here: .tgz files with the members sacreBLEU and the corpora name, .sgm test sets) stands
for the 1.7 GB of downloads; the loaders, the token store and the paper's tokenized BLEU are
tested on it, and the manifest's checksums and member names against the installed sacreBLEU."""
import pytest
from wmt14_fixture import TESTS, TRAIN, write_fixture

from transformer_lib import data
from transformer_lib.data import MANIFEST, DataError, DataFile, sha256_of

wmt14 = pytest.importorskip("transformer_lib.wmt14")
pytest.importorskip("sacremoses")
pytest.importorskip("tokenizers")


def test_the_manifest_has_published_checksums_and_sacrebleus_members():
    from sacrebleu.dataset import DATASETS
    for sacre, split in (("wmt13", "newstest2013"), ("wmt14/full", "newstest2014")):
        part, ds = wmt14.TEST_PARTS[split], DATASETS[sacre]
        assert MANIFEST[part.archive].md5 == ds.md5[0] and MANIFEST[part.archive].url == ds.data[0]
        assert [m.split("/", 1)[1] for m in ds.langpairs["en-de"]] == [
            m.split("/", 1)[1] for m in (part.en, part.de)]
    for part in wmt14.TRAIN_PARTS.values():
        entry = MANIFEST[part.archive]
        assert len(entry.sha256) == 64 and entry.size > 10**7 and "statmt.org" in entry.url


def test_the_test_sets_are_read_as_sacrebleu_reads_them(tmp_path, monkeypatch):
    write_fixture(tmp_path, monkeypatch)
    assert wmt14.load_wmt14("newstest2013") == [
        ("A republican strategy", "Eine republikanische Strategie"),     # spaces collapsed
        ("Tom &amp; Jerry.", "Tom &amp; Jerry.")]                        # entities as written
    assert wmt14.load_wmt14("newstest2014")[1] == ("The man-made lake.", "Der künstliche See.")
    with pytest.raises(ValueError, match="iter_wmt14_train"):
        wmt14.load_wmt14("train")
    with pytest.raises(ValueError, match="split must be one of"):
        wmt14.load_wmt14("newstest2015")


def test_the_training_pairs_stream_in_corpus_order(tmp_path, monkeypatch):
    write_fixture(tmp_path, monkeypatch)
    got = list(wmt14.iter_wmt14_train())
    assert got == [(name, en, de) for name in TRAIN for en, de in TRAIN[name]]


def test_missing_corrupt_and_mismatched_files_are_named(tmp_path, monkeypatch):
    monkeypatch.setenv(data.ENV_VAR, str(tmp_path))
    with pytest.raises(DataError) as e:
        list(wmt14.iter_wmt14_train(download=False))
    msg = str(e.value)
    assert all(p.archive in msg and MANIFEST[p.archive].url in msg
               for p in wmt14.TRAIN_PARTS.values()), msg
    write_fixture(tmp_path, monkeypatch, broken="commoncrawl")
    with pytest.raises(DataError, match=r"differ in length \(they agree for 3 lines, then one has "
                                        r"1 more\)"):
        list(wmt14.iter_wmt14_train())
    (tmp_path / wmt14.TEST_PARTS["newstest2014"].archive).write_bytes(b"not a tgz")
    with pytest.raises(DataError, match="has SHA-256 .* expected"):
        wmt14.load_wmt14("newstest2014")


def test_the_test_archives_are_checked_by_md5(tmp_path, monkeypatch):
    write_fixture(tmp_path, monkeypatch)
    part = wmt14.TEST_PARTS["newstest2013"]
    path = tmp_path / part.archive
    monkeypatch.setitem(MANIFEST, part.archive, DataFile(part.archive, "", "u",
                                                         md5=sha256_of(path, "md5")))
    assert len(wmt14.load_wmt14("newstest2013")) == 2
    monkeypatch.setitem(MANIFEST, part.archive, DataFile(part.archive, "", "u", md5="0" * 32))
    with pytest.raises(DataError, match="has MD5 .* expected 0{32}"):
        wmt14.load_wmt14("newstest2013")


@pytest.fixture
def tokenizer():
    from transformer_lib.text import SubwordTokenizer
    texts = [s for pairs in (*TRAIN.values(), *TESTS.values()) for pair in pairs for s in pair]
    return SubwordTokenizer.train(texts * 3, vocab_size=400)


def test_the_store_holds_the_ids_the_tokenizer_gives(tmp_path, monkeypatch, tokenizer):
    write_fixture(tmp_path, monkeypatch)
    store = wmt14.build_wmt14_store(tokenizer, tmp_path / "store", chunk=2)
    kept = [(en, de) for pairs in TRAIN.values() for en, de in pairs if en and de]
    assert len(store) == len(kept) == 5
    for i, (en, de) in enumerate(kept):
        assert store[i] == (tokenizer.encode(en, add_eos=True),
                            tokenizer.encode(de, add_bos=True, add_eos=True))
    assert store[-1] == store[4]
    assert list(store.src_lengths) == [len(store[i][0]) for i in range(5)]
    assert store.meta["corpora"]["commoncrawl"] == {"kept": 2, "empty": 1, "too_long": 0}
    assert store.meta["dtype"] == "uint16"
    again = wmt14.TokenStore(tmp_path / "store", tokenizer=tokenizer)   # reopened from disk
    assert [again[i] for i in range(5)] == [store[i] for i in range(5)]
    with pytest.raises(IndexError):
        store[5]


def test_the_store_feeds_the_token_budget_batches(tmp_path, monkeypatch, tokenizer):
    from transformer_lib.training import BatchLoader, TokenBatchSampler
    write_fixture(tmp_path, monkeypatch)
    store = wmt14.build_wmt14_store(tokenizer, tmp_path / "store")
    lengths = [max(s, t) for s, t in zip(store.src_lengths.tolist(), store.tgt_lengths.tolist())]
    sampler = TokenBatchSampler(lengths, max_tokens=64, shuffle=False)
    batches = list(BatchLoader(store, sampler, pad_id=tokenizer.pad_id))
    assert sum(b.src.shape[0] for b in batches) == len(store)


def test_a_long_pair_is_left_out_and_counted(tmp_path, monkeypatch, tokenizer):
    pairs = [("c", "Two dogs.", "Zwei Hunde."), ("c", "dogs " * 40, "Hunde " * 40)]
    store = wmt14.build_wmt14_store(tokenizer, tmp_path / "s", pairs=pairs, max_len=20)
    assert len(store) == 1 and store.meta["corpora"]["c"]["too_long"] == 1


def test_an_unfinished_or_foreign_store_is_refused(tmp_path, tokenizer):
    with pytest.raises(DataError, match="no meta.json"):
        wmt14.TokenStore(tmp_path)
    store = wmt14.build_wmt14_store(tokenizer, tmp_path / "s", pairs=[("c", "a dog", "ein Hund")])
    other = type(tokenizer).train(["völlig andere Wörter"] * 5, vocab_size=300)
    with pytest.raises(DataError, match="another tokenizer"):
        wmt14.TokenStore(store.path, tokenizer=other)


def test_compounds_split_in_one_pass_as_the_perl_line_does():
    assert wmt14.split_compounds("Die Sieben-Tage-Woche") == \
        "Die Sieben ##AT##-##AT## Tage ##AT##-##AT## Woche"
    assert wmt14.split_compounds("a-b-c - x") == "a ##AT##-##AT## b-c - x"   # perl's s///g too


def test_tokenized_bleu_is_multi_bleu_on_moses_tokens():
    ref = ["Die Sieben-Tage-Woche beginnt.", "Ein Hund läuft."]
    assert wmt14.tokenized_bleu(ref, ref).score == pytest.approx(100.0)
    hyp = ["Die Sieben-Tage-Woche endet.", "Ein Hund läuft."]
    score, signature = wmt14.tokenized_bleu(hyp, ref)
    # by hand. Moses splits off the full stops, the compound becomes five tokens:
    # hyp 1: Die Sieben ##AT##-##AT## Tage ##AT##-##AT## Woche endet .   (8 tokens; ref 1 the
    # same with "beginnt"); hyp 2 = ref 2: Ein Hund läuft .   (4 tokens). Matched n-grams of
    # sentence 1 are those not touching "endet"; sentence 2 matches all of its own.
    import math
    matches = [(7 + 4, 8 + 4), (5 + 3, 7 + 3), (4 + 2, 6 + 2), (3 + 1, 5 + 1)]  # (matched, all)
    by_hand = 100 * math.exp(sum(math.log(m / t) for m, t in matches) / 4)
    assert score == pytest.approx(by_hand) and signature.startswith("tok:moses-de+compound-split|")
    assert "tok:none" in signature and "smooth:none" in signature
    with pytest.raises(ValueError, match="2 hypotheses but 1 references"):
        wmt14.tokenized_bleu(hyp, ref[:1])


def test_a_missing_extra_is_named(monkeypatch):
    monkeypatch.setitem(__import__("sys").modules, "sacremoses", None)
    with pytest.raises(ModuleNotFoundError, match=r'pip install "transformer-lib\[wmt\]"'):
        wmt14.tokenized_bleu(["a"], ["a"])
