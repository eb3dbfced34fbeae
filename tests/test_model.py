"""Chapter 11: TransformerConfig, Transformer (forward / encode / decode / cache), sizes and bad
input."""
import math

import pytest
import torch
from torch import nn

from transformer_lib.masking import make_causal_mask, make_padding_mask
from transformer_lib.model import Transformer, TransformerConfig, evaluating, parameter_count
from transformer_lib.positional import sinusoidal_encoding


def small(**kw):
    args = dict(src_vocab_size=23, tgt_vocab_size=19, d_model=16, n_heads=2, n_layers=2, d_ff=32,
                max_len=40)
    args.update(kw)
    return TransformerConfig(**args)


def batch(seed=0):
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(1, 23, (3, 7), generator=g)
    tgt = torch.randint(1, 19, (3, 6), generator=g)
    src[1, 4:] = 0
    tgt[1, 3:] = 0
    return src, tgt


def test_presets_are_the_paper_models():
    base, big = TransformerConfig.base(37000), TransformerConfig.big(37000)
    assert (base.d_model, base.n_heads, base.n_layers, base.d_ff, base.dropout) == (512, 8, 6, 2048,
                                                                                    0.1)
    assert (big.d_model, big.n_heads, big.n_layers, big.d_ff, big.dropout) == (1024, 16, 6, 4096,
                                                                               0.3)
    for c in (base, big):
        assert (c.share_embeddings and c.tie_output and not c.norm_first and c.src_vocab_size
                == c.tgt_vocab_size)
    assert TransformerConfig.base(100, norm_first=True).norm_first


@pytest.mark.parametrize("kw",
                         [dict(share_embeddings=True, tgt_vocab_size=23), dict(tie_output=False),
                                dict(positional="learned"), dict(norm_first=True),
                          dict(share_embeddings=False)])
def test_parameter_count_formula(kw):
    cfg = small(**kw)
    assert parameter_count(cfg)["total"] == sum(p.numel() for p in Transformer(cfg).parameters())


def test_paper_sizes():
    """Table 3 at a shared 37 000-token vocabulary: base 63.08M (paper: 65M), big 214.25M (paper:
    213M)."""
    base, big = (parameter_count(TransformerConfig.base(37000)),
                 parameter_count(TransformerConfig.big(37000)))
    assert base["total"] == 63_082_496 and big["total"] == 214_245_376
    assert abs(big["total"] - 213e6) / 213e6 < 0.01 and abs(base["total"] - 65e6) / 65e6 < 0.04
    with torch.device("meta"):
        for cfg in (TransformerConfig.base(37000), TransformerConfig.big(37000)):
            torch_core = sum(p.numel() for p in nn.Transformer(cfg.d_model, cfg.n_heads,
                                                               cfg.n_layers, cfg.n_layers, cfg.d_ff,
                                                               batch_first=True).parameters())
            counts = parameter_count(cfg)
            assert torch_core == counts["encoder"] + counts["decoder"] + 4 * cfg.d_model
            assert sum(p.numel() for p in Transformer(cfg).parameters()) == counts["total"]


def test_weight_tying():
    m = Transformer(small(share_embeddings=True, tgt_vocab_size=23))
    assert m.src_embed.weight is m.tgt_embed.weight is m.output_projection.weight
    assert m.output_projection.bias is None
    m = Transformer(small())
    assert m.src_embed is not m.tgt_embed and m.output_projection.weight is m.tgt_embed.weight
    m = Transformer(small(tie_output=False))
    assert (m.output_projection.weight is not m.tgt_embed.weight
            and m.output_projection.bias is not None)


