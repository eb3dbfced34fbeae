"""Chapter 02: scaled dot-product attention, the 1/sqrt(d_k) scale, AttentionHead (masks: chapter
03)."""
import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from transformer_lib.attention import AttentionHead, check_mask, scaled_dot_product_attention

dims = st.tuples(st.integers(1, 3), st.integers(1, 3), st.integers(1, 7), st.integers(1, 7),
                 st.integers(1, 6), st.integers(1, 6))   # B, h, L_q, L_k, d_k, d_v


def _qkv(B, h, L_q, L_k, d_k, d_v, g):
    return (torch.randn(B, h, L_q, d_k, generator=g, dtype=torch.float64),
            torch.randn(B, h, L_k, d_k, generator=g, dtype=torch.float64),
            torch.randn(B, h, L_k, d_v, generator=g, dtype=torch.float64))


def _random_mask(shape, g, p=0.6, keep_one=True):
    mask = torch.rand(shape, generator=g) < p
    if keep_one:                     # every query sees at least one key (F.sdpa/nn.MHA comparisons)
        mask[..., 0] = True
    return mask


@settings(max_examples=25, deadline=None)
@given(d=dims, seed=st.integers(0, 2**16), masked=st.booleans())
def test_matches_pytorch_float64(d, seed, masked):
    g = torch.Generator().manual_seed(seed)
    B, h, L_q, L_k, d_k, d_v = d
    q, k, v = _qkv(*d, g)
    mask = _random_mask((B, 1, L_q, L_k), g) if masked else None
    out, w = scaled_dot_product_attention(q, k, v, mask)
    assert out.shape == (B, h, L_q, d_v) and w.shape == (B, h, L_q, L_k)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, attn_mask=mask),
                               atol=1e-12, rtol=0)
    # the weights themselves, against the textbook formula
    s = q @ k.transpose(-2, -1) / math.sqrt(d_k)
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    torch.testing.assert_close(w, torch.softmax(s, -1), atol=1e-12, rtol=0)


@settings(max_examples=25, deadline=None)
@given(d=dims, seed=st.integers(0, 2**16))
def test_rows_sum_to_one_and_masked_weights_are_exactly_zero(d, seed):
    g = torch.Generator().manual_seed(seed)
    B, h, L_q, L_k, _, _ = d
    q, k, v = _qkv(*d, g)
    mask = _random_mask((B, h, L_q, L_k), g, keep_one=False)
    out, w = scaled_dot_product_attention(q, k, v, mask)
    assert torch.all(w[~mask] == 0)
    has_key = mask.any(-1)
    torch.testing.assert_close(w.sum(-1), has_key.to(w.dtype))            # 1, or 0 for an empty row
    # empty rows: output 0, never NaN
    assert torch.all(out[~has_key] == 0) and torch.isfinite(out).all()


def test_fully_masked_rows_give_zero_with_finite_gradients():
    g = torch.Generator().manual_seed(0)
    q, k, v = (t.requires_grad_() for t in _qkv(1, 2, 4, 5, 3, 3, g))
    mask = torch.ones(4, 5, dtype=torch.bool)
    mask[1] = False
    out, w = scaled_dot_product_attention(q, k, v, mask)
    assert torch.equal(out[:, :, 1], torch.zeros(1, 2, 3, dtype=torch.float64))
    assert torch.equal(w[:, :, 1], torch.zeros(1, 2, 5, dtype=torch.float64))
    out.sum().backward()
    for t in (q, k, v):
        assert torch.isfinite(t.grad).all()
    # nothing flows back
    assert torch.equal(q.grad[:, :, 1], torch.zeros(1, 2, 3, dtype=torch.float64))


def test_gradcheck_float64_with_and_without_mask():
    g = torch.Generator().manual_seed(1)
    q, k, v = (t.requires_grad_() for t in _qkv(1, 2, 3, 4, 3, 2, g))
    assert torch.autograd.gradcheck(lambda *t: scaled_dot_product_attention(*t)[0], (q, k, v))
    mask = torch.tensor([[True, False, True, True], [False, False, False, False],
                         [True, True, False, False]])
    assert torch.autograd.gradcheck(lambda *t: scaled_dot_product_attention(*t, mask=mask)[0],
                                    (q, k, v))
    assert torch.autograd.gradcheck(lambda *t: scaled_dot_product_attention(*t, mask=mask)[1],
                                    (q, k, v))


