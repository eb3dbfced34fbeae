"""The whole model on one page (notebooks/12b_whole_model.ipynb, exported as
transformer_lib.whole_model) computes the same function as transformer_lib.Transformer: given the
same weights, the same logits, loss and greedy translations; dropout in the same places; and a page
with a wrong formula fails these comparisons."""
import copy

import pytest
import torch
import torch.nn.functional as F

import transformer_lib as tl
from transformer_lib import whole_model
from transformer_lib.decoding import greedy_decode
from transformer_lib.optimization import LabelSmoothingLoss

BOS, EOS, PAD = 1, 2, 0


def random_model(norm_first: bool, dropout: float = 0.1) -> tl.Transformer:
    """A small Transformer in float64 with random weights; LayerNorm gains and all biases moved
    away from 1 and 0, so that a LayerNorm or a bias the page skipped or swapped would show."""
    torch.manual_seed(0)
    cfg = tl.TransformerConfig.base(61, d_model=32, n_heads=4, n_layers=2, d_ff=64, max_len=64,
                                    norm_first=norm_first, dropout=dropout)
    model = tl.Transformer(cfg).double().eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name or name.endswith("bias"):
                p.add_(0.1 * torch.randn_like(p))
    return model


def batch():
    """A padded source (B, L_s) and a padded target (B, L_t) of token ids 3..60."""
    g = torch.Generator().manual_seed(1)
    src = torch.randint(3, 61, (4, 9), generator=g)
    src[1, 6:] = PAD
    src[2, 3:] = PAD
    tgt = torch.randint(3, 61, (4, 7), generator=g)
    tgt[:, 0] = BOS
    tgt[2, 4:] = PAD
    return src, tgt


WIRINGS = pytest.mark.parametrize("norm_first", [False, True], ids=["post-LN", "pre-LN"])


@WIRINGS
def test_random_models_give_the_same_logits(norm_first):
    model = random_model(norm_first)
    page = whole_model.from_package(model)
    src, tgt = batch()
    with torch.no_grad():
        torch.testing.assert_close(page(src, tgt), model(src, tgt), rtol=1e-12, atol=1e-12)
    assert not page.training and page.embed.weight.dtype == torch.float64
    assert tl.count_parameters(page) == tl.count_parameters(model)


@WIRINGS
def test_random_models_give_the_same_greedy_tokens(norm_first):
    model = random_model(norm_first)
    src, _ = batch()
    ours = whole_model.greedy_decode(whole_model.from_package(model), src, 12, BOS, EOS)
    assert torch.equal(ours, greedy_decode(model, src, 12, BOS, EOS))
    assert torch.equal(ours, greedy_decode(model, src, 12, BOS, EOS, use_cache=False))


@WIRINGS
def test_dropout_is_where_the_package_puts_it(norm_first):
    """In training mode, with the same seed, both draw the same dropout masks in the same order:
    the same outputs."""
    model = random_model(norm_first, dropout=0.3)
    page = whole_model.from_package(model)
    model.train()
    page.train()
    src, tgt = batch()
    torch.manual_seed(5)
    theirs = model(src, tgt)
    torch.manual_seed(5)
    ours = page(src, tgt)
    torch.testing.assert_close(ours, theirs, rtol=1e-12, atol=1e-12)
    torch.manual_seed(6)
    assert (page(src, tgt) - theirs).abs().max() > 1e-3            # dropout does act


def test_the_loss_is_the_packages_and_pytorchs():
    torch.manual_seed(0)
    logits = torch.randn(3, 5, 11, dtype=torch.float64)
    target = torch.randint(1, 11, (3, 5))
    target[1, 3:] = PAD
    ours = whole_model.label_smoothed_loss(logits, target, eps=0.1, pad_id=PAD)
    torch.testing.assert_close(ours, LabelSmoothingLoss(11, 0.1, PAD)(logits, target))
    torch.testing.assert_close(ours, F.cross_entropy(logits.transpose(1, 2), target,
                                                     label_smoothing=0.1, ignore_index=PAD))


def test_the_positions_are_the_packages():
    torch.testing.assert_close(whole_model.sinusoids(50, 16), tl.sinusoidal_encoding(50, 16),
                               rtol=0, atol=0)


@pytest.mark.parametrize("change, field", [
    (dict(share_embeddings=False, tgt_vocab_size=61), "share_embeddings"),
    (dict(tie_output=False), "tie_output"),
    (dict(positional="learned"), "positional"),
    (dict(eps=1e-6), "eps"),
])
def test_configs_the_page_does_not_cover_are_refused(change, field):
    cfg = tl.TransformerConfig.base(61, d_model=16, n_heads=2, n_layers=1, d_ff=32, **change)
    with pytest.raises(ValueError, match=rf"one-page model needs .*model\.config has \{{'{field}'"):
        whole_model.from_package(tl.Transformer(cfg))