def test_initialisation_is_as_stated():
    torch.manual_seed(0)
    cfg = TransformerConfig(src_vocab_size=3000, tgt_vocab_size=3000, d_model=64, n_heads=4,
                            n_layers=2, d_ff=256)
    m = Transformer(cfg)
    assert m.src_embed.weight.std().item() == pytest.approx(64 ** -0.5, rel=0.05)
    w1 = m.encoder.layers[0].feed_forward.w_1.weight
    assert (w1.abs().max() <= math.sqrt(6 / (64 + 256)) and w1.std().item()
            == pytest.approx(math.sqrt(2 / 320), rel=0.05))
    # W_Q, W_K, W_V: Xavier with gain 1/sqrt(2), i.e. the bound of one (3d x d) Xavier matrix, as
    # nn.MultiheadAttention and fairseq; per-block Xavier (sqrt(2) larger) made post-LN training
    # stall after warm-up (chapter 11, "Initialisation")
    for attn in (m.encoder.layers[0].self_attn, m.decoder.layers[1].self_attn,
                 m.decoder.layers[1].cross_attn):
        for block in attn.in_proj.weight.chunk(3):
            assert block.abs().max() <= math.sqrt(6 / (4 * 64))
            assert block.std().item() == pytest.approx(math.sqrt(1 / 128), rel=0.1)
            assert block.abs().max() > 0.95 * math.sqrt(6 / (4 * 64))      # uniform, that bound
    untied = Transformer(TransformerConfig(src_vocab_size=3000, tgt_vocab_size=3000, d_model=64,
                                           n_heads=4, n_layers=1, d_ff=256, tie_output=False,
                                           positional="learned"))
    assert untied.output_projection.weight.std().item() == pytest.approx(64 ** -0.5, rel=0.05)
    # learned positions: N(0, 1)
    assert untied.tgt_pos.weight.std().item() == pytest.approx(1.0, rel=0.05)
    out_proj = m.encoder.layers[1].self_attn.out_proj.weight                       # Xavier, d x d
    assert (out_proj.abs().max() <= math.sqrt(6 / 128) and out_proj.std().item()
            == pytest.approx(0.125, rel=0.1))
    for name, p in m.named_parameters():
        if name.endswith("bias") and "feed_forward" in name:       # nn.Linear's U(+-fan_in^-1/2)
            fan_in = 64 if ".w_1." in name else 256
            assert 0 < p.abs().max() <= fan_in ** -0.5, name
            assert p.abs().max() > 0.9 * fan_in ** -0.5, name
        elif name.endswith("bias") and "norm" not in name:
            assert (p == 0).all(), name
        if name.endswith("norm.weight"):
            assert (p == 1).all(), name


def test_forward_shapes_and_default_masks():
    torch.manual_seed(1)
    m = Transformer(small()).eval()
    src, tgt = batch()
    logits = m(src, tgt)
    assert logits.shape == (3, 6, 19) and torch.isfinite(logits).all()
    # The default tgt mask is causal only (right-padded targets): equal to passing it explicitly
    # everywhere ...
    torch.testing.assert_close(logits, m(src, tgt, make_padding_mask(src, 0), make_causal_mask(6)))
    # ... and, at the real target positions, equal to the full padding & causal mask.
    full = m(src, tgt, make_padding_mask(src, 0), make_padding_mask(tgt, 0) & make_causal_mask(6))
    real = tgt != 0
    assert not real.all()                                   # the batch has target padding
    torch.testing.assert_close(logits[real], full[real])
    assert not torch.allclose(logits[~real], full[~real])  # only the (ignored) pad positions differ


@pytest.mark.parametrize("kw", [dict(), dict(share_embeddings=True, tgt_vocab_size=23),
                                dict(tie_output=False), dict(norm_first=True)])
def test_forward_is_eq_transformer(kw):
    """eq. transformer written out: sqrt(d) E[tokens] + PE into the encoder and decoder, logits = h
    W_out^T (+ b_out)."""
    torch.manual_seed(9)
    m = Transformer(small(**kw)).double().eval()
    src, tgt = batch(5)
    d = m.config.d_model
    x0 = math.sqrt(d) * m.src_embed.weight[src] + sinusoidal_encoding(src.shape[1], d).double()
    y0 = math.sqrt(d) * m.tgt_embed.weight[tgt] + sinusoidal_encoding(tgt.shape[1], d).double()
    src_mask = (src != 0)[:, None, None, :]
    memory = m.encoder(x0, src_mask)
    h = m.decoder(y0, memory, make_causal_mask(tgt.shape[1]), src_mask)
    w_out = m.tgt_embed.weight if m.config.tie_output else m.output_projection.weight
    expected = h @ w_out.T + (0 if m.config.tie_output else m.output_projection.bias)
    torch.testing.assert_close(m(src, tgt), expected)


def test_forward_equals_encode_then_decode():
    torch.manual_seed(2)
    m = Transformer(small()).eval()
    src, tgt = batch(1)
    src_mask = make_padding_mask(src, 0)
    torch.testing.assert_close(m(src, tgt), m.decode(tgt, m.encode(src), src_mask))


def test_padding_in_source_is_invisible():
    """Extra pad columns on the source, or different ids hidden behind the mask, change no logit."""
    torch.manual_seed(3)
    m = Transformer(small()).eval()
    src, tgt = batch(2)
    out = m(src, tgt)
    longer = torch.cat([src, torch.zeros(3, 2, dtype=torch.long)], 1)         # two more pad columns
    torch.testing.assert_close(m(longer, tgt), out, atol=1e-5, rtol=1e-5)
    hidden = src.clone()
    hidden[1, 4:] = 5                                                         # real ids, masked out
    torch.testing.assert_close(m(hidden, tgt, src_mask=make_padding_mask(src, 0)), out)


