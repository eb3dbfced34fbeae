"""Chapter 15: greedy decoding, the KV cache, batched beam search with the GNMT length penalty."""
import itertools

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from transformer_lib.decoding import beam_search, greedy_decode, length_penalty
from transformer_lib.model import Transformer, TransformerConfig

PAD, BOS, EOS = 0, 1, 2


def _model(seed, vocab=13, norm_first=False, n_layers=2, d_model=16, max_len=40):
    torch.manual_seed(seed)
    cfg = TransformerConfig(src_vocab_size=vocab, tgt_vocab_size=vocab, d_model=d_model, n_heads=2,
                            n_layers=n_layers, d_ff=2 * d_model, dropout=0.1, norm_first=norm_first,
                            max_len=max_len, pad_id=PAD)
    return Transformer(cfg)


def _src(seed, batch=3, length=7, vocab=13):
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(3, vocab, (batch, length), generator=g)
    for b in range(1, batch):                                     # ragged lengths
        src[b, length - b:] = PAD
    return src


def _check_output_format(out, max_len):
    assert out.dtype == torch.long and out.shape[1] <= max_len + 1
    assert (out[:, 0] == BOS).all()
    for row in out.tolist():
        if EOS in row:
            assert all(t == PAD for t in row[row.index(EOS) + 1:])   # pad after eos
        assert PAD not in row[: row.index(EOS) if EOS in row else len(row)]


@settings(max_examples=8, deadline=None)
@given(seed=st.integers(0, 10_000), norm_first=st.booleans(), max_len=st.integers(1, 25))
def test_cached_equals_uncached_greedy(seed, norm_first, max_len):
    model = _model(seed, norm_first=norm_first)
    src = _src(seed)
    ys_c, lg_c = greedy_decode(model, src, max_len, BOS, EOS, return_logits=True)
    ys_u, lg_u = greedy_decode(model, src, max_len, BOS, EOS, use_cache=False, return_logits=True)
    assert torch.equal(ys_c, ys_u)
    torch.testing.assert_close(lg_c, lg_u, atol=1e-5, rtol=1e-5)
    assert lg_c.shape == (src.shape[0], ys_c.shape[1] - 1, 13)
    _check_output_format(ys_c, max_len)
    assert model.training                       # the mode is restored


def test_greedy_is_argmax_of_teacher_forced_pass():
    """Each greedy token is the argmax of a full forward pass over the decoded prefix (eq.
    greedy)."""
    model = _model(1).eval()
    src = _src(1)
    ys, logits = greedy_decode(model, src, 12, BOS, EOS, return_logits=True)
    with torch.no_grad():
        full = model(src, ys[:, :-1])                                  # (B, T-1, V)
    for b in range(src.shape[0]):
        row = ys[b].tolist()
        n = row.index(EOS) if EOS in row else len(row) - 1
        torch.testing.assert_close(logits[b, :n], full[b, :n], atol=1e-5, rtol=1e-5)
        masked = full[b, :n].clone()
        masked[:, [PAD, BOS]] = -float("inf")
        assert masked.argmax(-1).tolist() == row[1:n + 1]


@settings(max_examples=8, deadline=None)
@given(seed=st.integers(0, 10_000), max_len=st.integers(1, 20))
def test_beam_size_one_equals_greedy(seed, max_len):
    model = _model(seed)
    src = _src(seed, batch=4)
    assert torch.equal(beam_search(model, src, beam_size=1, max_len=max_len, bos_id=BOS,
                                   eos_id=EOS),
                       greedy_decode(model, src, max_len, BOS, EOS))


@settings(max_examples=6, deadline=None)
@given(seed=st.integers(0, 10_000), beam=st.integers(2, 5), alpha=st.sampled_from([0.0, 0.6, 1.0]))
def test_beam_cached_equals_uncached(seed, beam, alpha):
    model = _model(seed, norm_first=seed % 2 == 0)
    src = _src(seed)
    a, sa = beam_search(model, src, beam, alpha, 15, BOS, EOS, return_scores=True)
    b, sb = beam_search(model, src, beam, alpha, 15, BOS, EOS, use_cache=False, return_scores=True)
    assert torch.equal(a, b)
    torch.testing.assert_close(sa, sb, atol=1e-5, rtol=1e-5)
    _check_output_format(a, 15)


