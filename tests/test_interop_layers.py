"""Chapter 12 (Part II section): from_torch for nn.TransformerEncoderLayer / DecoderLayer / Encoder
/ Decoder.

In eval mode and float64 the converted modules equal PyTorch's to 1e-6 (in practice ~1e-15) with
padding and causal masks, post-LN and pre-LN, batch_first either way.
"""
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from layer_helpers import randomise, real_tokens
from torch import nn

from transformer_lib.decoder import Decoder, DecoderLayer
from transformer_lib.encoder import Encoder, EncoderLayer
from transformer_lib.interop import from_torch, key_padding_mask_to_torch, mask_from_torch
from transformer_lib.masking import make_causal_mask

pytestmark = [pytest.mark.filterwarnings("ignore:.*nested tensors is in prototype stage"),
              pytest.mark.filterwarnings("ignore:enable_nested_tensor is True")]
F64 = torch.float64


def to_torch_layout(x, batch_first):
    return x if batch_first else x.transpose(0, 1)


@settings(max_examples=20, deadline=None)
@given(B=st.integers(1, 3), L=st.integers(1, 8), heads=st.sampled_from([1, 2, 4]),
       norm_first=st.booleans(), batch_first=st.booleans(), seed=st.integers(0, 2**16))
def test_encoder_layer(B, L, heads, norm_first, batch_first, seed):
    torch.manual_seed(seed)
    theirs = randomise(nn.TransformerEncoderLayer(16, heads, 24, dropout=0.2,
                                                  batch_first=batch_first,
                                                  norm_first=norm_first, layer_norm_eps=1e-6,
                                                  dtype=F64), seed).eval()
    ours = from_torch(theirs)
    assert isinstance(ours, EncoderLayer) and not ours.training and ours.norm_first == norm_first
    x = torch.randn(B, L, 16, dtype=F64)
    real = real_tokens(B, L, seed)
    with torch.no_grad():
        ref = to_torch_layout(theirs(to_torch_layout(x, batch_first), src_key_padding_mask=~real),
                              batch_first)
        out = ours(x, mask_from_torch(key_padding_mask=~real))
    torch.testing.assert_close(out, ref, atol=1e-6, rtol=0)
    torch.testing.assert_close(out, ref, atol=1e-12, rtol=1e-10)     # in fact: rounding error only


@settings(max_examples=20, deadline=None)
@given(B=st.integers(1, 3), L_t=st.integers(1, 7), L_s=st.integers(1, 7), norm_first=st.booleans(),
       batch_first=st.booleans(), seed=st.integers(0, 2**16))
def test_decoder_layer(B, L_t, L_s, norm_first, batch_first, seed):
    torch.manual_seed(seed)
    theirs = randomise(nn.TransformerDecoderLayer(16, 4, 24, batch_first=batch_first,
                                                  norm_first=norm_first, dtype=F64), seed).eval()
    ours = from_torch(theirs)
    assert isinstance(ours, DecoderLayer)
    y, m = torch.randn(B, L_t, 16, dtype=F64), torch.randn(B, L_s, 16, dtype=F64)
    tgt_real, src_real = real_tokens(B, L_t, seed), real_tokens(B, L_s, seed + 1)
    causal_t = ~make_causal_mask(L_t)                                   # PyTorch: True = masked out
    with torch.no_grad():
        ref = theirs(to_torch_layout(y, batch_first), to_torch_layout(m, batch_first),
                     tgt_mask=causal_t,
                     tgt_key_padding_mask=~tgt_real, memory_key_padding_mask=~src_real)
        out = ours(y, m, mask_from_torch(causal_t, ~tgt_real),
                   mask_from_torch(key_padding_mask=~src_real))
    torch.testing.assert_close(out, to_torch_layout(ref, batch_first), atol=1e-6, rtol=0)


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("with_norm", [False, True])
@pytest.mark.parametrize("nested", [False, True])
def test_encoder_stack(norm_first, with_norm, nested):
    torch.manual_seed(1)
    layer = nn.TransformerEncoderLayer(16, 2, 32, batch_first=True, norm_first=norm_first,
                                       dtype=F64)
    norm = nn.LayerNorm(16, dtype=F64) if with_norm else None
    theirs = randomise(nn.TransformerEncoder(layer, 3, norm=norm, enable_nested_tensor=nested),
                       1).eval()
    ours = from_torch(theirs)
    assert isinstance(ours,
                      Encoder) and len(ours.layers) == 3 and (ours.norm is not None) == with_norm
    x = torch.randn(3, 6, 16, dtype=F64)
    real = real_tokens(3, 6, 2)
    with torch.no_grad():
        ref = theirs(x, src_key_padding_mask=~real)
        out = ours(x, real[:, None, None, :])
    # PyTorch's nested-tensor fast path returns zeros at padded positions; compare at real ones.
    torch.testing.assert_close(out[real], ref[real], atol=1e-6, rtol=0)
    if not nested:
        torch.testing.assert_close(out, ref, atol=1e-6, rtol=0)


