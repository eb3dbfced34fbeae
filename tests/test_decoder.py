"""Chapter 10: DecoderLayer and Decoder: causality, PyTorch equality, the key/value cache."""
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from layer_helpers import randomise, real_tokens
from torch import nn

from transformer_lib.decoder import Decoder, DecoderLayer, reorder_cache
from transformer_lib.layer_norm import LayerNorm
from transformer_lib.masking import make_causal_mask

RENAME = {"multihead_attn.": "cross_attn.", "linear1.": "feed_forward.w_1.",
          "linear2.": "feed_forward.w_2.",
          "norm1.": "residual_self.norm.", "norm2.": "residual_cross.norm.",
          "norm3.": "residual_ffn.norm.",
          "in_proj_weight": "in_proj.weight", "in_proj_bias": "in_proj.bias"}


def rename(state):
    out = {}
    for k, v in state.items():
        for a, b in RENAME.items():
            k = k.replace(a, b)
        out[k] = v
    return out






@settings(max_examples=20, deadline=None)
@given(B=st.integers(1, 3), L_t=st.integers(1, 7), L_s=st.integers(1, 7), norm_first=st.booleans(),
       seed=st.integers(0, 2**16))
def test_layer_matches_pytorch(B, L_t, L_s, norm_first, seed):
    d, heads, d_ff = 16, 4, 24
    torch.manual_seed(seed)
    theirs = randomise(nn.TransformerDecoderLayer(d, heads, d_ff, batch_first=True,
                                                  norm_first=norm_first,
                                                  dtype=torch.float64), seed).eval()
    ours = DecoderLayer(d, heads, d_ff, norm_first=norm_first).double().eval()
    ours.load_state_dict(rename(theirs.state_dict()))
    y = torch.randn(B, L_t, d, dtype=torch.float64)
    memory = torch.randn(B, L_s, d, dtype=torch.float64)
    tgt_real, src_real = real_tokens(B, L_t, seed), real_tokens(B, L_s, seed + 1)
    causal = make_causal_mask(L_t)
    with torch.no_grad():
        ref = theirs(y, memory, tgt_mask=~causal, tgt_key_padding_mask=~tgt_real,
                     memory_key_padding_mask=~src_real)
    out = ours(y, memory, tgt_real[:, None, None, :] & causal, src_real[:, None, None, :])
    torch.testing.assert_close(out, ref, atol=1e-10, rtol=1e-8)


@pytest.mark.parametrize("norm_first", [False, True])
def test_decoder_matches_pytorch_stack(norm_first):
    torch.manual_seed(1)
    d, heads, d_ff, n = 16, 2, 32, 3
    layer = nn.TransformerDecoderLayer(d, heads, d_ff, batch_first=True, norm_first=norm_first,
                                       dtype=torch.float64)
    final = nn.LayerNorm(d, dtype=torch.float64) if norm_first else None
    theirs = randomise(nn.TransformerDecoder(layer, n, norm=final)).eval()
    ours = Decoder(n, d, heads, d_ff, norm_first=norm_first).double().eval()
    ours.load_state_dict(rename(theirs.state_dict()))
    y, memory = torch.randn(2, 5, d, dtype=torch.float64), torch.randn(2, 4, d, dtype=torch.float64)
    src_real = torch.tensor([[True] * 4, [True, True, False, False]])
    with torch.no_grad():
        ref = theirs(y, memory,
                     tgt_mask=nn.Transformer.generate_square_subsequent_mask(5,
                                                                             dtype=torch.float64),
                     memory_key_padding_mask=~src_real)
    torch.testing.assert_close(ours(y, memory, memory_mask=src_real[:, None, None, :]), ref,
                               atol=1e-10, rtol=1e-8)


@pytest.mark.parametrize("norm_first", [False, True])
def test_layer_matches_equations(norm_first):
    torch.manual_seed(2)
    layer = randomise(DecoderLayer(12, 3, 20, norm_first=norm_first).double()).eval()
    y, m = torch.randn(2, 4, 12, dtype=torch.float64), torch.randn(2, 3, 12, dtype=torch.float64)
    causal = make_causal_mask(4)
    ln = [lambda t, r=r: F.layer_norm(t, (12,), r.norm.weight, r.norm.bias)
          for r in (layer.residual_self, layer.residual_cross, layer.residual_ffn)]
    sa, ca, ff = layer.self_attn, layer.cross_attn, layer.feed_forward
    if norm_first:
        z1 = y + sa(ln[0](y), ln[0](y), ln[0](y), causal)
        z2 = z1 + ca(ln[1](z1), m, m)
        expected = z2 + ff(ln[2](z2))
    else:
        z1 = ln[0](y + sa(y, y, y, causal))               # eq. decoder-self
        z2 = ln[1](z1 + ca(z1, m, m))                     # eq. decoder-cross
        expected = ln[2](z2 + ff(z2))                     # eq. decoder-ffn
    torch.testing.assert_close(layer(y, m), expected)    # tgt_mask=None is causal


@settings(max_examples=20, deadline=None)
@given(T=st.integers(2, 9), t=st.integers(0, 8), norm_first=st.booleans(),
       seed=st.integers(0, 2**16))
