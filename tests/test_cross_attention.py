"""Chapter 04: attention between two sequences, in the column convention of chapter 04's derivation
and the code's row convention."""
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from transformer_lib.attention import AttentionHead
from transformer_lib.cross_attention import attention_columns, attention_rows
from transformer_lib.masking import make_padding_mask

sizes = st.tuples(st.integers(1, 6), st.integers(1, 5), st.integers(1, 5), st.integers(1, 8),
                  st.integers(1, 8))


def _setup(D, d_k, d_v, m, t, seed):
    g = torch.Generator().manual_seed(seed)
    r = lambda *s: torch.randn(*s, generator=g, dtype=torch.float64)  # noqa: E731
    return r(D, m), r(D, t), r(d_k, D), r(d_k, D), r(d_v, D)


@settings(max_examples=25, deadline=None)
@given(s=sizes, seed=st.integers(0, 2**16), scale=st.booleans())
def test_columns_equal_rows(s, seed, scale):
    D, d_k, d_v, m, t = s
    X, Xp, W_Q, W_K, W_V = _setup(*s, seed)
    C, alpha = attention_columns(Xp, X, W_Q, W_K, W_V, scale=scale)
    Y, A = attention_rows(Xp.T, X.T, W_Q, W_K, W_V, scale=scale)
    assert C.shape == (d_v, t) and alpha.shape == (m, t)
    torch.testing.assert_close(C, Y.T)
    torch.testing.assert_close(alpha, A.T)
    torch.testing.assert_close(alpha.sum(0), torch.ones(t, dtype=torch.float64))


@settings(max_examples=25, deadline=None)
@given(s=sizes, seed=st.integers(0, 2**16))
def test_column_per_query_formula(s, seed):
    """c_{:j} = V softmax(K^T q_{:j}) (column form, no scale), with k_{:i} = W_K x_i, v_{:i} = W_V
    x_i, q_{:j} = W_Q x'_j."""
    D, d_k, d_v, m, t = s
    X, Xp, W_Q, W_K, W_V = _setup(*s, seed)
    C, _ = attention_columns(Xp, X, W_Q, W_K, W_V, scale=False)
    K = torch.stack([W_K @ X[:, i] for i in range(m)], dim=1)
    V = torch.stack([W_V @ X[:, i] for i in range(m)], dim=1)
    for j in range(t):
        torch.testing.assert_close(C[:, j], V @ torch.softmax(K.T @ (W_Q @ Xp[:, j]), dim=0))
    C_scaled, _ = attention_columns(Xp, X, W_Q, W_K, W_V)
    torch.testing.assert_close(C_scaled[:, 0], V
                               @ torch.softmax(K.T @ (W_Q @ Xp[:, 0]) / d_k**0.5, dim=0))


@settings(max_examples=25, deadline=None)
@given(s=sizes, seed=st.integers(0, 2**16))
def test_self_attention_is_attn_x_x(s, seed):
    D, d_k, d_v, m, _ = s
    X, _, W_Q, W_K, W_V = _setup(*s, seed)
    head = AttentionHead(D, d_k, d_v).double()
    with torch.no_grad():
        for lin, W in ((head.W_Q, W_Q), (head.W_K, W_K), (head.W_V, W_V)):
            lin.weight.copy_(W)
    torch.testing.assert_close(attention_columns(X, X, W_Q, W_K, W_V)[0], head(X.T)[0].T)


@settings(max_examples=25, deadline=None)
@given(lengths=st.lists(st.integers(1, 6), min_size=1, max_size=3), t=st.integers(1, 5),
       seed=st.integers(0, 2**16))
def test_rows_with_source_padding_match_pytorch(lengths, t, seed):
    g = torch.Generator().manual_seed(seed)
    B, m, D = len(lengths), max(lengths), 5
    src = torch.tensor([[1] * n + [0] * (m - n) for n in lengths])
    mask = make_padding_mask(src, 0)[:, 0]                     # (B, 1, m)
    X_src = torch.randn(B, m, D, generator=g, dtype=torch.float64)
    X_tgt = torch.randn(B, t, D, generator=g, dtype=torch.float64)
    W_Q, W_K, W_V = (torch.randn(3, D, generator=g, dtype=torch.float64) for _ in range(3))
    out, w = attention_rows(X_tgt, X_src, W_Q, W_K, W_V, mask=mask)
    ref = F.scaled_dot_product_attention(X_tgt @ W_Q.T, X_src @ W_K.T, X_src @ W_V.T,
                                         attn_mask=mask)
    torch.testing.assert_close(out, ref, atol=1e-10, rtol=0)
    assert torch.all(w[(src == 0)[:, None, :].expand_as(w)] == 0)


def test_bad_shapes_name_the_argument():
    X, Xp, W_Q, W_K, W_V = _setup(4, 3, 2, 5, 6, 0)
    with pytest.raises(ValueError,
                       match=r"H_kv must be a floating-point matrix of shape \(D, m\) with D = 4"):
        attention_columns(Xp, X[:3], W_Q, W_K, W_V)
    with pytest.raises(ValueError, match=r"W_K must be a floating-point matrix of shape \(d_k, D\) "
                                         r"with d_k = 3, D = 4"):
        attention_columns(Xp, X, W_Q, W_K[:2], W_V)
    with pytest.raises(ValueError,
                       match=r"W_V must be a floating-point matrix of shape \(d_v, D\) with D = 4"):
        attention_rows(Xp.T, X.T, W_Q, W_K, W_V[:, :3])
    with pytest.raises(ValueError, match=r"X_kv must be a floating-point tensor of shape \(\.\.\., "
                                         r"m, D\) with D = 4, got .*\(5, 3\)"):
        attention_rows(Xp.T, X[:3].T, W_Q, W_K, W_V)
    with pytest.raises(ValueError,
                       match=r"X_q must be a floating-point tensor of shape \(\.\.\., t, D\)"):
        attention_rows(Xp.T.long(), X.T, W_Q, W_K, W_V)
    with pytest.raises(ValueError, match=r"W_K must be a floating-point matrix of shape \(d_k, D\) "
                                         r"with d_k = 3, D = 4"):
        attention_rows(Xp.T, X.T, W_Q, W_K[:2], W_V)
