"""Chapter 00: the column convention (H in R^{D x N}) and the row convention (X in R^{N x D}) agree."""
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from transformer_lib import basic_self_attention


@settings(max_examples=25, deadline=None)
@given(D=st.integers(1, 8), N=st.integers(1, 9), out=st.integers(1, 6), seed=st.integers(0, 2**16))
def test_linear_map_rows_equal_columns(D, N, out, seed):
    g = torch.Generator().manual_seed(seed)
    H = torch.randn(D, N, generator=g, dtype=torch.float64)
    linear = torch.nn.Linear(D, out, bias=False, dtype=torch.float64)
    # W H (columns, the notes) == (X W^T)^T (rows, nn.Linear with weight W).
    torch.testing.assert_close(linear.weight @ H, linear(H.T).T)


@settings(max_examples=25, deadline=None)
@given(D=st.integers(1, 8), N=st.integers(1, 9), seed=st.integers(0, 2**16))
def test_self_attention_columns_equal_rows(D, N, seed):
    g = torch.Generator().manual_seed(seed)
    H = torch.randn(D, N, generator=g, dtype=torch.float64)
    H_out = H @ torch.softmax(H.T @ H, dim=0)        # column form: softmax over each column
    Y, _ = basic_self_attention(H.T)                  # row form
    torch.testing.assert_close(H_out, Y.T)