def test_future_target_tokens_are_invisible():
    torch.manual_seed(4)
    m = Transformer(small()).eval()
    src, tgt = batch(3)
    tgt = tgt[[0]]
    for t in range(5):
        changed = tgt.clone()
        changed[:, t + 1:] = (changed[:, t + 1:] % 17) + 1
        torch.testing.assert_close(m(src[[0]], changed)[:, :t + 1], m(src[[0]], tgt)[:, :t + 1])


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("positional", ["sinusoidal", "learned"])
def test_incremental_decoding_matches_full_pass(norm_first, positional):
    torch.manual_seed(5)
    m = Transformer(small(norm_first=norm_first, positional=positional)).double().eval()
    src, tgt = batch(4)
    tgt = tgt[[0, 2]]
    src = src[[0, 1]]                                   # row 1 of src has padding
    src_mask = make_padding_mask(src, 0)
    full = m(src, tgt)
    memory = m.encode(src)
    cache = {}
    # a prefix of two, then one at a time
    steps = [m.decode(tgt[:, :2], memory, src_mask, cache=cache)]
    steps += [m.decode(tgt[:, t:t + 1], memory, src_mask, cache=cache) for t in range(2, 6)]
    torch.testing.assert_close(torch.cat(steps, 1), full, atol=1e-10, rtol=1e-8)
    assert cache["offset"] == 6


def test_embedding_scale_and_positions():
    """Y0 = sqrt(d) E[tgt] + PE (dropout off in eval)."""
    m = Transformer(small()).eval()
    tgt = torch.tensor([[3, 4, 5]])
    y0 = m._embed(tgt, m.tgt_embed, m.tgt_pos)
    torch.testing.assert_close(y0, m.tgt_embed.weight[tgt] * 4.0 + sinusoidal_encoding(3, 16))
    y_off = m._embed(tgt, m.tgt_embed, m.tgt_pos, offset=5)
    torch.testing.assert_close(y_off, m.tgt_embed.weight[tgt] * 4.0
                               + sinusoidal_encoding(8, 16)[5:])


def test_dropout_is_where_the_paper_puts_it():
    m = Transformer(small(dropout=0.2))
    assert m.src_pos.dropout.p == m.tgt_pos.dropout.p == 0.2
    assert (m.encoder.layers[0].residual_ffn.dropout.p == 0.2
            and m.decoder.layers[1].residual_cross.dropout.p == 0.2)
    assert (m.encoder.layers[0].self_attn.dropout == 0.0
            and m.decoder.layers[0].feed_forward.dropout.p == 0.0)
    src, tgt = batch()
    m.train()
    assert not torch.allclose(m(src, tgt), m(src, tgt))
    m.eval()
    torch.testing.assert_close(m(src, tgt), m(src, tgt))


def test_deterministic_on_cpu():
    src, tgt = batch()
    outs = []
    for _ in range(2):
        torch.manual_seed(7)
        outs.append(Transformer(small()).eval()(src, tgt))
    assert torch.equal(outs[0], outs[1])


def test_gradients_reach_every_parameter():
    torch.manual_seed(8)
    m = Transformer(small(positional="learned", tie_output=False))
    src, tgt = batch()
    m(src, tgt).sum().backward()
    missing = [n for n, p in m.named_parameters() if p.grad is None or p.grad.abs().sum() == 0]
    assert not missing, missing


def test_token_ids_outside_the_vocabulary_are_a_clear_error():
    m = Transformer(small())
    src, tgt = batch()
    bad_src = src.clone()
    bad_src[0, 0] = 23
    with pytest.raises(ValueError, match=r"src contains token id 23 outside the vocabulary: ids "
                                         r"must be in \[0, 23\)"):
        m(bad_src, tgt)
    bad_tgt = tgt.clone()
    bad_tgt[2, 1] = -1
    with pytest.raises(ValueError,
                       match=r"tgt contains token id -1 outside the vocabulary.*vocab size 19"):
        m(src, bad_tgt)
    with pytest.raises(ValueError,
                       match=r"src must be an integer tensor of token ids of shape \(B, L\)"):
        m.encode(src.float())
    m.check_inputs = False            # a trainer that checked its data once skips the per-call sync
    with pytest.raises(IndexError):        # ... and then an id out of range is only PyTorch's error
        m(bad_src, tgt)
    with pytest.raises(ValueError,
                       match=r"tgt must be an integer tensor of token ids of shape \(B, L\)"):
        m.decode(tgt[0], m.encode(src))