def _brute_force(model, src, symbols, max_len, alpha):
    seqs = [(*body, EOS) for n in range(max_len) for body in itertools.product(symbols, repeat=n)]
    seqs += list(itertools.product(symbols, repeat=max_len))
    best, best_score = None, -float("inf")
    with torch.no_grad():
        for seq in seqs:
            tgt = torch.tensor([[BOS, *seq]])
            log_p = model(src, tgt[:, :-1]).log_softmax(-1)[0]
            score = log_p.gather(-1, tgt[0, 1:, None]).sum().item() / length_penalty(len(seq),
                                                                                     alpha)
            if score > best_score:
                best, best_score = seq, score
    return best, best_score


@pytest.mark.parametrize("seed,vocab,max_len,beam,alpha", [
    (0, 5, 4, 32, 0.6), (1, 5, 4, 32, 0.0), (2, 6, 3, 64, 0.6), (3, 6, 3, 64, 1.0),
    (4, 5, 5, 64, 0.6),
])
def test_wide_beam_finds_brute_force_optimum(seed, vocab, max_len, beam, alpha):
    model = _model(seed, vocab=vocab, n_layers=1).eval()
    # Sharpen the output distribution so that the optimum is not always the shortest sentence.
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(1.5)
    symbols = tuple(range(3, vocab))
    for src in (torch.tensor([[3, 4, 4, 3]]), torch.tensor([[vocab - 1, 3]])):
        best, best_score = _brute_force(model, src, symbols, max_len, alpha)
        out, score = beam_search(model, src, beam, alpha, max_len, BOS, EOS, return_scores=True)
        found = tuple(t for t in out[0, 1:].tolist() if t != PAD)
        assert found == best
        assert score.item() == pytest.approx(best_score, abs=1e-5)


def test_beam_search_batched_equals_one_by_one():
    model = _model(5)
    src = _src(5, batch=4)
    together = beam_search(model, src, 4, 0.6, 12, BOS, EOS)
    for b in range(4):
        row = src[b: b + 1]
        row = row[:, : int((row != PAD).sum())]                    # no padding at all
        alone = beam_search(model, row, 4, 0.6, 12, BOS, EOS)
        n = alone.shape[1]
        assert together[b, :n].tolist() == alone[0].tolist()
        assert (together[b, n:] == PAD).all()


def test_beam_score_matches_its_tokens():
    """The returned score is log p(tokens | src) / lp(|tokens|) of the returned sentence (eq.
    length-penalty)."""
    model = _model(6).eval()
    src = _src(6, batch=2)
    out, scores = beam_search(model, src, 4, 0.6, 10, BOS, EOS, return_scores=True)
    with torch.no_grad():
        log_p = model(src, out[:, :-1]).log_softmax(-1)
    for b in range(2):
        row = out[b].tolist()
        n = row.index(EOS) if EOS in row else len([t for t in row if t != PAD]) - 1
        lp = log_p[b, torch.arange(n), out[b, 1:n + 1]].sum().item()
        assert scores[b].item() == pytest.approx(lp / length_penalty(n, 0.6), abs=1e-4)


def test_beam_search_scores_a_float64_model_in_float64():
    """The scores keep a float64 model's precision (they were cast to float32 silently); a float32
    model is scored in float32 as before."""
    model = _model(6).double().eval()
    src = _src(6, batch=2)
    out, scores = beam_search(model, src, 4, 0.6, 10, BOS, EOS, return_scores=True)
    assert scores.dtype == torch.float64
    with torch.no_grad():
        log_p = model(src, out[:, :-1]).log_softmax(-1)                      # float64
    for b in range(2):
        row = out[b].tolist()
        n = row.index(EOS) if EOS in row else len([t for t in row if t != PAD]) - 1
        lp = log_p[b, torch.arange(n), out[b, 1:n + 1]].sum().item()
        assert scores[b].item() == pytest.approx(lp / length_penalty(n, 0.6), rel=1e-12)
    assert beam_search(model.float(), src, 4, 0.6, 10, BOS, EOS,
                       return_scores=True)[1].dtype == torch.float32


def test_length_penalty_formula():
    assert length_penalty(1) == 1.0
    assert length_penalty(10, 0.6) == pytest.approx((15 / 6) ** 0.6)
    assert length_penalty(3, 0.0) == 1.0


def _never_eos(model):
    decode = model.decode
    model.decode = lambda *args, **kw: decode(*args, **kw).index_fill(-1, torch.tensor([EOS]),
                                                                      float("-inf"))
    return model