def test_encoder_stack_float32_agrees_to_float32_rounding():
    """Chapter 12's claim: in float32 the converted stack differs from PyTorch's by ~1e-7 (float32's
    epsilon)."""
    torch.manual_seed(4)
    theirs = (randomise(nn.TransformerEncoder(nn.TransformerEncoderLayer(32, 4, 64,
                                                                         batch_first=True), 3),
                        4).eval())
    ours = from_torch(theirs)
    assert ours.layers[0].self_attn.in_proj.weight.dtype == torch.float32
    x, real = torch.randn(3, 9, 32), real_tokens(3, 9, 4)
    with torch.no_grad():
        diff = (ours(x, real[:, None, None, :])
                - theirs(x, src_key_padding_mask=~real))[real].abs().max()
    assert diff < 1e-5            # float32 rounding level, five orders of magnitude above float64's


@pytest.mark.parametrize("norm_first", [False, True])
def test_decoder_stack_and_causal_generation(norm_first):
    torch.manual_seed(2)
    layer = nn.TransformerDecoderLayer(16, 4, 32, batch_first=True, norm_first=norm_first,
                                       dtype=F64)
    norm = nn.LayerNorm(16, dtype=F64) if norm_first else None
    theirs = randomise(nn.TransformerDecoder(layer, 2, norm=norm), 2)
    theirs.eval()
    ours = from_torch(theirs)
    assert isinstance(ours, Decoder)
    y, m = torch.randn(2, 5, 16, dtype=F64), torch.randn(2, 4, 16, dtype=F64)
    src_real = torch.tensor([[True] * 4, [True, True, False, False]])
    # 0 / -inf, additive
    float_causal = nn.Transformer.generate_square_subsequent_mask(5, dtype=F64)
    with torch.no_grad():
        ref = theirs(y, m, tgt_mask=float_causal, memory_key_padding_mask=~src_real,
                     tgt_is_causal=True)
        out = ours(y, m, mask_from_torch(float_causal), mask_from_torch(key_padding_mask=~src_real))
        default = ours(y, m, memory_mask=src_real[:, None, None, :])             # our None = causal
        cache = {}
        steps = torch.cat([ours(y[:, t:t + 1], m, memory_mask=src_real[:, None, None, :],
                                cache=cache)
                           for t in range(5)], 1)
    torch.testing.assert_close(out, ref, atol=1e-6, rtol=0)
    torch.testing.assert_close(default, ref, atol=1e-6, rtol=0)
    # PyTorch's decoder, now with a KV cache
    torch.testing.assert_close(steps, ref, atol=1e-6, rtol=0)


def test_pytorch_none_tgt_mask_means_no_mask_and_ours_means_causal():
    """The documented trap: to reproduce PyTorch's tgt_mask=None, pass an all-True mask to ours."""
    torch.manual_seed(3)
    theirs = randomise(nn.TransformerDecoderLayer(8, 2, 16, batch_first=True, dtype=F64), 3).eval()
    ours = from_torch(theirs)
    y, m = torch.randn(1, 4, 8, dtype=F64), torch.randn(1, 3, 8, dtype=F64)
    with torch.no_grad():
        ref = theirs(y, m)
        assert not torch.allclose(ours(y, m), ref)
        torch.testing.assert_close(ours(y, m, tgt_mask=torch.ones(4, 4, dtype=torch.bool)), ref)


def test_settings_dtype_and_mode_are_carried_over():
    theirs = nn.TransformerEncoderLayer(8, 2, 16, dropout=0.3, batch_first=True,
                                        layer_norm_eps=1e-3, norm_first=True)
    ours = from_torch(theirs)
    assert ours.training and ours.norm_first
    assert ours.residual_attn.dropout.p == ours.residual_ffn.dropout.p == 0.3
    assert ours.self_attn.dropout == 0.3 and ours.feed_forward.dropout.p == 0.3
    assert (ours.residual_attn.norm.eps == 1e-3 and ours.self_attn.in_proj.weight.dtype
            == torch.float32)
    dec = from_torch(nn.TransformerDecoder(nn.TransformerDecoderLayer(8, 2, 16, dtype=F64),
                                           2).eval())
    assert not dec.training and dec.layers[1].cross_attn.in_proj.weight.dtype == F64
    # the converted module owns copies: changing PyTorch's weights afterwards changes nothing of
    # ours
    with torch.no_grad():
        theirs.linear1.weight.zero_()
    assert ours.feed_forward.w_1.weight.abs().sum() > 0


@pytest.mark.parametrize("make,msg", [
    (lambda: nn.TransformerEncoderLayer(8, 2, 16, activation="gelu"), "activation='relu' only"),
    (lambda: nn.TransformerDecoderLayer(8, 2, 16, activation=torch.tanh), "activation='relu' only"),
    (lambda: nn.TransformerEncoderLayer(8, 2, 16, bias=False), "bias=False"),
    (lambda: nn.TransformerDecoder(nn.TransformerDecoderLayer(8, 2, 16, bias=False), 2),
     "bias=False"),
])
def test_unsupported_options_are_refused(make, msg):
    with pytest.raises(ValueError, match=msg):
        from_torch(make())


def test_masks_helper_round_trip_for_layers():
    real = torch.tensor([[True, True, False]])
    torch.testing.assert_close(key_padding_mask_to_torch(real[:, None, None, :]), ~real)
    assert torch.equal(mask_from_torch(~make_causal_mask(3), ~real),
                       make_causal_mask(3) & real[:, None, None, :])