def test_sequences_longer_than_the_positional_table_are_a_clear_error():
    m = Transformer(small(max_len=8))
    with pytest.raises(ValueError, match=r"src needs positions 0\.\.8, but the positional table "
                                         r"holds max_len=8"):
        m.encode(torch.ones(1, 9, dtype=torch.long))
    memory = m.encode(torch.ones(1, 4, dtype=torch.long))
    cache = {}
    m.decode(torch.ones(1, 8, dtype=torch.long), memory, cache=cache)
    with pytest.raises(ValueError, match=r"tgt needs positions 8\.\.8, but the positional table "
                                         r"holds max_len=8"):
        m.decode(torch.ones(1, 1, dtype=torch.long), memory, cache=cache)


@pytest.mark.parametrize("kw,msg", [(dict(d_model=15), "d_model must be divisible by n_heads"),
                                    (dict(share_embeddings=True),
                                     "share_embeddings needs one vocabulary"),
                                    (dict(positional="rotary"), "positional must be"),
                                    (dict(n_layers=0), "n_layers must be a positive int"),
                                    (dict(pad_id=50), "pad_id must be a token id")])
def test_bad_config_is_a_clear_error(kw, msg):
    with pytest.raises(ValueError, match=msg):
        small(**kw)


@pytest.mark.parametrize("dtype", [torch.int8, torch.uint8, torch.int16])
def test_small_integer_token_ids_name_the_argument(dtype):
    m = Transformer(small())
    src, tgt = batch()
    with pytest.raises(ValueError, match=r"src must be an integer tensor of token ids of shape "
                                         r"\(B, L\) and dtype "
                                         rf"torch.int64 or torch.int32 .*got a {dtype} tensor"):
        m(src.to(dtype), tgt)
    with pytest.raises(ValueError, match=r"tgt must be .* dtype torch.int64 or torch.int32 .*got "
                                         rf"a {dtype} tensor"):
        m(src, tgt.to(dtype))
    assert m(src.int(), tgt.int()).shape == (3, 6, 19)       # int32 is fine (nn.Embedding takes it)


def test_source_and_target_batch_sizes_must_agree():
    m = Transformer(small())
    src, tgt = batch()
    with pytest.raises(ValueError,
                       match=r"tgt must have the batch size of src, B = 3, got shape \(2, 6\)"):
        m(src, tgt[:2])
    with pytest.raises(ValueError, match=r"memory must have the batch size of tgt, B = 2, got "
                                         r"shape \(3, 7, 16\)"):
        m.decode(tgt[:2], m.encode(src))


@pytest.mark.parametrize("field,value,msg", [
    ("eps", -1.0, r"eps must be a finite number > 0, got -1.0"),
    ("eps", 0.0, r"eps must be a finite number > 0"),
    ("eps", float("nan"), r"eps must be a finite number > 0, got nan"),
    ("dropout", -0.1, r"dropout must be a probability in \[0, 1\), got -0.1"),
    ("dropout", float("nan"), r"dropout must be a probability in \[0, 1\), got nan"),
    ("attn_dropout", -1.0, r"attn_dropout must be a probability in \[0, 1\), got -1.0"),
    ("attn_dropout", float("inf"), r"attn_dropout must be a probability"),
    ("ffn_dropout", 1.5, r"ffn_dropout must be a probability in \[0, 1\), got 1.5"),
    ("dropout", "0.1", r"dropout must be a probability in \[0, 1\), got '0.1'"),
])
def test_float_fields_are_checked_where_they_are_set(field, value, msg):
    with pytest.raises(ValueError, match=msg):
        small(**{field: value})


def test_evaluating_restores_the_mode_even_on_error():
    model = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Dropout(0.5))
    with pytest.raises(RuntimeError, match="inside"):
        with evaluating(model):
            assert not model.training and not torch.is_grad_enabled()
            raise RuntimeError("inside")
    assert model.training and torch.is_grad_enabled()
    model.eval()
    with evaluating(model):
        pass
    assert not model.training                            # a model in eval mode stays there