def test_default_max_len_and_bad_input():
    # eos can never win (its logit is -inf), so decoding never stops early and runs to the limit.
    # (An eos_id outside the vocabulary did this once; it is now an error:
    # test_decoding_arguments_name_the_argument.)
    model = _never_eos(_model(7, max_len=20))
    src = _src(7, length=5)
    out = beam_search(model, src, bos_id=BOS, eos_id=EOS)    # S + 50 = 55, capped at config.max_len
    assert out.shape == (3, 21)
    out = beam_search(_never_eos(_model(7, max_len=80)), src, beam_size=2, bos_id=BOS, eos_id=EOS)
    assert out.shape == (3, 5 + 50 + 1)                            # bos + (S + 50) new tokens
    with pytest.raises(ValueError,
                       match=r"src must be a long tensor of token ids of shape \(B, S\)"):
        greedy_decode(model, src.float(), 5, BOS, EOS)
    with pytest.raises(ValueError, match=r"src must be a long tensor"):
        beam_search(model, src[0], bos_id=BOS, eos_id=EOS)
    with pytest.raises(ValueError, match="bos_id and eos_id"):
        beam_search(model, src)
    with pytest.raises(ValueError, match="beam_size must be >= 1"):
        beam_search(model, src, beam_size=0, bos_id=BOS, eos_id=EOS)
    with pytest.raises(ValueError, match="alpha must be >= 0"):
        beam_search(model, src, alpha=-0.1, bos_id=BOS, eos_id=EOS)
    with pytest.raises(ValueError, match="max_len must be >= 1"):
        greedy_decode(model, src, 0, BOS, EOS)
    with pytest.raises(ValueError, match="max_len must be >= 1"):
        beam_search(model, src, max_len=0, bos_id=BOS, eos_id=EOS)


def test_decoding_arguments_name_the_argument():
    model, src = _model(0), _src(0)
    with pytest.raises(ValueError,
                       match=r"max_len must be >= 1, a whole number of new tokens, got 1.5"):
        greedy_decode(model, src, 1.5, BOS, EOS)
    with pytest.raises(ValueError,
                       match=r"max_len must be >= 1, a whole number of new tokens, got 1.5"):
        beam_search(model, src, max_len=1.5, bos_id=BOS, eos_id=EOS)
    with pytest.raises(ValueError,
                       match=r"beam_size must be >= 1, a whole number of beams, got 2.5"):
        beam_search(model, src, beam_size=2.5, bos_id=BOS, eos_id=EOS)
    with pytest.raises(ValueError, match=r"alpha must be >= 0 and finite, got nan"):
        beam_search(model, src, alpha=float("nan"), bos_id=BOS, eos_id=EOS)
    with pytest.raises(ValueError, match=r"eos_id must be a token id of the target vocabulary, in "
                                         r"\[0, 13\), got 13"):
        greedy_decode(model, src, 5, BOS, 13)
    with pytest.raises(ValueError, match=r"bos_id must be a token id of the target vocabulary, in "
                                         r"\[0, 13\), got -1"):
        beam_search(model, src, bos_id=-1, eos_id=EOS)
    with pytest.raises(ValueError, match=r"eos_id must differ from pad_id \(0\)"):
        greedy_decode(model, src, 5, BOS, PAD)
    with pytest.raises(ValueError, match=r"eos_id must differ from pad_id \(5\)"):
        beam_search(model, src, bos_id=BOS, eos_id=5, pad_id=5)
    assert model.training                                   # a refused call leaves the mode alone


def test_decoding_a_wrapped_model_says_unwrap_it():
    class DistributedDataParallel(torch.nn.Module):         # the shape of torch's wrapper: the
                                                            # model in .module
        def __init__(self, module):
            super().__init__()
            self.module = module
    wrapped, src = DistributedDataParallel(_model(0)), _src(0)
    with pytest.raises(TypeError,
                       match=r"model is a DistributedDataParallel wrapper: decode with the model "
                                        r"inside it, model.module"):
        greedy_decode(wrapped, src, 5, BOS, EOS)
    with pytest.raises(TypeError, match=r"model.module"):
        beam_search(wrapped, src, bos_id=BOS, eos_id=EOS)


def test_an_empty_batch_gives_an_empty_result_in_greedy_and_beam():
    model, src = _model(0).eval(), _src(0)[:0]
    greedy = greedy_decode(model, src, 5, BOS, EOS)
    beam, scores = beam_search(model, src, beam_size=3, max_len=5, bos_id=BOS, eos_id=EOS,
                               return_scores=True)
    assert greedy.shape == beam.shape == (0,
                                          2) and beam.dtype == torch.long and scores.shape == (0,)


