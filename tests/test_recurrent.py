"""The recurrent baseline of chapter 20 (transformer_lib.recurrent): shapes, masks, gradients, its
additive attention against the formula written out, cached decoding against uncached decoding,
chapter 15's decoders on it, and errors that name the argument."""
import math

import pytest
import torch

from transformer_lib.decoding import beam_search, greedy_decode
from transformer_lib.recurrent import (
    AdditiveAttention,
    GRUDecoder,
    GRUEncoder,
    RecurrentConfig,
    RecurrentTranslator,
)

V, PAD, BOS, EOS = 40, 0, 1, 2


def tiny(dtype=torch.float32, **kw) -> RecurrentTranslator:
    torch.manual_seed(0)
    cfg = RecurrentConfig(V, V, **{"d_embed": 8, "d_hidden": 6, "d_attn": 5, "dropout": 0.0, **kw})
    return RecurrentTranslator(cfg).to(dtype).eval()


def batch(B=3, S=7, T=5, seed=1):
    g = torch.Generator().manual_seed(seed)
    src, tgt = torch.randint(3, V, (B, S), generator=g), torch.randint(3, V, (B, T), generator=g)
    src[0, S - 2:] = PAD                                     # one padded source sentence
    tgt[:, 0] = BOS
    return src, tgt


def test_shapes():
    model, (src, tgt) = tiny(), batch()
    memory = model.encode(src)
    assert memory.shape == (3, 7, 2 * 6)
    assert model(src, tgt).shape == model.decode(tgt, memory, (src != PAD)[:, None, None]).shape \
        == (3, 5, V)
    model.need_weights = True
    model(src, tgt)
    assert model.attn_weights.shape == (3, 5, 7)


def test_attention_equals_the_formula():
    """e_ij = v_a^T tanh(W_a s + U_a h_j), a = softmax over real j, c = sum_j a_ij h_j."""
    torch.manual_seed(2)
    att = AdditiveAttention(6, 10, 4).double()
    s, h = torch.randn(3, 6, dtype=torch.float64), torch.randn(3, 7, 10, dtype=torch.float64)
    mask = torch.ones(3, 7, dtype=torch.bool)
    mask[1, 4:] = False
    context, a = att(s, h, mask)
    W, U, v = att.W.weight, att.U.weight, att.v.weight[0]        # (4, 6), (4, 10), (4,)
    for b in range(3):
        e = torch.stack([v @ torch.tanh(W @ s[b] + U @ h[b, j]) for j in range(7)])
        e[~mask[b]] = -math.inf
        expected = torch.exp(e - e.max()) / torch.exp(e - e.max()).sum()
        torch.testing.assert_close(a[b], expected)
        torch.testing.assert_close(context[b], (expected[:, None] * h[b]).sum(0))
    assert (a[1, 4:] == 0).all() and torch.allclose(a.sum(-1), torch.ones(3, dtype=a.dtype))


def test_a_row_with_no_real_key_gets_zero_weights_not_nan():
    att = AdditiveAttention(3, 4, 2)
    context, a = att(torch.randn(2, 3), torch.randn(2, 5, 4), torch.zeros(2, 5, dtype=torch.bool))
    assert (a == 0).all() and (context == 0).all()


def test_padding_never_changes_real_positions_and_gets_zero_weight():
    model, (src, tgt) = tiny(), batch()
    longer = torch.cat([src, torch.full((3, 4), PAD)], 1)         # four more padding positions
    model.need_weights = True
    with torch.no_grad():
        short_logits, short_w = model(src, tgt), model.attn_weights
        long_logits, long_w = model(longer, tgt), model.attn_weights
        memory = model.encode(longer)
    torch.testing.assert_close(long_logits, short_logits)
    torch.testing.assert_close(long_w[..., :7], short_w)
    assert (long_w[..., 7:] == 0).all() and (short_w[0, :, 5:] == 0).all()   # exactly zero
    assert (memory[0, 5:] == 0).all()                        # the encoder leaves padding at zero
    changed = src.clone()
    changed[0, 5:] = 7                                       # a real token where padding was
    assert not torch.allclose(model(changed, tgt)[0], short_logits[0])    # the check can fail