def test_future_is_invisible(T, t, norm_first, seed):
    """Outputs at positions <= t are unchanged when the target inputs after t change (and later ones
    do change)."""
    t = t % (T - 1)
    torch.manual_seed(seed)
    dec = randomise(Decoder(2, 8, 2, 16, norm_first=norm_first).double(), seed).eval()
    y, memory = torch.randn(2, T, 8, dtype=torch.float64), torch.randn(2, 5, 8, dtype=torch.float64)
    y2 = y.clone()
    y2[:, t + 1:] = torch.randn_like(y2[:, t + 1:])
    out, out2 = dec(y, memory), dec(y2, memory)
    torch.testing.assert_close(out[:, :t + 1], out2[:, :t + 1], atol=1e-12, rtol=0)
    assert not torch.allclose(out[:, t + 1:], out2[:, t + 1:])


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("chunks", [[1] * 7, [3, 1, 1, 2], [7]])
def test_cache_matches_full_pass(norm_first, chunks):
    torch.manual_seed(3)
    dec = randomise(Decoder(3, 16, 4, 32, norm_first=norm_first).double()).eval()
    y, memory = torch.randn(2, 7, 16, dtype=torch.float64), torch.randn(2, 5, 16,
                                                                        dtype=torch.float64)
    src_mask = torch.tensor([[True] * 5, [True] * 3 + [False] * 2])[:, None, None, :]
    full = dec(y, memory, memory_mask=src_mask)
    cache, outs, start = {}, [], 0
    for n in chunks:
        outs.append(dec(y[:, start:start + n], memory, memory_mask=src_mask, cache=cache))
        start += n
    torch.testing.assert_close(torch.cat(outs, 1), full, atol=1e-12, rtol=1e-10)
    assert set(cache) == {"layer_0", "layer_1", "layer_2"}
    assert cache["layer_2"]["self_attn"]["k"].shape == (2, 4, 7, 4)
    assert cache["layer_2"]["cross_attn"]["k"].shape == (2, 4, 5, 4)


def test_cached_step_can_omit_memory_once_cross_cache_is_filled():
    torch.manual_seed(4)
    dec = Decoder(2, 8, 2, 16).eval()
    y, memory = torch.randn(1, 3, 8), torch.randn(1, 4, 8)
    cache = {}
    a = dec(y[:, :2], memory, cache=cache)
    b = dec(y[:, 2:], None, cache=cache)
    torch.testing.assert_close(torch.cat([a, b], 1), dec(y, memory))
    with pytest.raises(ValueError, match="memory is required"):
        dec(y, None)


def test_reorder_cache():
    torch.manual_seed(5)
    dec = Decoder(2, 8, 2, 16).eval()
    y, memory = torch.randn(3, 4, 8), torch.randn(3, 5, 8)
    cache = {"offset": 4}
    dec(y, memory, cache=cache)
    index = torch.tensor([2, 2, 0])
    before = cache["layer_1"]["self_attn"]["k"].clone()
    reorder_cache(cache, index)
    torch.testing.assert_close(cache["layer_1"]["self_attn"]["k"], before[index])
    assert cache["offset"] == 4
    # The reordered cache continues exactly as a cache built from the reordered batch.
    step = torch.randn(3, 1, 8)
    cache_ref = {}
    dec(y[index], memory[index], cache=cache_ref)
    torch.testing.assert_close(dec(step, memory[index], cache=cache),
                               dec(step, memory[index], cache=cache_ref))


def test_final_norm_and_cross_attention_reads_memory():
    assert (Decoder(2, 8, 2, 16).norm is None
            and isinstance(Decoder(2, 8, 2, 16, norm_first=True).norm, LayerNorm))
    dec = Decoder(2, 8, 2, 16).eval()
    y = torch.randn(1, 3, 8)
    assert not torch.allclose(dec(y, torch.randn(1, 4, 8)), dec(y, torch.randn(1, 4, 8)))


def test_gradcheck_whole_layer():
    torch.manual_seed(6)
    layer = randomise(DecoderLayer(8, 2, 12, dropout=0.0).double())
    y = torch.randn(2, 3, 8, dtype=torch.float64, requires_grad=True)
    m = torch.randn(2, 4, 8, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda a, b: layer(a, b), (y, m))


def test_bad_input_is_a_clear_error():
    layer = DecoderLayer(8, 2, 16)
    y, m = torch.randn(2, 3, 8), torch.randn(2, 4, 8)
    with pytest.raises(ValueError,
                       match=r"x must be a floating-point tensor of shape \(B, L, d_model=8\)"):
        layer(torch.randn(2, 3, 7), m)
    with pytest.raises(ValueError, match=r"memory must be a floating-point tensor of shape \(B, L, "
                                         r"d_model=8\)"):
        layer(y, torch.randn(2, 4, 9))
    with pytest.raises(ValueError, match=r"mask must be .*broadcastable to \(B, h, L_q, L_k\)"):
        layer(y, m, tgt_mask=torch.ones(4, 4, dtype=torch.bool))
    with pytest.raises(ValueError, match=r"mask must be .*broadcastable to \(B, h, L_q, L_k\)"):
        layer(y, m, memory_mask=torch.ones(2, 1, 1, 3, dtype=torch.bool))
    with pytest.raises(ValueError, match=r"key must have shape"):
        layer(y, torch.randn(3, 4, 8))


def test_float64_input_to_a_float32_decoder_names_the_argument():
    y, m = torch.randn(2, 3, 8), torch.randn(2, 4, 8)
    with pytest.raises(TypeError, match=r"x is a torch.float64 tensor but the module's parameters "
                                        r"are torch.float32"):
        Decoder(1, 8, 2, 16)(y.double(), m)
    with pytest.raises(TypeError, match=r"memory is a torch.float64 tensor"):
        DecoderLayer(8, 2, 16)(y, m.double())
