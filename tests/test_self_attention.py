"""Chapter 01: parameter-free self-attention."""
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from transformer_lib.self_attention import basic_self_attention

shapes = st.tuples(st.integers(1, 3), st.integers(1, 10), st.integers(1, 8))


@settings(max_examples=30, deadline=None)
@given(shape=shapes, seed=st.integers(0, 2**16))
def test_rows_sum_to_one_and_match_pytorch(shape, seed):
    x = torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    y, w = basic_self_attention(x)
    assert y.shape == shape and w.shape == (shape[0], shape[1], shape[1])
    torch.testing.assert_close(w.sum(-1), torch.ones(shape[:2], dtype=torch.float64))
    assert (w >= 0).all()
    torch.testing.assert_close(y, F.scaled_dot_product_attention(x, x, x, scale=1.0), atol=1e-12,
                               rtol=1e-10)


@settings(max_examples=30, deadline=None)
@given(shape=shapes, seed=st.integers(0, 2**16))
def test_permutation_equivariance(shape, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(*shape, generator=g, dtype=torch.float64)
    perm = torch.randperm(shape[1], generator=g)
    y, w = basic_self_attention(x)
    y_p, w_p = basic_self_attention(x[:, perm])
    torch.testing.assert_close(y_p, y[:, perm])
    torch.testing.assert_close(w_p, w[:, perm][:, :, perm])


def test_matches_explicit_sum():
    """y_i = sum_j softmax_j(x_i . x_j) x_j, written with loops."""
    x = torch.randn(4, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    y, _ = basic_self_attention(x)
    for i in range(4):
        s = torch.stack([x[i] @ x[j] for j in range(4)])
        a = torch.exp(s) / torch.exp(s).sum()
        torch.testing.assert_close(y[i], sum(a[j] * x[j] for j in range(4)))


@pytest.mark.parametrize("bad", [torch.ones(3, dtype=torch.float32),
                                 torch.ones(2, 3, dtype=torch.long), [[1.0]]])
def test_bad_input_names_argument_and_shape(bad):
    with pytest.raises(TypeError,
                       match=r"x must be a floating-point tensor of shape \(\.\.\., N, D\)"):
        basic_self_attention(bad)
