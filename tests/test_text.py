"""Chapter 17: BPE (derivation == Hugging Face tokenizers), the production tokenizer, BLEU
(derivation == sacreBLEU)."""
import json
import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from transformer_lib.text import (
    BOS_ID,
    EOS_ID,
    PAD_ID,
    UNK_ID,
    WORD_START,
    SubwordTokenizer,
    apply_bpe,
    bleu_from_tokens,
    corpus_bleu,
    learn_bpe,
    pretokenize,
    round_trip_rate,
    train_joint_tokenizer,
)

words = st.text(alphabet="abcde", min_size=1, max_size=6)
sentences = st.lists(words, min_size=1, max_size=6).map(" ".join)


def hf_bpe(texts, num_merges):
    """Hugging Face's BPE trainer with the same pre-tokenization as SubwordTokenizer."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.normalizer = normalizers.Sequence([normalizers.Prepend(WORD_START),
                                           normalizers.Replace(" ", WORD_START)])
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement=WORD_START, prepend_scheme="never",
                                                 split=True)
    alphabet = {ch for t in texts for w in pretokenize(t) for ch in w}
    tok.train_from_iterator(texts, trainers.BpeTrainer(vocab_size=len(alphabet) + num_merges,
                                                       show_progress=False))
    return tok, [tuple(m) for m in json.loads(tok.to_str())["model"]["merges"]]


@settings(max_examples=25, deadline=None)
@given(text=st.text(alphabet="ab c", max_size=20))
def test_pretokenize_keeps_every_character(text):
    ws = pretokenize(text)
    assert "".join(ws) == WORD_START + text.replace(" ", WORD_START)
    assert all(w.startswith(WORD_START) and WORD_START not in w[1:] for w in ws)


@settings(max_examples=25, deadline=None)
@given(texts=st.lists(sentences, min_size=1, max_size=8), num_merges=st.integers(1, 15))
def test_learn_bpe_equals_huggingface(texts, num_merges):
    """Same merges, ties included, and the same segmentation of every word."""
    ours = learn_bpe(texts, num_merges)
    tok, theirs = hf_bpe(texts, num_merges)
    assert ours == theirs
    for w in {w for t in texts for w in pretokenize(t)}:
        assert apply_bpe(w, ours) == tok.encode(w[1:]).tokens


def test_learn_bpe_worked_example():
    """Count the first merge by hand: 'a'+'l' occurs in walks x2, walk x2, talks, talked."""
    toy = ["the man walks", "the men walk", "a woman walks", "women walk", "the man talks",
           "a man talked"]
    merges = learn_bpe(toy, 3)
    assert merges == [("a", "l"), (WORD_START, "w"), ("al", "k")]
    assert apply_bpe(WORD_START + "walked", merges) == [WORD_START + "w", "alk", "e", "d"]
    assert learn_bpe(["ab"], 10) == [("a", "b"), (WORD_START, "ab")]  # tie: "a" < "▁"; stops at
                                                                      # whole words


@pytest.fixture(scope="module")
def small_tok():
    from transformer_lib.data import load_multi30k

    return train_joint_tokenizer(load_multi30k("train")[:2000], vocab_size=1200)


@pytest.mark.needs_data
def test_special_ids_and_vocab_size(small_tok):
    assert (PAD_ID, BOS_ID, EOS_ID, UNK_ID) == (0, 1, 2, 3)
    for i, t in enumerate(["<pad>", "<bos>", "<eos>", "<unk>"]):
        assert small_tok.id_to_token(i) == t
    assert small_tok.vocab_size <= 1200
    assert small_tok.tokenizer.token_to_id("<0xFF>") is not None


@pytest.mark.needs_data
@settings(max_examples=50, deadline=None)
@given(text=st.text(st.characters(blacklist_characters=WORD_START, blacklist_categories=("Cs",)),
                    max_size=40))
def test_round_trip_any_text(small_tok, text):
    """Byte fallback: any string without '▁' comes back unchanged, and never becomes <unk>."""
    ids = small_tok.encode(text)
    assert UNK_ID not in ids
    assert small_tok.decode(ids) == text


@pytest.mark.needs_data
def test_special_strings_in_text_are_not_special(small_tok):
    ids = small_tok.encode("<pad> <eos> <0x41>")
    assert not {PAD_ID, BOS_ID, EOS_ID, UNK_ID} & set(ids)
    assert small_tok.decode(ids) == "<pad> <eos> <0x41>"


@pytest.mark.needs_data
def test_bos_eos_and_decoding_model_output(small_tok):
    ids = small_tok.encode("Ein Mann.", add_bos=True, add_eos=True)
    assert ids[0] == BOS_ID and ids[-1] == EOS_ID and ids[1:-1] == small_tok.encode("Ein Mann.")
    # (B, T) as decoders give
    out = torch.tensor([ids + [PAD_ID] * 3, ids[:-1] + [EOS_ID, 5, 6, PAD_ID]])
    assert small_tok.decode_batch(out) == ["Ein Mann.", "Ein Mann."]
    assert small_tok.decode(torch.tensor(ids)) == "Ein Mann."
    with pytest.raises(ValueError, match="one sequence"):
        small_tok.decode([[1, 2]])
    with pytest.raises(TypeError, match="text must be a str"):
        small_tok.encode(["Ein Mann."])


@pytest.mark.needs_data
def test_save_load(small_tok, tmp_path):
    path = small_tok.save(tmp_path / "ckpt" / "tokenizer.json")
    again = SubwordTokenizer.load(path)
    texts = ["Zwei Hunde spielen im Schnee.", "A girl in a red coat 🎈."]
    assert again.encode_batch(texts) == small_tok.encode_batch(texts)
    with pytest.raises(FileNotFoundError, match="does not exist"):
        SubwordTokenizer.load(tmp_path / "nope.json")
    bad = tmp_path / "bad.json"
    bad.write_text(path.read_text()[:1000])
    with pytest.raises(ValueError, match="not a valid tokenizers JSON"):
        SubwordTokenizer.load(bad)


def test_train_argument_errors():
    with pytest.raises(ValueError, match="vocab_size must be an int >= 263 for these texts"):
        SubwordTokenizer.train(["ab ab"], vocab_size=100)
    with pytest.raises(ValueError, match="non-empty"):
        SubwordTokenizer.train([], vocab_size=1000)


def test_wrong_special_ids_rejected():
    from tokenizers import Tokenizer, models

    tok = Tokenizer(models.BPE(vocab={"a": 0, "<pad>": 1, "<bos>": 2, "<eos>": 3, "<unk>": 4},
                               merges=[]))
    with pytest.raises(ValueError, match="<pad> at id 0"):
        SubwordTokenizer(tok)


@pytest.mark.needs_data
def test_full_multi30k_round_trip():
    """The chapter's claim: a joint 8000-id BPE on the training split round-trips every val/test
    sentence."""
    from transformer_lib.data import load_multi30k

    tok = train_joint_tokenizer(load_multi30k("train"), vocab_size=8000)
    assert tok.vocab_size == 8000
    for split in ("val", "test_2016_flickr"):
        pairs = load_multi30k(split)
        assert round_trip_rate(tok, [s for p in pairs for s in p]) == 1.0


# --- BLEU -----------------------------------------------------------------------------------------
tokens = st.lists(st.sampled_from(["a", "b", "c", "dog", "cat"]), min_size=0, max_size=12)


@settings(max_examples=40, deadline=None)
@given(pairs=st.lists(st.tuples(tokens, tokens), min_size=1, max_size=6))
def test_bleu_from_tokens_equals_sacrebleu(pairs):
    """Our eq. bleu-precision / eq. bleu (with exp smoothing) equals sacreBLEU's corpus BLEU."""
    hyps, refs = [h for h, _ in pairs], [r for _, r in pairs]
    ours = bleu_from_tokens(hyps, refs)
    theirs = corpus_bleu([" ".join(h) for h in hyps], [" ".join(r) for r in refs]).score
    assert math.isclose(ours, theirs, rel_tol=1e-9, abs_tol=1e-9)