def test_the_backward_gru_starts_at_each_sentences_own_end():
    """The last real token's annotation is its backward state after reading only itself."""
    model, (src, _) = tiny(), batch()
    with torch.no_grad():
        alone = model.encode(src[:1, 4:5])                      # the last real token, on its own
        full = model.encode(src[:1])
    torch.testing.assert_close(full[0, 4, 6:], alone[0, 0, 6:])


def test_gradcheck_float64():
    model, (src, tgt) = tiny(torch.float64, d_embed=4, d_hidden=3, d_attn=2), batch(B=2, S=4, T=3)
    src[0, 3] = PAD
    emb = model.src_embed.weight.detach().clone().requires_grad_(True)

    def f(weight):
        x_src, x_tgt = torch.nn.functional.embedding(src, weight), weight[tgt]
        mask = src != PAD
        memory = model.encoder(x_src, mask)
        state, keys = model.decoder.start(memory)
        out, _, _ = model.decoder(x_tgt, memory, mask, state, keys)
        return out
    assert torch.autograd.gradcheck(f, (emb,), eps=1e-6, atol=1e-5)


def test_cached_decoding_equals_uncached():
    model, (src, tgt) = tiny(), batch()
    mask = (src != PAD)[:, None, None, :]
    with torch.no_grad():
        memory, cache = model.encode(src, mask), {}
        steps = torch.cat([model.decode(tgt[:, t:t + 1], memory, mask, cache=cache)
                           for t in range(tgt.shape[1])], 1)
        whole = model.decode(tgt, memory, mask, torch.ones(5, 5, dtype=torch.bool).tril())
        two_then_three = torch.cat([model.decode(tgt[:, :2], memory, mask, cache=(c := {})),
                                    model.decode(tgt[:, 2:], memory, mask, cache=c)], 1)
    torch.testing.assert_close(steps, whole)
    torch.testing.assert_close(two_then_three, whole)
    assert cache["state"].shape == (3, 6) and cache["keys"].shape == (3, 7, 5)   # batch first


def test_greedy_and_beam_search_run_on_it_with_and_without_cache():
    model, (src, _) = tiny(), batch()
    cached, uncached = (greedy_decode(model, src, 6, BOS, EOS, use_cache=c) for c in (True, False))
    assert torch.equal(cached, uncached) and (cached[:, 0] == BOS).all()
    beams = [beam_search(model, src, beam_size=3, max_len=6, bos_id=BOS, eos_id=EOS, use_cache=c,
                         return_scores=True) for c in (True, False)]
    assert torch.equal(beams[0][0], beams[1][0])
    torch.testing.assert_close(beams[0][1], beams[1][1])
    greedy_beam = beam_search(model, src, beam_size=1, alpha=0.0, max_len=6, bos_id=BOS,
                              eos_id=EOS)
    assert torch.equal(greedy_beam[:, :cached.shape[1]], cached[:, :greedy_beam.shape[1]])


def test_training_reduces_the_loss():
    model, (src, tgt) = tiny(), batch()
    model.train()
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    losses = []
    for _ in range(30):
        logits = model(src, tgt[:, :-1])
        loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), tgt[:, 1:].flatten())
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < 0.5 * losses[0]


def test_tied_and_shared_matrices():
    model = tiny()
    assert model.output_projection.weight is model.tgt_embed.weight is model.src_embed.weight
    assert model.output_projection.bias is None
    untied = tiny(share_embeddings=False, tie_output=False)
    assert untied.src_embed is not untied.tgt_embed and untied.output_projection.bias is not None