def test_attention_initialisation_matches_nn_transformer():
    """Each of W_Q, W_K, W_V, W_O starts with the spread nn.Transformer gives it (its
    _reset_parameters applies Xavier to the whole (3d, d) in_proj_weight)."""
    torch.manual_seed(0)
    d = 128
    ours = Transformer(TransformerConfig(src_vocab_size=50, tgt_vocab_size=50, d_model=d,
                                         n_heads=4, n_layers=1, d_ff=256))
    ref = torch.nn.Transformer(d, 4, 1, 1, 256, batch_first=True)
    pairs = [(ours.encoder.layers[0].self_attn, ref.encoder.layers[0].self_attn),
             (ours.decoder.layers[0].cross_attn, ref.decoder.layers[0].multihead_attn)]
    for mine, theirs in pairs:
        for a, b in zip(mine.in_proj.weight.chunk(3), theirs.in_proj_weight.chunk(3)):
            assert a.abs().max().item() == pytest.approx(b.abs().max().item(), rel=0.02)
            assert a.std().item() == pytest.approx(b.std().item(), rel=0.05)
        assert mine.out_proj.weight.std().item() == pytest.approx(
            theirs.out_proj.weight.std().item(), rel=0.05)
    # the FFN biases: nn.Transformer keeps nn.Linear's uniform init, U(+-fan_in^-1/2)
    mine, theirs = ours.encoder.layers[0].feed_forward, ref.encoder.layers[0]
    for a, b in ((mine.w_1.bias, theirs.linear1.bias), (mine.w_2.bias, theirs.linear2.bias)):
        assert a.std().item() == pytest.approx(b.std().item(), rel=0.15)
        assert a.abs().max().item() == pytest.approx(b.abs().max().item(), rel=0.1)


def _batch_padded_with_5(seed=11):
    """For a model whose pad_id is 5: src (3, 7) right-padded with 5 to real lengths 7, 4, 2, tgt
    (3, 6); 5 appears nowhere else, and 0 is an ordinary word (every sentence starts with it)."""
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(0, 23, (3, 7), generator=g)
    tgt = torch.randint(0, 19, (3, 6), generator=g)
    src[src == 5], tgt[tgt == 5] = 6, 6
    src[:, 0], tgt[:, 1] = 0, 0
    lengths = (7, 4, 2)
    for b, n in enumerate(lengths):
        src[b, n:] = 5
    return src, tgt, lengths


def test_default_masks_use_the_configured_pad_id():
    """With pad_id = 5 (and 0 a word), the default source mask hides exactly the 5s: the logits
    and the memory at real positions are those of each sentence run alone, with no padding, and
    they stay so when the source padding grows or the target padding changes content or length,
    through forward, encode + decode, and cached decoding."""
    torch.manual_seed(12)
    m = Transformer(small(pad_id=5)).double().eval()
    src, tgt, lengths = _batch_padded_with_5()
    out = m(src, tgt)                                                               # (3, 6, 19)
    memory = m.encode(src)                                                          # (3, 7, 16)
    for b, n in enumerate(lengths):
        alone = src[b:b + 1, :n]                                                    # no padding
        torch.testing.assert_close(out[b:b + 1], m(alone, tgt[b:b + 1]))
        torch.testing.assert_close(memory[b:b + 1, :n], m.encode(alone))
    more_padding = torch.cat([src, torch.full((3, 3), 5)], 1)
    torch.testing.assert_close(m(more_padding, tgt), out)
    src_mask = make_padding_mask(src, 5)
    torch.testing.assert_close(m(src, tgt, src_mask), out)
    torch.testing.assert_close(m.decode(tgt, memory, src_mask), out)
    cache = {}                                                  # one target token at a time
    steps = [m.decode(tgt[:, t:t + 1], memory, src_mask, cache=cache) for t in range(6)]
    torch.testing.assert_close(torch.cat(steps, 1), out)
    # right padding of the target (any ids, any length) changes nothing before it
    for pad in (torch.full((3, 2), 5), torch.tensor([[0, 7, 5], [3, 3, 3], [18, 0, 1]])):
        torch.testing.assert_close(m(src, torch.cat([tgt, pad], 1))[:, :6], out)
    torch.testing.assert_close(m(src, tgt[:, :4]), out[:, :4])


def test_an_explicit_src_mask_reaches_the_encoder_and_the_cross_attention():
    """A src_mask given to forward or encode + decode replaces the default one everywhere: hiding
    every source position after the fourth (three real tokens in rows 0 and 2) gives the logits
    (and, at the positions left visible, the memory) of the sources cut after four tokens."""
    torch.manual_seed(14)
    m = Transformer(small()).double().eval()
    src, tgt = batch(6)
    keep = torch.zeros(3, 7, dtype=torch.bool)
    keep[:, :4] = True
    src_mask = keep[:, None, None, :]                                           # (B, 1, 1, S)
    cut = src[:, :4]
    expected = m(cut, tgt)
    torch.testing.assert_close(m(src, tgt, src_mask), expected)
    memory = m.encode(src, src_mask)
    torch.testing.assert_close(memory[:, :4], m.encode(cut))
    torch.testing.assert_close(m.decode(tgt, memory, src_mask), expected)