def test_bleu_by_hand():
    """Clipping and the brevity penalty, computed by hand."""
    assert bleu_from_tokens([["the"] * 4], [["the", "cat"]]) == pytest.approx(100 * math.exp(
        (math.log(1 / 4) + math.log(1 / (2 * 3)) + math.log(1 / (4 * 2)) + math.log(1 / (8 * 1)))
        / 4))
    ref = "a b c d e f g h".split()
    # half-length hypothesis that is an exact prefix: all precisions 1, BP = exp(1 - 8/4)
    assert bleu_from_tokens([ref[:4]], [ref]) == pytest.approx(100 * math.exp(-1.0))
    assert bleu_from_tokens([ref], [ref]) == pytest.approx(100.0)


def test_bleu_from_tokens_and_round_trip_rate_errors():
    with pytest.raises(ValueError, match="got 2 hypotheses but 1 references"):
        bleu_from_tokens([["a"], ["b"]], [["a"]])
    assert bleu_from_tokens([[]], [["a", "b"]]) == 0.0           # an empty corpus scores 0, not NaN
    with pytest.raises(ValueError, match="texts must not be empty"):
        round_trip_rate(None, [])


def test_corpus_bleu_signature_and_errors():
    score, sig = corpus_bleu(["A man rides a bike."], ["A man rides a bike."])
    assert score == pytest.approx(100.0)
    assert "tok:13a" in sig and "case:mixed" in sig and "nrefs:1" in sig
    # cased: changing case lowers the score
    assert corpus_bleu(["a man rides a bike."], ["A man rides a bike."]).score < 100.0
    with pytest.raises(ValueError, match="2 hypotheses but 1 references"):
        corpus_bleu(["a", "b"], ["a"])
    with pytest.raises(TypeError, match="hypotheses must be a sequence of str"):
        corpus_bleu("a man", ["a man"])
    with pytest.raises(ValueError, match="must not be empty"):
        corpus_bleu([], [])


