"""Chapter 09: EncoderLayer and Encoder, against the equations and against PyTorch's own modules."""
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from layer_helpers import randomise, real_tokens
from torch import nn

from transformer_lib.encoder import Encoder, EncoderLayer
from transformer_lib.layer_norm import LayerNorm

# PyTorch's parameter names -> ours (chapter 09's table). Written out here, independently of
# interop.
RENAME = {"self_attn.in_proj_weight": "self_attn.in_proj.weight",
          "self_attn.in_proj_bias": "self_attn.in_proj.bias",
          "linear1.weight": "feed_forward.w_1.weight", "linear1.bias": "feed_forward.w_1.bias",
          "linear2.weight": "feed_forward.w_2.weight", "linear2.bias": "feed_forward.w_2.bias",
          "norm1.weight": "residual_attn.norm.weight", "norm1.bias": "residual_attn.norm.bias",
          "norm2.weight": "residual_ffn.norm.weight", "norm2.bias": "residual_ffn.norm.bias"}


def rename(state, prefix_map=()):
    out = {}
    for k, v in state.items():
        for a, b in prefix_map:
            if k.startswith(a):
                k = b + k[len(a):]
        head, _, tail = k.rpartition("layers.")
        if head or k.startswith("layers."):
            idx, _, rest = tail.partition(".")
            k = f"{head}layers.{idx}.{RENAME.get(rest, rest)}"
        else:
            k = RENAME.get(k, k)
        out[k] = v
    return out


def assert_matches_pytorch(ours, theirs, x, real):
    """Load theirs' weights into ours (renamed), run both on x with padding `real` (B, L),
    compare."""
    ours.load_state_dict(rename(theirs.state_dict()))
    with torch.no_grad():
        ref = theirs(x, src_key_padding_mask=~real)
    torch.testing.assert_close(ours(x, real[:, None, None, :]), ref, atol=1e-10, rtol=1e-8)






@settings(max_examples=20, deadline=None)
@given(B=st.integers(1, 3), L=st.integers(1, 8), heads=st.sampled_from([1, 2, 4]),
       norm_first=st.booleans(), seed=st.integers(0, 2**16))
def test_layer_matches_pytorch(B, L, heads, norm_first, seed):
    d, d_ff = 16, 24
    torch.manual_seed(seed)
    theirs = randomise(nn.TransformerEncoderLayer(d, heads, d_ff, batch_first=True,
                                                  norm_first=norm_first,
                                                  dtype=torch.float64), seed=seed).eval()
    ours = EncoderLayer(d, heads, d_ff, norm_first=norm_first).double().eval()
    assert_matches_pytorch(ours, theirs, torch.randn(B, L, d, dtype=torch.float64),
                           real_tokens(B, L, seed))


@pytest.mark.parametrize("norm_first", [False, True])
def test_encoder_matches_pytorch_stack(norm_first):
    torch.manual_seed(1)
    d, heads, d_ff, n = 16, 4, 32, 3
    layer = nn.TransformerEncoderLayer(d, heads, d_ff, batch_first=True, norm_first=norm_first,
                                       dtype=torch.float64)
    final = nn.LayerNorm(d, dtype=torch.float64) if norm_first else None
    theirs = randomise(nn.TransformerEncoder(layer, n, norm=final,
                                             enable_nested_tensor=False)).eval()
    ours = Encoder(n, d, heads, d_ff, norm_first=norm_first).double().eval()
    assert_matches_pytorch(ours, theirs, torch.randn(2, 6, d, dtype=torch.float64),
                           real_tokens(2, 6, 3))


@pytest.mark.parametrize("norm_first", [False, True])
def test_layer_matches_equations(norm_first):
    """eqs. encoder-attn / encoder-ffn (post-LN) and their pre-LN counterparts, with
    F.layer_norm."""
    torch.manual_seed(2)
    layer = randomise(EncoderLayer(12, 3, 20, norm_first=norm_first).double()).eval()
    x = torch.randn(2, 5, 12, dtype=torch.float64)
    mask = real_tokens(2, 5, 4)[:, None, None, :]
    n1, n2 = layer.residual_attn.norm, layer.residual_ffn.norm
    ln1 = lambda t: F.layer_norm(t, (12,), n1.weight, n1.bias)  # noqa: E731
    ln2 = lambda t: F.layer_norm(t, (12,), n2.weight, n2.bias)  # noqa: E731
    a = layer.self_attn
    if norm_first:
        z = x + a(ln1(x), ln1(x), ln1(x), mask)
        expected = z + layer.feed_forward(ln2(z))
    else:
        z = ln1(x + a(x, x, x, mask))
        expected = ln2(z + layer.feed_forward(z))
    torch.testing.assert_close(layer(x, mask), expected)


@settings(max_examples=20, deadline=None)
@given(B=st.integers(1, 3), L=st.integers(2, 8), norm_first=st.booleans(),
       seed=st.integers(0, 2**16))
def test_padding_is_invisible(B, L, norm_first, seed):
    torch.manual_seed(seed)
    enc = Encoder(2, 8, 2, 16, norm_first=norm_first).double().eval()
    real = real_tokens(B, L, seed)
    x = torch.randn(B, L, 8, dtype=torch.float64)
    y = x.clone()
    y[~real] = 100 * torch.randn_like(y[~real])
    mask = real[:, None, None, :]
    torch.testing.assert_close(enc(x, mask)[real], enc(y, mask)[real])