@pytest.mark.parametrize("decode", ["greedy", "beam"])
def test_mode_restored_when_decoding_fails(decode):
    """An error inside the decoding loop leaves the model in the mode it was in (training here)."""
    model = _model(0)

    def broken_decode(*args, **kwargs):
        raise RuntimeError("decoder failed")

    model.decode = broken_decode
    with pytest.raises(RuntimeError, match="decoder failed"):
        if decode == "greedy":
            greedy_decode(model, _src(0), 5, BOS, EOS)
        else:
            beam_search(model, _src(0), 2, 0.6, 5, BOS, EOS)
    assert model.training


# -- beam search is exact when its beam holds every hypothesis ------------------------------------
_EXACT_SYMBOLS, _EXACT_MAX_LEN = (3, 4), 5          # two word tokens besides eos (bos, pad banned)
_EXACT_HYPS = ([(*body, EOS) for n in range(_EXACT_MAX_LEN)
                for body in itertools.product(_EXACT_SYMBOLS, repeat=n)]
               + list(itertools.product(_EXACT_SYMBOLS, repeat=_EXACT_MAX_LEN)))   # 63 sentences


def _sharp_model(seed):
    """A float64 model over 5 target ids (pad, bos, eos and two words) with sharpened next-token
    distributions, so that long sentences can win; and 8 sources (8, 4)."""
    torch.manual_seed(seed)
    cfg = TransformerConfig(src_vocab_size=11, tgt_vocab_size=5, d_model=8, n_heads=2, n_layers=1,
                            d_ff=16, dropout=0.0, max_len=8, pad_id=PAD)
    model = Transformer(cfg).double().eval()
    with torch.no_grad():
        model.output_projection.weight.mul_(3.0)
    return model, torch.randint(3, 11, (8, 4), generator=torch.Generator().manual_seed(seed))


def _exhaustive_log_probs(model, src):
    """log p(Y | src) of every sentence in _EXACT_HYPS, for every row of src: (B, 63), and |Y|."""
    n, length = len(_EXACT_HYPS), _EXACT_MAX_LEN
    tgt = torch.full((n, length + 1), PAD)
    tgt[:, 0] = BOS
    for i, seq in enumerate(_EXACT_HYPS):
        tgt[i, 1:len(seq) + 1] = torch.tensor(seq)
    lengths = torch.tensor([len(seq) for seq in _EXACT_HYPS])
    with torch.no_grad():          # teacher forcing; right padding is invisible to real positions
        log_p = model(src.repeat_interleave(n, 0), tgt[:, :-1].repeat(src.shape[0], 1))
        log_p = log_p.log_softmax(-1).view(src.shape[0], n, length, -1)
    per_token = log_p.gather(-1, tgt[None, :, 1:, None].expand(src.shape[0], -1, -1, 1))[..., 0]
    return per_token.masked_fill(torch.arange(length) >= lengths[:, None], 0.0).sum(-1), lengths


@pytest.mark.parametrize("seed", [1, 8])
def test_beam_as_wide_as_the_hypothesis_space_is_exhaustive_search(seed):
    """With beam_size = the number of complete hypotheses (63: two word tokens, max_len 5), beam
    search prunes nothing (at most 16 live beams x 3 tokens = 48 candidates a step, all ranked
    within the best K, and fewer than K sentences finish before the last step), so the only
    thing that can end it early is its stopping bound. That bound must hold for every alpha:
    a live hypothesis with log-prob s <= 0 can reach at most s / lp(max_len), because lp grows
    with length; dividing by lp(t) instead stops too early and misses a longer, better sentence.
    The best sentence and its score must be exhaustive search's, for each alpha."""
    model, src = _sharp_model(seed)
    log_p, lengths = _exhaustive_log_probs(model, src)                            # (8, 63), (63,)
    index = {seq: i for i, seq in enumerate(_EXACT_HYPS)}
    for alpha in (0.0, 0.6, 1.2, 2.0, 3.0):
        exhaustive = log_p / length_penalty(lengths.double(), alpha)                    # (8, 63)
        out, scores = beam_search(model, src, len(_EXACT_HYPS), alpha, _EXACT_MAX_LEN, BOS, EOS,
                                  return_scores=True)
        _check_output_format(out, _EXACT_MAX_LEN)
        for b in range(src.shape[0]):
            found = index[tuple(t for t in out[b, 1:].tolist() if t != PAD)]
            best = exhaustive[b].max().item()
            assert scores[b].item() == pytest.approx(best, abs=1e-9), (alpha, b)
            assert exhaustive[b, found].item() == pytest.approx(best, abs=1e-9), (alpha, b)