@pytest.mark.parametrize("call, match", [
    (lambda m, s, t: m(s.float(), t),
     r"src must be an integer tensor of token ids of shape \(B, L\)"),
    (lambda m, s, t: m(s, t[:2]), "tgt must have the batch size of src"),
    (lambda m, s, t: m(s, t + V), "tgt contains token id"),
    (lambda m, s, t: m.encode(s, (s != PAD)[:, None, :]), r"src_mask must be a bool tensor of "
                                                          r"shape \(B, 1, 1, L_s\)"),
    (lambda m, s, t: m.encode(s, torch.ones(3, 1, 1, 7)), "src_mask must be a bool tensor"),
    (lambda m, s, t: m.encode(s.flip(1)), "src_mask must mark each sentence's real tokens"),
    (lambda m, s, t: m.decode(t, m.encode(s)[..., :5]), r"memory must be a float tensor of shape "
                                                         r"\(B, L_s, 2 d_hidden = 12\)"),
    (lambda m, s, t: m.decode(t, m.encode(s)[:2]), "memory must have the batch size of tgt"),
    (lambda m, s, t: m.decode(t, m.encode(s), tgt_mask=torch.ones(5, 5, dtype=torch.bool)),
     "tgt_mask must be None or the causal mask"),
])
def test_bad_inputs_name_the_argument(call, match):
    model, (src, tgt) = tiny(), batch()
    with pytest.raises(ValueError, match=match):
        call(model, src, tgt)


@pytest.mark.parametrize("kw, name", [({"d_hidden": 0}, "d_hidden"), ({"dropout": 1.5}, "dropout"),
                                      ({"tgt_vocab_size": 41}, "share_embeddings"),
                                      ({"pad_id": 40}, "pad_id"), ({"d_attn": 2.0}, "d_attn")])
def test_bad_config_names_the_field(kw, name):
    with pytest.raises(ValueError, match=name):
        RecurrentConfig(**{"src_vocab_size": V, "tgt_vocab_size": V, **kw})


def test_the_modules_alone():
    enc, dec = GRUEncoder(8, 6), GRUDecoder(8, 6, 5)
    x, mask = torch.randn(2, 4, 8), torch.tensor([[True] * 4, [True, True, False, False]])
    memory = enc(x, mask)
    state, keys = dec.start(memory)
    out, last, w = dec(torch.randn(2, 3, 8), memory, mask, state, keys)
    assert (memory.shape, state.shape, keys.shape) == ((2, 4, 12), (2, 6), (2, 4, 5))
    assert (out.shape, last.shape, w.shape) == ((2, 3, 8), (2, 6), (2, 3, 4))
    torch.testing.assert_close(state, torch.tanh(dec.init(memory[:, 0, 6:])))   # s_0 (eq. A.2.2)


def test_the_decoder_cell_is_the_gru_of_the_chapter():
    """PyTorch's GRU cell: r, z gates; n = tanh(x W_n + b_n + r * (h U_n + c_n));
    h' = (1 - z) * n + z * h (the chapter's equations, row convention)."""
    torch.manual_seed(3)
    cell = torch.nn.GRUCell(5, 4).double()
    x, h = torch.randn(2, 5, dtype=torch.float64), torch.randn(2, 4, dtype=torch.float64)
    (W_r, W_z, W_n), (U_r, U_z, U_n) = cell.weight_ih.T.chunk(3, 1), cell.weight_hh.T.chunk(3, 1)
    (b_r, b_z, b_n), (c_r, c_z, c_n) = cell.bias_ih.chunk(3), cell.bias_hh.chunk(3)
    r = torch.sigmoid(x @ W_r + b_r + h @ U_r + c_r)
    z = torch.sigmoid(x @ W_z + b_z + h @ U_z + c_z)
    n = torch.tanh(x @ W_n + b_n + r * (h @ U_n + c_n))
    torch.testing.assert_close(cell(x, h), (1 - z) * n + z * h)