@settings(max_examples=25, deadline=None)
@given(L=st.integers(1, 8), d=st.integers(1, 6), seed=st.integers(0, 2**16))
def test_permutation_equivariance(L, d, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(2, L, d, generator=g, dtype=torch.float64)
    perm = torch.randperm(L, generator=g)
    y, w = scaled_dot_product_attention(x, x, x)
    y_p, w_p = scaled_dot_product_attention(x[:, perm], x[:, perm], x[:, perm])
    torch.testing.assert_close(y_p, y[:, perm])
    torch.testing.assert_close(w_p, w[:, perm][:, :, perm])


def test_matches_explicit_loops():
    """Eq. (scaled-dot-product-attention) entry by entry."""
    g = torch.Generator().manual_seed(2)
    q, k, v = (torch.randn(3, 4, generator=g), torch.randn(5, 4, generator=g),
               torch.randn(5, 2, generator=g))
    out, _ = scaled_dot_product_attention(q, k, v)
    for i in range(3):
        s = torch.stack([q[i] @ k[j] / 2.0 for j in range(5)])
        a = torch.exp(s) / torch.exp(s).sum()
        torch.testing.assert_close(out[i], sum(a[j] * v[j] for j in range(5)))


def test_scale_argument():
    g = torch.Generator().manual_seed(3)
    q, k, v = _qkv(1, 1, 3, 4, 5, 2, g)
    out, _ = scaled_dot_product_attention(q, k, v, scale=1.0)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, scale=1.0))


def test_dropout_on_weights():
    g = torch.Generator().manual_seed(4)
    q, k, v = _qkv(2, 2, 6, 6, 4, 4, g)
    torch.manual_seed(0)
    out, w = scaled_dot_product_attention(q, k, v, dropout_p=0.5)
    ref, w_ref = scaled_dot_product_attention(q, k, v)
    torch.testing.assert_close(w, w_ref)             # returned weights are taken before dropout
    assert not torch.allclose(out, ref)
    torch.manual_seed(0)                             # the same dropout draw, applied by hand
    torch.testing.assert_close(out, F.dropout(w_ref, p=0.5) @ v)


@pytest.mark.parametrize("p", [-0.1, 1.5, float("nan")])
def test_dropout_p_out_of_range_is_an_error(p):
    q, k, v = _qkv(1, 1, 2, 3, 4, 4, torch.Generator().manual_seed(0))
    with pytest.raises(ValueError, match=r"dropout_p must be a probability in \[0, 1\)"):
        scaled_dot_product_attention(q, k, v, dropout_p=p)


def test_score_variance_is_d_k():
    """Eq. (score-variance): Var(q.k) = d_k for independent unit-variance components."""
    g = torch.Generator().manual_seed(0)
    for d_k in (1, 16, 256):
        q, k = torch.randn(40_000, d_k, generator=g), torch.randn(40_000, d_k, generator=g)
        s = (q * k).sum(-1)
        assert abs(s.mean().item()) < 0.05 * math.sqrt(d_k)
        assert abs(s.var().item() / d_k - 1) < 0.05
        assert abs((s / math.sqrt(d_k)).var().item() - 1) < 0.05


def test_softmax_jacobian_closed_form():
    """Eq. (softmax-jacobian): d softmax / d s = diag(a) - a a^T."""
    s = torch.randn(7, dtype=torch.float64, generator=torch.Generator().manual_seed(5))
    a = torch.softmax(s, 0)
    J = torch.autograd.functional.jacobian(lambda t: torch.softmax(t, 0), s)
    torch.testing.assert_close(J, torch.diag(a) - torch.outer(a, a))


def test_scale_keeps_softmax_gradient_alive():
    """Without 1/sqrt(d_k) the softmax saturates as d_k grows and its gradient vanishes; with it,
    not."""
    def median_jacobian_norm(d_k, scale):
        g = torch.Generator().manual_seed(d_k)
        q, k = torch.randn(300, 1, d_k, generator=g), torch.randn(300, 32, d_k, generator=g)
        s = (q @ k.transpose(-2, -1)).squeeze(1) / (math.sqrt(d_k) if scale else 1.0)
        a = torch.softmax(s, -1)
        return torch.linalg.matrix_norm(torch.diag_embed(a) - a[:, :, None]
                                        * a[:, None, :]).median().item()

    raw = [median_jacobian_norm(d, False) for d in (4, 64, 1024)]
    scaled = [median_jacobian_norm(d, True) for d in (4, 64, 1024)]
    assert raw[0] > raw[1] > raw[2] and raw[2] < raw[0] / 100
    assert max(scaled) < 1.5 * min(scaled)


