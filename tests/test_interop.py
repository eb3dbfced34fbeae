"""Chapter 12: from_torch (nn.MultiheadAttention -> MultiHeadAttention) and the mask-convention
converters."""
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from layer_helpers import torch_mha
from torch import nn

import transformer_lib
from transformer_lib.interop import (
    from_torch,
    key_padding_mask_to_torch,
    mask_from_torch,
    mask_to_torch,
    register_converter,
    supported_types,
)
from transformer_lib.masking import make_causal_mask, make_padding_mask
from transformer_lib.multi_head_attention import MultiHeadAttention


@settings(max_examples=25, deadline=None)
@given(dh=st.sampled_from([(8, 1), (8, 2), (12, 3), (16, 4)]), B=st.integers(1, 3),
       L=st.integers(1, 7), L_src=st.integers(1, 7), bias=st.booleans(), seed=st.integers(0, 2**16))
def test_from_torch_self_and_cross_attention_with_masks(dh, B, L, L_src, bias, seed):
    d_model, h = dh
    ref = torch_mha(d_model, h, bias, seed)
    ours = from_torch(ref)
    assert isinstance(ours, MultiHeadAttention) and not ours.training
    assert ours.in_proj.weight.dtype == torch.float64 and (ours.in_proj.bias is None) == (not bias)
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(B, L, d_model, generator=g, dtype=torch.float64)
    mem = torch.randn(B, L_src, d_model, generator=g, dtype=torch.float64)
    tgt_len = torch.randint(1, L + 1, (B,), generator=g)
    src_len = torch.randint(1, L_src + 1, (B,), generator=g)
    tgt_pad = make_padding_mask((torch.arange(L) < tgt_len[:, None]).long(), 0)       # (B, 1, 1, L)
    # (B, 1, 1, L_src)
    src_pad = make_padding_mask((torch.arange(L_src) < src_len[:, None]).long(), 0)
    causal = make_causal_mask(L)
    with torch.no_grad():
        cases = [
            # (ours, PyTorch) for: self, self + padding, self + causal, self + padding & causal,
            # cross + padding
            (ours(x, x, x), ref(x, x, x, need_weights=False)[0]),
            (ours(x, x, x, tgt_pad),
             ref(x, x, x, key_padding_mask=key_padding_mask_to_torch(tgt_pad),
                                         need_weights=False)[0]),
            (ours(x, x, x, causal),
             ref(x, x, x, attn_mask=mask_to_torch(causal), need_weights=False)[0]),
            (ours(x, x, x, tgt_pad & causal),
             ref(x, x, x, attn_mask=mask_to_torch(tgt_pad & causal, h),
                                                  need_weights=False)[0]),
            (ours(x, mem, mem, src_pad),
             ref(x, mem, mem, key_padding_mask=key_padding_mask_to_torch(src_pad),
                                             need_weights=False)[0]),
        ]
    for a, b in cases:
        torch.testing.assert_close(a, b, atol=1e-6, rtol=0)


def test_from_torch_keeps_mode_device_dtype_and_dropout():
    ref = nn.MultiheadAttention(8, 2, dropout=0.25, batch_first=True)
    ours = from_torch(ref)
    assert ours.training and ours.dropout == 0.25 and ours.in_proj.weight.dtype == torch.float32
    # a copy, not shared storage
    assert ours.in_proj.weight.data_ptr() != ref.in_proj_weight.data_ptr()
    torch.testing.assert_close(ours.in_proj.weight, ref.in_proj_weight)


def test_from_torch_is_reexported_and_dispatches_on_subclasses():
    assert transformer_lib.from_torch is from_torch
    assert nn.MultiheadAttention in supported_types()

    class MyMHA(nn.MultiheadAttention):
        pass

    assert isinstance(from_torch(MyMHA(8, 2, batch_first=True)), MultiHeadAttention)


def test_register_converter_adds_a_case():
    class Marker(nn.Module):
        pass

    @register_converter(Marker)
    def _convert(m):
        return nn.Identity()

    try:
        assert isinstance(from_torch(Marker()), nn.Identity)
    finally:
        from transformer_lib import interop
        interop._CONVERTERS.pop(Marker)


@pytest.mark.parametrize("bad,err,match", [
    (nn.Linear(4, 4), TypeError,
     r"from_torch cannot convert Linear; supported: MultiheadAttention"),
    (nn.MultiheadAttention(8, 2, kdim=4, vdim=4), ValueError, r"kdim = vdim = embed_dim"),
    (nn.MultiheadAttention(8, 2, add_bias_kv=True), ValueError, r"add_bias_kv"),
    (nn.MultiheadAttention(8, 2, add_zero_attn=True), ValueError, r"add_zero_attn"),
])
def test_unsupported(bad, err, match):
    with pytest.raises(err, match=match):
        from_torch(bad)