def test_corpus_bleu_reads_its_setting_from_one_place(monkeypatch):
    # benchmarks that need sacreBLEU's lengths (parity.py) score with SACREBLEU_SETTINGS too
    import sacrebleu

    from transformer_lib import text
    hyp, ref = ["a man rides a bike."], ["A man rides a bike."]
    assert corpus_bleu(hyp, ref).score == sacrebleu.BLEU(**text.SACREBLEU_SETTINGS).corpus_score(
        hyp, [ref]).score < 100.0
    monkeypatch.setitem(text.SACREBLEU_SETTINGS, "lowercase", True)
    assert corpus_bleu(hyp, ref).score == pytest.approx(100.0)


# --- the tokenizer's edges (issue 25) -------------------------------------------------------------
@pytest.fixture(scope="module")
def tiny_tok():
    """A tokenizer trained on three sentences: no data needed."""
    return SubwordTokenizer.train(["a man walks", "a dog runs", "the man runs"] * 3, vocab_size=300)


@pytest.mark.parametrize("bad", [-1, 300, 10**6])
def test_decode_refuses_ids_outside_the_vocabulary(tiny_tok, bad):
    """An id the tokenizer does not have is an error naming it and its position, never a silent
    token or an OverflowError from the Rust side."""
    V = tiny_tok.vocab_size
    bad = V if bad == 300 else bad
    with pytest.raises(ValueError, match=rf"ids holds {bad} at position 1, outside this "
                                         rf"tokenizer's ids 0\.\.{V - 1}"):
        tiny_tok.decode([BOS_ID, bad, EOS_ID])
    with pytest.raises(ValueError, match=rf"ids holds {bad} at position 1"):
        tiny_tok.decode_batch(torch.tensor([[BOS_ID, 5, EOS_ID], [BOS_ID, bad, EOS_ID]]))
    with pytest.raises(ValueError, match=rf"id must be one of this tokenizer's ids 0\.\.{V - 1}, "
                                         rf"got {bad}"):
        tiny_tok.id_to_token(bad)
    assert tiny_tok.decode([BOS_ID, 5, EOS_ID]) == tiny_tok.decode([5])   # valid ids: as before


def test_train_refuses_one_string():
    """One str is not a list of sentences: training on its characters would lose every word."""
    with pytest.raises(TypeError, match=r"texts must be a sequence of sentences \(str\), got one "
                                        r"str 'a man walks'; pass \['a man walks'\]"):
        SubwordTokenizer.train("a man walks", vocab_size=300)
    with pytest.raises(TypeError, match=r"texts\[1\] must be a str, got int 7"):
        SubwordTokenizer.train(["a man", 7], vocab_size=300)
    with pytest.raises(TypeError, match=r"pairs must be a sequence of \(source, target\) pairs, "
                                        "got one str"):
        train_joint_tokenizer("ein Mann", vocab_size=300)
    with pytest.raises(TypeError, match=r"pairs\[0\] must be a \(source, target\) pair of str, "
                                        "got 'ein Mann'"):
        train_joint_tokenizer(["ein Mann", "a man"], vocab_size=300)


