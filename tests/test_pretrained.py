"""Appendix A2, "A trained translator": save_translator / load_translator and the shipped file."""
import hashlib
import re
import subprocess
from pathlib import Path

import pytest
import torch

from transformer_lib import Transformer, TransformerConfig
from transformer_lib.data import (
    MANIFEST,
    TRANSLATOR_NAME,
    load_translator,
    save_translator,
    sha256_of,
)
from transformer_lib.text import SubwordTokenizer

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def tiny():
    texts = ["ein Hund läuft", "a dog runs", "zwei Männer", "two men", "eine Frau singt",
             "a woman sings"] * 5
    tok = SubwordTokenizer.train(texts, vocab_size=300)
    torch.manual_seed(0)
    model = Transformer(TransformerConfig.base(tok.vocab_size, d_model=16, n_heads=2, n_layers=1,
                                               d_ff=32))
    return model.eval(), tok


def test_round_trip_keeps_ties_tokenizer_and_info(tiny, tmp_path):
    model, tok = tiny
    path = save_translator(tmp_path / "sub" / "t.pt", model, tok,
                           info={"bleu": 1.5, "device": "CPU"})
    assert not list(tmp_path.glob("sub/*.tmp"))
    loaded, loaded_tok, info = load_translator(path)
    assert info == {"bleu": 1.5, "device": "CPU"} and not loaded.training
    assert loaded.src_embed.weight is loaded.tgt_embed.weight is loaded.output_projection.weight
    src, tgt = torch.randint(4, 300, (2, 5)), torch.randint(4, 300, (2, 4))
    assert (model(src, tgt) - loaded(src, tgt)).abs().max() < 1e-2           # float16 storage
    assert loaded_tok.encode("ein Hund") == tok.encode("ein Hund")
    full = save_translator(tmp_path / "f32.pt", model, tok, dtype=torch.float32)
    assert torch.equal(model(src, tgt), load_translator(full)[0](src, tgt))    # exact in float32


def test_the_shared_matrix_is_stored_once(tiny, tmp_path):
    model, tok = tiny
    blob = torch.load(save_translator(tmp_path / "t.pt", model, tok), weights_only=True)
    names = set(blob["weights"]) | set(blob["aliases"])
    assert names == set(model.state_dict())
    assert set(blob["aliases"]) == {"tgt_embed.weight", "output_projection.weight"}


@pytest.mark.parametrize("info, message", [({"path": Path("x")}, "info values"),
                                           ({"n": torch.tensor(1)}, "info values")])
def test_info_that_could_not_be_loaded_is_refused_at_save_time(tiny, tmp_path, info, message):
    model, tok = tiny
    with pytest.raises(TypeError, match=message):
        save_translator(tmp_path / "t.pt", model, tok, info=info)
    assert not (tmp_path / "t.pt").exists()


def test_bad_files_are_clear_errors(tiny, tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_translator(tmp_path / "missing.pt")
    junk = tmp_path / "junk.pt"
    junk.write_bytes(b"not a torch file")
    with pytest.raises(ValueError, match="not a translator file"):
        load_translator(junk)
    other = tmp_path / "other.pt"
    torch.save({"format": 99}, other)
    with pytest.raises(ValueError, match="format 1"):
        load_translator(other)
    with pytest.raises(TypeError, match="transformer_lib Transformer"):
        save_translator(tmp_path / "x.pt", torch.nn.Linear(2, 2), tiny[1])


def _translator_commit() -> str:
    url = re.search(r"url:\s*(\S+)",
                    (REPO / "book" / "_config.yml").read_text().split("repository:")[1]).group(1)
    owner_repo = url.rstrip("/").split("github.com/")[1]
    m = re.fullmatch(rf"https://raw\.githubusercontent\.com/{owner_repo}/([0-9a-f]{{40}})/"
                     rf"{TRANSLATOR_NAME}", MANIFEST[TRANSLATOR_NAME].url)
    assert m, f"not the book's repository at a commit: {MANIFEST[TRANSLATOR_NAME].url}"
    return m[1]


def test_every_download_address_is_pinned_to_a_commit():
    """A branch moves on and the file it serves changes (its checksum then fails); a commit does
    not. Every address of the manifest names a commit, the translator's in the book's
    repository, except WMT 2014's: statmt.org names those archives by year and version, and
    their checksums are the ones other projects published (data.MANIFEST cites them)."""
    unpinned = [e.url for e in MANIFEST.values() if not re.search(r"/[0-9a-f]{40}/", e.url)]
    assert unpinned == [e.url for e in MANIFEST.values() if e.path.startswith("wmt14/")]
    assert all(re.match(r"https?://(www\.)?statmt\.org/wmt1[34]/", u) for u in unpinned)
    _translator_commit()


def test_the_pinned_commit_holds_the_translator_of_the_manifest():
    commit = _translator_commit()
    git = subprocess.run(["git", "-C", str(REPO), "cat-file", "blob",
                          f"{commit}:{TRANSLATOR_NAME}"], capture_output=True)
    if git.returncode:
        pytest.skip(f"commit {commit} is not in this clone (a shallow one?)")
    assert hashlib.sha256(git.stdout).hexdigest() == MANIFEST[TRANSLATOR_NAME].sha256


def test_the_shipped_translator_matches_its_checksum_and_loads():
    path = REPO / TRANSLATOR_NAME
    assert path.is_file(), "the book's translator is committed to the repository"
    assert path.stat().st_size <= 20e6
    assert sha256_of(path) == MANIFEST[TRANSLATOR_NAME].sha256
    model, tok, info = load_translator()                                 # finds the checkout's copy
    assert model.config.norm_first and tok.vocab_size == model.config.tgt_vocab_size
    assert Path(info["record"]).name == "multi30k-cpu-30min.json" and info["preset"] == "cpu-30min"


@pytest.mark.slow
def test_beam_search_on_the_translator_needs_no_cache_and_no_batch():
    """On the trained translator (where beams finish at different steps and EOS competes), beam
    search finds the same translation with the KV cache and without it (every step re-reads the
    prefix, as nn.Transformer's decoding does), and in a padded batch as sentence by sentence."""
    from transformer_lib.data import load_multi30k
    from transformer_lib.decoding import beam_search
    from transformer_lib.training import pad_sequences
    model, tok, _ = load_translator()
    ids = tok.encode_batch([de for de, _ in load_multi30k("val")[:24]], add_eos=True)
    kw = dict(beam_size=4, alpha=1.2, bos_id=tok.bos_id, eos_id=tok.eos_id, return_scores=True)
    src = pad_sequences(ids, tok.pad_id)
    max_len = src.shape[1] + 50
    cached, cached_scores = beam_search(model, src, max_len=max_len, **kw)
    uncached, uncached_scores = beam_search(model, src, max_len=max_len, use_cache=False, **kw)
    assert tok.decode_batch(cached) == tok.decode_batch(uncached)
    torch.testing.assert_close(cached_scores, uncached_scores, atol=1e-4, rtol=1e-4)
    alone = [tok.decode_batch(beam_search(model, torch.tensor([s]), max_len=max_len, **kw)[0])[0]
             for s in ids]
    assert alone == tok.decode_batch(cached)
    assert len(set(alone)) == len(alone)                  # 24 different sentences, translated