def test_encoder_is_permutation_equivariant():
    torch.manual_seed(3)
    enc = Encoder(2, 8, 2, 16).double().eval()
    x = torch.randn(2, 7, 8, dtype=torch.float64)
    perm = torch.randperm(7)
    torch.testing.assert_close(enc(x[:, perm]), enc(x)[:, perm])


@pytest.mark.parametrize("norm_first", [False, True])
def test_is_causal_equals_the_causal_mask(norm_first):
    """is_causal=True (the decoder-only block of exercise 3) is the same function as a causal mask
    tensor."""
    from transformer_lib.masking import make_causal_mask
    torch.manual_seed(4)
    enc = Encoder(2, 8, 2, 16, norm_first=norm_first).double().eval()
    x = torch.randn(3, 6, 8, dtype=torch.float64)
    by_name = enc(x, is_causal=True)
    torch.testing.assert_close(by_name, enc(x, make_causal_mask(6)))
    torch.testing.assert_close(enc.layers[0](x, is_causal=True),
                               enc.layers[0](x, make_causal_mask(6)))
    assert not torch.allclose(by_name, enc(x))                  # the mask matters
    # the future is invisible
    torch.testing.assert_close(enc(x[:, :4], is_causal=True), by_name[:, :4])


def test_final_norm():
    assert Encoder(2, 8, 2, 16).norm is None
    assert isinstance(Encoder(2, 8, 2, 16, norm_first=True).norm, LayerNorm)
    assert isinstance(Encoder(2, 8, 2, 16, final_norm=True).norm, LayerNorm)
    assert Encoder(2, 8, 2, 16, norm_first=True, final_norm=False).norm is None
    assert len(Encoder(5, 8, 2, 16).layers) == 5


def test_extra_final_norm_on_post_ln_is_identity_only_at_init():
    """Chapter 09: nn.Transformer's extra LayerNorm after a post-LN stack is (nearly) the identity
    while the last layer's gamma = 1, beta = 0, and a different function once they are trained."""
    torch.manual_seed(5)
    plain = Encoder(2, 8, 2, 16, dropout=0.0).double().eval()
    extra = Encoder(2, 8, 2, 16, dropout=0.0, final_norm=True).double().eval()
    extra.load_state_dict(plain.state_dict(), strict=False)
    x = torch.randn(2, 5, 8, dtype=torch.float64)
    torch.testing.assert_close(extra(x), plain(x), atol=1e-4, rtol=0)   # eps only: var = 1 - O(eps)
    last = plain.layers[-1].residual_ffn.norm
    with torch.no_grad():
        last.weight.uniform_(0.5, 1.5)
        last.bias.normal_(0.0, 0.5)
    extra.load_state_dict(plain.state_dict(), strict=False)
    out, renormed = plain(x), extra(x)
    assert (out - renormed).abs().max() > 0.1
    # extra.norm is gamma = 1, beta = 0
    torch.testing.assert_close(renormed, F.layer_norm(out, (8,)))


def test_dropout_placement():
    layer = EncoderLayer(8, 2, 16, dropout=0.3, attn_dropout=0.2, ffn_dropout=0.1)
    assert layer.residual_attn.dropout.p == layer.residual_ffn.dropout.p == 0.3
    assert layer.self_attn.dropout == 0.2 and layer.feed_forward.dropout.p == 0.1
    default = EncoderLayer(8, 2, 16)  # the paper: residual dropout 0.1 only
    assert default.residual_attn.dropout.p == 0.1 and default.self_attn.dropout == 0.0
    assert default.feed_forward.dropout.p == 0.0
    x = torch.randn(2, 4, 8)
    torch.testing.assert_close(default.eval()(x), default.eval()(x))
    assert not torch.allclose(layer.train()(x), layer.train()(x))


def test_gradcheck_whole_layer():
    torch.manual_seed(4)
    for norm_first in (False, True):
        layer = randomise(EncoderLayer(8, 2, 12, dropout=0.0, norm_first=norm_first).double())
        x = torch.randn(2, 3, 8, dtype=torch.float64, requires_grad=True)
        mask = torch.tensor([[True, True, True], [True, True, False]])[:, None, None, :]
        assert torch.autograd.gradcheck(lambda t, layer=layer, mask=mask: layer(t, mask), (x,))


def test_bad_input_is_a_clear_error():
    layer = EncoderLayer(8, 2, 16)
    with pytest.raises(ValueError,
                       match=r"x must be a floating-point tensor of shape \(B, L, d_model=8\)"):
        layer(torch.randn(2, 5, 6))
    with pytest.raises(ValueError,
                       match=r"x must be a floating-point tensor of shape \(B, L, d_model=8\)"):
        Encoder(1, 8, 2, 16)(torch.randn(5, 8))
    with pytest.raises(ValueError, match=r"mask must be .*broadcastable to \(B, h, L_q, L_k\)"):
        layer(torch.randn(2, 5, 8), torch.ones(2, 1, 1, 6, dtype=torch.bool))
    with pytest.raises(TypeError, match=r"mask must be a boolean tensor"):
        layer(torch.randn(2, 5, 8), torch.ones(2, 1, 1, 5))


def test_float64_input_to_a_float32_encoder_names_the_argument():
    x = torch.randn(2, 5, 8, dtype=torch.float64)
    with pytest.raises(TypeError, match=r"x is a torch.float64 tensor but the module's parameters "
                                        r"are torch.float32"):
        Encoder(1, 8, 2, 16)(x)
    with pytest.raises(TypeError, match=r"x is a torch.float64 tensor"):
        EncoderLayer(8, 2, 16)(x)