def test_lone_surrogate_is_a_clear_error(tiny_tok):
    """A lone surrogate is no character and has no UTF-8 bytes: name the text, where it is and what
    to do, instead of tokenizers' 'TextInputSequence must be str'."""
    with pytest.raises(ValueError, match=r"text holds a lone surrogate U\+D800 at index 1, .*"
                                         r"errors='replace'"):
        tiny_tok.encode("a\ud800b")
    with pytest.raises(ValueError, match=r"texts\[1\] holds a lone surrogate U\+DC80 at index 2"):
        tiny_tok.encode_batch(["a man", "a \udc80"])
    with pytest.raises(ValueError, match=r"texts\[1\] holds a lone surrogate U\+DFFF at index 0"):
        SubwordTokenizer.train(["a man", "\udfff"], vocab_size=300)
    assert tiny_tok.decode(tiny_tok.encode("a 🎸 b")) == "a 🎸 b"      # a surrogate *pair* is fine


def test_save_onto_a_directory_or_under_a_file(tiny_tok, tmp_path):
    """save names the path and what to do, and writes nothing."""
    with pytest.raises(IsADirectoryError, match=rf"path {tmp_path} is a directory; give a file "
                                                rf"name such as {tmp_path / 'tokenizer.json'}"):
        tiny_tok.save(tmp_path)
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(IsADirectoryError, match=rf"tokenizer file {tmp_path} is a directory"):
        SubwordTokenizer.load(tmp_path)
    blocker = tmp_path / "run"
    blocker.write_text("not a folder")
    with pytest.raises(NotADirectoryError, match=rf"cannot save to {blocker / 'sub'}"
                                                 rf"/tokenizer\.json: {blocker} is a file"):
        tiny_tok.save(blocker / "sub" / "tokenizer.json")
    assert blocker.read_text() == "not a folder" and list(tmp_path.iterdir()) == [blocker]
    path = tiny_tok.save(tmp_path / "a" / "b" / "tokenizer.json")   # works, folders made
    assert SubwordTokenizer.load(path).encode("a man") == tiny_tok.encode("a man")
    assert [p.name for p in path.parent.iterdir()] == ["tokenizer.json"]    # no temporary file left


def test_word_start_mark_in_the_text_is_the_stated_exception(tiny_tok):
    """`▁` in the input reads back as a space: the one exception to decode(encode(s)) == s, and the
    docstring that promises the round trip says so."""
    assert tiny_tok.decode(tiny_tok.encode(f"a{WORD_START}b")) == "a b"
    for doc in (SubwordTokenizer.__doc__, round_trip_rate.__doc__):
        assert "decode(encode(s)) == s" in doc or "decode(tokenizer.encode(s)) == s" in doc
        assert f"`{WORD_START}` (U+2581) in s reads back as a space" in " ".join(doc.split())


def test_encode_batch_of_a_generator_encodes_every_text(tiny_tok):
    """The type check must not use up a generator: it gave [] without a word."""
    texts = ["a man", "walks"]
    assert tiny_tok.encode_batch(t for t in texts) == tiny_tok.encode_batch(texts) == [
        tiny_tok.encode(t) for t in texts]


def test_training_from_a_stream_equals_training_from_the_list():
    """An iterator (sentences read from files, as chapter 21 reads WMT's) is read once, checked as
    the trainer reads it: the vocabulary of the list, and the list's errors."""
    texts = ["a man walks", "a dog runs", "the man runs", "ein Hund läuft"] * 3
    listed = SubwordTokenizer.train(texts, vocab_size=300, min_frequency=1)
    streamed = SubwordTokenizer.train(iter(texts), vocab_size=300, min_frequency=1)
    assert streamed.tokenizer.to_str() == listed.tokenizer.to_str()
    with pytest.raises(TypeError, match=r"texts\[2\] must be a str, got int"):
        SubwordTokenizer.train(iter(["a b", "c", 3]), vocab_size=300)
    with pytest.raises(ValueError, match="non-empty"):
        SubwordTokenizer.train(iter([]), vocab_size=300)
    with pytest.raises(ValueError, match=r"vocab_size must be an int >= 261"):
        SubwordTokenizer.train(iter(texts), vocab_size=100)
    with pytest.raises(ValueError, match=r">= 280 .* 20 distinct characters"):
        SubwordTokenizer.train(iter(texts), vocab_size=262)

    def failing():
        yield "a b"
        raise OSError("the archive went away")
    with pytest.raises(OSError, match="went away"):
        SubwordTokenizer.train(failing(), vocab_size=300)
