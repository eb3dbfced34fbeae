"""Chapter 03: padding and causal masks (boolean, True = may attend)."""
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from transformer_lib.attention import scaled_dot_product_attention
from transformer_lib.masking import make_causal_mask, make_padding_mask


@settings(max_examples=25, deadline=None)
@given(B=st.integers(1, 4), L=st.integers(1, 9), seed=st.integers(0, 2**16))
def test_padding_mask(B, L, seed):
    g = torch.Generator().manual_seed(seed)
    tokens = torch.randint(0, 4, (B, L), generator=g)
    mask = make_padding_mask(tokens, pad_id=0)
    assert mask.shape == (B, 1, 1, L) and mask.dtype == torch.bool
    assert torch.equal(mask[:, 0, 0], tokens != 0)


@pytest.mark.parametrize("L,offset", [(0, 0), (1, 0), (5, 0), (1, 4), (3, 2)])
def test_causal_mask(L, offset):
    mask = make_causal_mask(L, offset=offset)
    assert mask.shape == (L, offset + L) and mask.dtype == torch.bool
    for i in range(L):
        for j in range(offset + L):
            assert bool(mask[i, j]) == (j <= offset + i)


def test_causal_mask_with_offset_is_the_bottom_of_the_full_mask():
    full = make_causal_mask(7)
    torch.testing.assert_close(make_causal_mask(3, offset=4), full[4:])


def test_combined_mask_broadcasts_to_scores():
    tokens = torch.tensor([[5, 6, 0], [7, 0, 0]])
    mask = make_padding_mask(tokens, 0) & make_causal_mask(3)
    assert mask.shape == (2, 1, 3, 3)
    expected = torch.tensor([[[1, 0, 0], [1, 1, 0], [1, 1, 0]], [[1, 0, 0], [1, 0, 0], [1, 0, 0]]],
                            dtype=torch.bool)
    assert torch.equal(mask[:, 0], expected)


@settings(max_examples=25, deadline=None)
@given(L=st.integers(2, 9), t=st.integers(0, 7), d=st.integers(1, 6), seed=st.integers(0, 2**16))
def test_causal_outputs_ignore_the_future(L, t, d, seed):
    t = t % (L - 1)
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(2, L, d, generator=g, dtype=torch.float64)
    x2 = x.clone()
    x2[:, t + 1:] = torch.randn(2, L - t - 1, d, generator=g, dtype=torch.float64)
    y, w = scaled_dot_product_attention(x, x, x, make_causal_mask(L))
    y2, _ = scaled_dot_product_attention(x2, x2, x2, make_causal_mask(L))
    assert torch.equal(y[:, : t + 1], y2[:, : t + 1])
    assert not torch.equal(y[:, t + 1:], y2[:, t + 1:])     # the change did reach the later outputs
    assert torch.all(w.triu(1) == 0)


@settings(max_examples=25, deadline=None)
@given(L_q=st.integers(1, 7), L_k=st.integers(1, 7), seed=st.integers(0, 2**16))
def test_masked_softmax_is_the_softmax_over_the_allowed_keys(L_q, L_k, seed):
    """Eq. (masked-softmax): A_ij = M_ij exp(S_ij) / sum_j' M_ij' exp(S_ij') for rows with an
    allowed key."""
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(2, n, 3, generator=g, dtype=torch.float64) for n in (L_q, L_k, L_k))
    mask = torch.rand(2, L_q, L_k, generator=g) < 0.6
    mask[..., torch.randint(0, L_k, (1,), generator=g)] = True               # every row keeps a key
    _, w = scaled_dot_product_attention(q, k, v, mask)
    e = mask * torch.exp(q @ k.transpose(-2, -1) / 3**0.5)
    torch.testing.assert_close(w, e / e.sum(-1, keepdim=True), atol=1e-12, rtol=0)


@settings(max_examples=25, deadline=None)
@given(lengths=st.lists(st.integers(1, 7), min_size=1, max_size=4), seed=st.integers(0, 2**16))
def test_padding_keys_get_zero_weight_and_do_not_matter(lengths, seed):
    g = torch.Generator().manual_seed(seed)
    L = max(lengths)
    tokens = torch.tensor([[1] * n + [0] * (L - n) for n in lengths])
    mask = make_padding_mask(tokens, 0)
    x = torch.randn(len(lengths), 2, L, 4, generator=g, dtype=torch.float64)   # (B, h, L, d)
    y, w = scaled_dot_product_attention(x, x, x, mask)
    assert torch.all(w[..., tokens[:, None, None, :].expand_as(w) == 0] == 0)
    x2 = x.clone()
    x2[(tokens == 0)[:, None, :, None].expand_as(x)] = 7.0              # change padding keys/values
    y2, _ = scaled_dot_product_attention(x, x2, x2, mask)                   # same queries
    torch.testing.assert_close(y, y2)


def test_left_padding_and_causal_gives_zero_rows():
    mask = make_padding_mask(torch.tensor([[0, 0, 3, 4]]), 0) & make_causal_mask(4)
    x = torch.randn(1, 1, 4, 3, dtype=torch.float64)
    y, w = scaled_dot_product_attention(x, x, x, mask)
    assert torch.equal(y[0, 0, :2],
                       torch.zeros(2, 3, dtype=torch.float64)) and torch.isfinite(y).all()


@pytest.mark.parametrize("bad",
                         [torch.ones(3), torch.ones(2, 3), torch.ones(2, 3, dtype=torch.bool),
                                 torch.ones(1, 2, 3, dtype=torch.long), [[1, 2]]])
def test_padding_mask_bad_input(bad):
    with pytest.raises(TypeError, match=r"tokens must be an integer tensor of shape \(B, L\)"):
        make_padding_mask(bad, 0)


@pytest.mark.parametrize("length,offset", [(-1, 0), (2.0, 0), (True, 0), (3, -1)])
def test_causal_mask_bad_input(length, offset):
    with pytest.raises(ValueError, match=r"(length|offset) must be an int >= 0"):
        make_causal_mask(length, offset=offset)