@pytest.mark.parametrize("use_cache", [True, False])
def test_decoding_with_pad_id_5_ignores_source_padding(use_cache):
    """A model whose pad_id is 5 (0 an ordinary word): greedy and beam search hide exactly the 5s
    of the source, so each sentence of a padded batch decodes as it does alone, unpadded; pad_id
    5, never 0, is what follows eos and is never emitted. (This random model repeats one word,
    so its logits and scores carry the comparison.)"""
    torch.manual_seed(13)
    cfg = TransformerConfig(src_vocab_size=13, tgt_vocab_size=13, d_model=16, n_heads=2,
                            n_layers=2, d_ff=32, dropout=0.1, max_len=40, pad_id=5)
    model = Transformer(cfg).double()
    g = torch.Generator().manual_seed(13)
    src = torch.randint(0, 13, (3, 7), generator=g)
    src[src == 5] = 6
    src[:, 0] = 0
    lengths = (7, 4, 2)
    for b, n in enumerate(lengths):
        src[b, n:] = 5
    greedy, logits = greedy_decode(model, src, 10, BOS, EOS, use_cache=use_cache,
                                   return_logits=True)
    beam, scores = beam_search(model, src, 3, 0.6, 10, BOS, EOS, use_cache=use_cache,
                               return_scores=True)
    for together in (greedy, beam):
        for row in together.tolist():                         # 5 only after eos, 0 can be a word
            n = row.index(EOS) + 1 if EOS in row else len(row)
            assert 5 not in row[:n] and all(t == 5 for t in row[n:])
    for b, n in enumerate(lengths):
        alone = src[b:b + 1, :n]                                                    # no padding
        one_beam, one_score = beam_search(model, alone, 3, 0.6, 10, BOS, EOS,
                                          use_cache=use_cache, return_scores=True)
        one_greedy, one_logits = greedy_decode(model, alone, 10, BOS, EOS, use_cache=use_cache,
                                               return_logits=True)
        for together, one in ((greedy, one_greedy), (beam, one_beam)):
            k = one.shape[1]
            assert together[b, :k].tolist() == one[0].tolist()
            assert (together[b, k:] == 5).all()
        torch.testing.assert_close(logits[b:b + 1, :one_logits.shape[1]], one_logits)
        torch.testing.assert_close(scores[b:b + 1], one_score)
    assert model.training


def test_an_explicit_src_mask_is_honoured_by_greedy_and_beam():
    """A src_mask passed to greedy_decode or beam_search reaches the encoder as well as the
    cross-attention: hiding every source position after the third decodes exactly as the
    sources cut after three tokens (logits and scores compared, as the model repeats words)."""
    model = _model(15).double()
    src = _src(15)                                              # real lengths 7, 6, 5
    keep = torch.zeros(src.shape, dtype=torch.bool)
    keep[:, :3] = True
    src_mask, cut = keep[:, None, None, :], src[:, :3]                          # (B, 1, 1, S)
    for use_cache in (True, False):
        ys, logits = greedy_decode(model, src, 8, BOS, EOS, src_mask, use_cache,
                                   return_logits=True)
        ys_cut, logits_cut = greedy_decode(model, cut, 8, BOS, EOS, use_cache=use_cache,
                                           return_logits=True)
        assert torch.equal(ys, ys_cut)
        torch.testing.assert_close(logits, logits_cut)
        out, scores = beam_search(model, src, 3, 0.6, 8, BOS, EOS, src_mask, use_cache,
                                  return_scores=True)
        out_cut, scores_cut = beam_search(model, cut, 3, 0.6, 8, BOS, EOS, use_cache=use_cache,
                                          return_scores=True)
        assert torch.equal(out, out_cut)
        torch.testing.assert_close(scores, scores_cut)