def test_attention_head_is_projections_then_sdpa():
    torch.manual_seed(0)
    head = AttentionHead(6, 4, 3, bias=True).double()
    x, mem = torch.randn(2, 5, 6, dtype=torch.float64), torch.randn(2, 7, 6, dtype=torch.float64)
    out, w = head(x, mem)
    q, k, v = (x @ head.W_Q.weight.T + head.W_Q.bias, mem @ head.W_K.weight.T + head.W_K.bias, mem
               @ head.W_V.weight.T + head.W_V.bias)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v))
    assert w.shape == (2, 5, 7) and head(x)[0].shape == (2, 5, 3)


# --- bad input: the error names the argument and the expected shape or type -----------------------
def test_bad_inputs():
    q, k, v = torch.randn(2, 3, 4), torch.randn(2, 5, 4), torch.randn(2, 5, 6)
    with pytest.raises(TypeError, match=r"query must be a floating-point tensor of shape \(\.\.\., "
                                        r"L_q, d_k\)"):
        scaled_dot_product_attention(torch.ones(2, 3, 4, dtype=torch.long), k, v)
    with pytest.raises(ValueError,
                       match=r"key must have shape \(\.\.\., L_k, d_k\) with the d_k = 4"):
        scaled_dot_product_attention(q, torch.randn(2, 5, 3), v)
    with pytest.raises(ValueError,
                       match=r"value must have shape \(\.\.\., L_k, d_v\) with the L_k = 5"):
        scaled_dot_product_attention(q, k, torch.randn(2, 4, 6))
    with pytest.raises(ValueError, match=r"leading axes"):
        scaled_dot_product_attention(q, torch.randn(3, 5, 4), torch.randn(3, 5, 6))
    with pytest.raises(TypeError, match=r"mask must be a boolean tensor .* broadcastable to "
                                        r"\(\.\.\., L_q, L_k\) = \(2, 3, 5\)"):
        scaled_dot_product_attention(q, k, v, torch.ones(3, 5))
    with pytest.raises(ValueError,
                       match=r"mask must be a boolean tensor .* = \(2, 3, 5\), got shape \(3, 4\)"):
        scaled_dot_product_attention(q, k, v, torch.ones(3, 4, dtype=torch.bool))
    with pytest.raises(ValueError, match=r"got shape \(1, 2, 3, 5\)"):
        # too many axes
        scaled_dot_product_attention(q, k, v, torch.ones(1, 2, 3, 5, dtype=torch.bool))
    with pytest.raises(ValueError, match=r"query must be a floating-point tensor of shape "
                                         r"\(\.\.\., L_q, d_model\) with d_model = 6"):
        AttentionHead(6, 4)(torch.randn(2, 3, 5))


def test_check_mask_names_the_argument():
    assert check_mask(None, (2, 3)) is None
    with pytest.raises(ValueError,
                       match=r"src_mask must be .* broadcastable to \(B, L\) = \(2, 3\)"):
        check_mask(torch.ones(4, dtype=torch.bool), (2, 3), name="src_mask", dims="(B, L)")


def test_mixed_dtypes_name_the_argument():
    q, k, v = torch.randn(2, 3, 4), torch.randn(2, 5, 4), torch.randn(2, 5, 6)
    with pytest.raises(TypeError,
                       match=r"key must have the dtype of query, torch.float32, got torch.float64"):
        scaled_dot_product_attention(q, k.double(), v)
    with pytest.raises(TypeError, match=r"value must have the dtype of query, torch.float64, got "
                                        r"torch.float32"):
        scaled_dot_product_attention(q.double(), k.double(), v)


def test_float64_input_to_a_float32_head_names_the_argument():
    head = AttentionHead(4, 3)
    x = torch.randn(2, 5, 4)
    with pytest.raises(TypeError, match=r"query is a torch.float64 tensor but the module's "
                                        r"parameters are torch.float32"):
        head(x.double())
    with pytest.raises(TypeError, match=r"key is a torch.float64 tensor .* convert"):
        head(x, x.double())
    assert head.double()(x.double())[0].dtype == torch.float64         # converting the module works