# --- a wrong page fails ---------------------------------------------------------------------------

def attention_scaled_by_d_k(q, k, v, mask=None):
    scores = q @ k.transpose(-2, -1) / q.size(-1)                    # d_k instead of sqrt(d_k)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    return scores.softmax(dim=-1) @ v


def embed_without_sqrt_d_model(self, tokens):
    return self.dropout(self.embed(tokens) + self.pe[:tokens.size(1)])


_attention = whole_model.attention


def attention_ignoring_masks(q, k, v, mask=None):
    return _attention(q, k, v)


def residual_post_ln(self, x, sublayer):
    return self.norm(x + self.dropout(sublayer(x)))


WRONG = {"scale 1/d_k": ("attention", attention_scaled_by_d_k),
         "no sqrt(d_model)": ("Transformer.embed_and_add_positions", embed_without_sqrt_d_model),
         "masks ignored": ("attention", attention_ignoring_masks),
         "post-LN always": ("Residual.forward", residual_post_ln)}


@pytest.mark.parametrize("wrong", WRONG)
def test_a_wrong_page_fails_the_comparison(wrong, monkeypatch):
    model = random_model(norm_first=True)
    page = whole_model.from_package(model)
    target, replacement = WRONG[wrong]
    owner, _, name = target.rpartition(".")
    monkeypatch.setattr(getattr(whole_model, owner) if owner else whole_model, name, replacement)
    src, tgt = batch()
    with torch.no_grad():
        assert (page(src, tgt) - model(src, tgt)).abs().max() > 1e-3


# --- the shipped translator -----------------------------------------------------------------------

@pytest.fixture(scope="module")
def shipped():
    """The translator, its one-page copy, and 50 validation sentence pairs as padded ids."""
    pytest.importorskip("tokenizers")
    from transformer_lib.training import pad_sequences

    translator, tokenizer, _ = tl.load_translator()
    pairs = tl.load_multi30k("val")[:50]
    src = pad_sequences(tokenizer.encode_batch([de for de, _ in pairs], add_eos=True),
                        tokenizer.pad_id)
    tgt = pad_sequences(tokenizer.encode_batch([en for _, en in pairs], add_bos=True,
                                               add_eos=True), tokenizer.pad_id)
    return translator, whole_model.from_package(translator), tokenizer, src, tgt


def test_the_shipped_translator_is_the_one_the_page_covers(shipped):
    translator, page, *_ = shipped
    c = translator.config
    assert c.norm_first and c.share_embeddings and c.tie_output      # pre-LN, all three tied
    assert page.embed.weight.data_ptr() != translator.src_embed.weight.data_ptr()   # a copy
    assert isinstance(page.encoder_norm, torch.nn.LayerNorm)


def test_the_shipped_translator_gives_the_same_logits(shipped):
    translator, page, tokenizer, src, tgt = shipped
    with torch.no_grad():
        theirs, ours = translator(src, tgt[:, :-1]), page(src, tgt[:, :-1])
    # float32: rounding only (the two sum in different orders), on logits up to ~15
    torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-4)
    torch.testing.assert_close(
        whole_model.label_smoothed_loss(ours, tgt[:, 1:], pad_id=tokenizer.pad_id),
        LabelSmoothingLoss(translator.config.tgt_vocab_size, 0.1, tokenizer.pad_id)(theirs,
                                                                                   tgt[:, 1:]))
    translator64 = copy.deepcopy(translator).double()             # float64: the rounding shrinks
    src, tgt = src[:10], tgt[:10]
    with torch.no_grad():
        theirs64 = translator64(src, tgt[:, :-1])
        ours64 = whole_model.from_package(translator64)(src, tgt[:, :-1])
    torch.testing.assert_close(ours64, theirs64, rtol=1e-10, atol=1e-10)


def test_the_shipped_translator_gives_the_same_greedy_translations(shipped):
    translator, page, tokenizer, src, _ = shipped
    max_len = src.shape[1] + 50
    ours = whole_model.greedy_decode(page, src, max_len, tokenizer.bos_id, tokenizer.eos_id)
    theirs = greedy_decode(translator, src, max_len, tokenizer.bos_id, tokenizer.eos_id)
    assert ours.shape == theirs.shape and torch.equal(ours, theirs)
    assert (ours == tokenizer.eos_id).any(dim=1).all()            # every sentence was finished