def _reference_beam(model, src, beam, alpha, max_len):
    """Steps 1-6 of chapter 15's beam search for one sentence src (1, S), in plain Python, each
    step a full forward pass: returns (normalised score, tokens) of the best finished hypothesis."""
    vocab = model.config.tgt_vocab_size
    live, finished, n_finished = [(0.0, (BOS,))], [], 0
    for t in range(1, max_len + 1):
        with torch.no_grad():
            logits = model(src.expand(len(live), -1), torch.tensor([y for _, y in live]))[:, -1]
        log_p = logits.log_softmax(-1).tolist()
        best_2k = sorted(((s + log_p[i][v], y + (v,)) for i, (s, y) in enumerate(live)
                          for v in range(vocab) if v not in (PAD, BOS)), reverse=True)[:2 * beam]
        ended = [c for rank, c in enumerate(best_2k) if c[1][-1] == EOS and rank < beam]
        live = [c for c in best_2k if c[1][-1] != EOS][:beam]
        if t == max_len:
            ended += live                                 # finished as they are, without eos
        finished += [(s / length_penalty(t, alpha), y) for s, y in ended]
        n_finished += len(ended)
        if n_finished >= beam or max(finished, default=(-float("inf"),))[0] >= (
                max(s for s, _ in live) / length_penalty(max_len, alpha)):
            break
    return max(finished)


def test_beam_search_follows_its_six_steps():
    """Narrow beams (2, 3) on a sharp random model, alphas 0 to 3, a batch of 8 sentences that
    finish at different steps: the batched search returns, for every sentence, the sentence and
    score of the plain one-sentence reference of the chapter's steps (best 2K extensions, eos
    finished only within the best K, the K best others continue, the K best finished at max_len,
    stop at K finished or when no live beam can win)."""
    model, src = _sharp_model(2)
    for beam, alpha in itertools.product((2, 3), (0.0, 0.6, 1.2, 2.0, 3.0)):
        out, scores = beam_search(model, src, beam, alpha, 6, BOS, EOS, return_scores=True)
        for b in range(src.shape[0]):
            score, tokens = _reference_beam(model, src[b:b + 1], beam, alpha, 6)
            assert tuple(t for t in out[b].tolist() if t != PAD) == tokens, (beam, alpha, b)
            assert scores[b].item() == pytest.approx(score, abs=1e-9), (beam, alpha, b)


def test_the_output_limit_is_the_source_length_plus_50_within_the_table():
    from transformer_lib.decoding import NEW_TOKENS_OVER_SOURCE, max_new_tokens
    assert NEW_TOKENS_OVER_SOURCE == 50                      # section 6.1: input length + 50
    assert [max_new_tokens(s, 256) for s in (1, 12, 206, 207, 256)] == [51, 62, 256, 256, 256]
    assert max_new_tokens(15, 20) == 20


def test_translate_keeps_within_a_short_models_positional_table():
    """`train.translate` caps the new tokens by the model's own max_len (not the recipe's
    MAX_LEN): a model with a 20-position table decodes a 15-token sentence without overrunning
    it, greedy and beam, as `beam_search` does by itself."""
    from transformer_lib.stages import translate

    class Tokens:                                  # what translate reads of a tokenizer
        pad_id, bos_id, eos_id = PAD, BOS, EOS

        def encode_batch(self, texts, add_eos=False):
            return [[int(t) for t in text.split()] + [EOS] * add_eos for text in texts]

        def decode_batch(self, batch):
            return [" ".join(str(t) for t in row.tolist()) for row in batch]

    torch.manual_seed(4)
    model = Transformer(TransformerConfig(src_vocab_size=13, tgt_vocab_size=13, d_model=16,
                                          n_heads=2, n_layers=1, d_ff=32, max_len=20,
                                          tie_output=False)).eval()
    with torch.no_grad():
        model.output_projection.bias[EOS] = -1e4   # never stops by itself: the limit must hold
    sentence = " ".join(str(3 + i % 10) for i in range(14))               # 14 ids + eos
    for beam in (1, 4):
        out = translate(model, Tokens(), [sentence], beam_size=beam)[0].split()
        assert len(out) == 1 + 20, (beam, len(out))                       # bos + 20 new tokens
    assert beam_search(model, _src(1, batch=1, length=15), 2, bos_id=BOS, eos_id=EOS).shape[1] \
        == 1 + 20


def test_positions_of_reads_the_config_the_attribute_or_nothing():
    """The output limit is bounded by the model's positional table, wherever the model keeps it:
    this package's config, an nn.Transformer reference's attribute (appendix A3)."""
    from types import SimpleNamespace

    from transformer_lib.decoding import positions_of
    from transformer_lib.model import Transformer, TransformerConfig
    model = Transformer(TransformerConfig(src_vocab_size=20, tgt_vocab_size=20, d_model=8,
                                          n_heads=2, n_layers=1, d_ff=16, max_len=40))
    assert positions_of(model) == 40
    assert positions_of(SimpleNamespace(max_len=77)) == 77
    assert positions_of(SimpleNamespace()) == 10**9