@settings(max_examples=25, deadline=None)
@given(B=st.integers(1, 3), h=st.integers(1, 3), L_q=st.integers(1, 5), L_k=st.integers(1, 5),
       seed=st.integers(0, 2**16))
def test_mask_converters_round_trip(B, h, L_q, L_k, seed):
    g = torch.Generator().manual_seed(seed)
    ours = torch.rand(B, h, L_q, L_k, generator=g) < 0.5
    theirs = mask_to_torch(ours, h)
    assert theirs.shape == (B * h, L_q, L_k)
    assert torch.equal(mask_from_torch(attn_mask=theirs, n_heads=h), ours)
    two_d = torch.rand(L_q, L_k, generator=g) < 0.5
    assert torch.equal(mask_from_torch(attn_mask=mask_to_torch(two_d)), two_d)
    pad = torch.rand(B, 1, 1, L_k, generator=g) < 0.5
    assert torch.equal(mask_from_torch(key_padding_mask=key_padding_mask_to_torch(pad)), pad)
    both = mask_from_torch(attn_mask=~two_d, key_padding_mask=~pad[:, 0, 0])
    assert torch.equal(both, two_d & pad)                          # eq. (mask-conversion)
    # a (B, 1, L_q, L_k) mask is repeated for every head
    assert torch.equal(mask_from_torch(mask_to_torch(ours[:, :1], h), n_heads=h),
                       ours[:, :1].expand(B, h, L_q, L_k))


def test_float_masks():
    additive = torch.zeros(3, 3).masked_fill(~make_causal_mask(3), float("-inf"))
    assert torch.equal(mask_from_torch(attn_mask=additive), make_causal_mask(3))
    with pytest.raises(ValueError,
                       match=r"attn_mask is a float mask with values other than 0 and -inf"):
        mask_from_torch(attn_mask=torch.full((3, 3), -1.0))


def test_mask_converter_errors():
    with pytest.raises(ValueError, match=r"needs n_heads"):
        mask_from_torch(attn_mask=torch.zeros(6, 3, 3, dtype=torch.bool))
    with pytest.raises(ValueError, match=r"key_padding_mask must have shape \(B, L_k\)"):
        mask_from_torch(key_padding_mask=torch.zeros(2, 1, 3, dtype=torch.bool))
    with pytest.raises(TypeError, match=r"mask must be a boolean tensor of shape \(L_q, L_k\) or "
                                        r"\(B, h, L_q, L_k\)"):
        mask_to_torch(torch.zeros(3, 3))
    with pytest.raises(ValueError, match=r"needs n_heads"):
        mask_to_torch(torch.zeros(2, 3, 4, 4, dtype=torch.bool), n_heads=2)
    with pytest.raises(TypeError, match=r"padding mask of shape \(B, 1, 1, L_k\)"):
        key_padding_mask_to_torch(torch.zeros(2, 1, 3, 3, dtype=torch.bool))


@pytest.mark.parametrize("path", ["need_weights", "fast_path", "sdpa"])
def test_fully_masked_rows_nan_in_pytorch_zero_in_ours(path):
    """The one documented difference: for a query with no key, ours returns 0 on both of its paths;
    PyTorch's explicit softmax (need_weights=True) gives NaN, its other paths NaN or 0 depending on
    the version."""
    ref = torch_mha(8, 2, True, 0)
    ours = from_torch(ref)
    x = torch.randn(1, 4, 8, dtype=torch.float64)
    # rows 0, 1 empty
    mask = make_padding_mask(torch.tensor([[0, 0, 3, 4]]), 0) & make_causal_mask(4)
    k = x if path == "fast_path" else x.clone()          # the fast path needs query is key is value
    ours.need_weights = path == "need_weights"                 # our explicit path, or our SDPA path
    with torch.no_grad():
        a = ours(x, k, k, mask)
        b, _ = ref(x, k, k, attn_mask=mask_to_torch(mask, 2), need_weights=path == "need_weights")
    assert torch.isfinite(a).all()
    torch.testing.assert_close(a[:, :2], ours.out_proj.bias.expand(1, 2, 8))    # attention output 0
    torch.testing.assert_close(a[:, 2:], b[:, 2:], atol=1e-6, rtol=0)
    if path == "need_weights":
        assert torch.isnan(b[:, :2]).all()                          # softmax of a row of -inf: 0/0
        assert torch.equal(ours.attn_weights[..., :2, :],
                           torch.zeros(1, 2, 2, 4, dtype=torch.float64))
