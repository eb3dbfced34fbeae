"""Chapter 06: sinusoidal and learned positional encodings."""
import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from transformer_lib.positional import (
    LearnedPositionalEmbedding,
    PositionalEncoding,
    pe_dot_product,
    pe_shift_matrix,
    sinusoidal_encoding,
)

even_d = st.integers(1, 48).map(lambda n: 2 * n)


def test_table_matches_the_formula():
    """PE[pos, 2i] = sin(pos / 10000^(2i/d)), PE[pos, 2i+1] = cos(...), written with loops."""
    d, n = 10, 30
    pe = sinusoidal_encoding(n, d, dtype=torch.float64)
    assert pe.shape == (n, d) and pe.dtype == torch.float64
    for pos in range(n):
        for i in range(d // 2):
            angle = pos / 10000 ** (2 * i / d)
            assert pe[pos, 2 * i].item() == pytest.approx(math.sin(angle), abs=1e-12)
            assert pe[pos, 2 * i + 1].item() == pytest.approx(math.cos(angle), abs=1e-12)


@settings(max_examples=25, deadline=None)
@given(d=even_d, k=st.integers(0, 300), n=st.integers(1, 200))
def test_shift_is_a_rotation(d, k, n):
    """PE[pos + k] = R_k PE[pos] for every pos, with R_k orthogonal and independent of pos."""
    pe = sinusoidal_encoding(n + k, d, dtype=torch.float64)
    m = pe_shift_matrix(k, d)
    torch.testing.assert_close(pe[k:k + n], pe[:n] @ m.T, atol=1e-10, rtol=0)
    torch.testing.assert_close(m @ m.T, torch.eye(d, dtype=torch.float64), atol=1e-12, rtol=0)
    torch.testing.assert_close(pe.norm(dim=-1) ** 2,
                               torch.full((n + k,), d / 2, dtype=torch.float64))


def test_shift_matrices_compose():
    """R_j R_k = R_(j+k): shifting twice is one shift."""
    torch.testing.assert_close(pe_shift_matrix(3, 16) @ pe_shift_matrix(4, 16),
                               pe_shift_matrix(7, 16))


@settings(max_examples=25, deadline=None)
@given(d=even_d, k=st.integers(-100, 100),
       pos=st.lists(st.integers(100, 400), min_size=2, max_size=5))
def test_dot_product_depends_only_on_offset(d, k, pos):
    pe = sinusoidal_encoding(600, d, dtype=torch.float64)
    dots = torch.stack([pe[p] @ pe[p + k] for p in pos])
    torch.testing.assert_close(dots, torch.full_like(dots, pe_dot_product(k, d)), atol=1e-9, rtol=0)
    assert pe_dot_product(k, d) == pytest.approx(pe_dot_product(-k, d))


def test_odd_d_model_is_rejected():
    with pytest.raises(ValueError, match="d_model must be a positive even integer"):
        sinusoidal_encoding(10, 7)
    with pytest.raises(ValueError, match="d_model must be a positive even integer"):
        PositionalEncoding(7)


@pytest.mark.parametrize("cls", [PositionalEncoding, LearnedPositionalEmbedding])
def test_adds_rows_at_offset(cls):
    torch.manual_seed(0)
    mod = cls(8, max_len=20)
    table = mod.pe if cls is PositionalEncoding else mod.weight
    x = torch.randn(3, 6, 8)
    for offset in (0, 5, 14):
        torch.testing.assert_close(mod(x, offset=offset), x + table[offset:offset + 6])
    # Two pieces at the right offsets == one pass (what incremental decoding relies on).
    torch.testing.assert_close(torch.cat([mod(x[:, :2]), mod(x[:, 2:], offset=2)], 1), mod(x))


def test_sinusoidal_buffer_is_the_table_and_not_saved():
    mod = PositionalEncoding(12, max_len=50)
    torch.testing.assert_close(mod.pe, sinusoidal_encoding(50, 12))
    assert "pe" not in mod.state_dict() and not list(mod.parameters())


def test_learned_is_trainable_and_saved():
    mod = LearnedPositionalEmbedding(12, max_len=50)
    assert [n for n, _ in mod.named_parameters()] == ["weight"] and mod.weight.shape == (50, 12)
    mod(torch.randn(2, 5, 12)).sum().backward()
    assert mod.weight.grad[:5].abs().sum() > 0 and mod.weight.grad[5:].abs().sum() == 0


@pytest.mark.parametrize("cls", [PositionalEncoding, LearnedPositionalEmbedding])
def test_too_long_or_bad_offset_is_a_clear_error(cls):
    mod = cls(8, max_len=10)
    with pytest.raises(ValueError, match=r"do not fit the positional table of max_len=10"):
        mod(torch.randn(1, 11, 8))
    with pytest.raises(ValueError, match=r"positions 8\.\.10 do not fit"):
        mod(torch.randn(1, 3, 8), offset=8)
    with pytest.raises(ValueError, match="offset must be a non-negative int"):
        mod(torch.randn(1, 3, 8), offset=-1)


@pytest.mark.parametrize("cls", [PositionalEncoding, LearnedPositionalEmbedding])
def test_wrong_feature_size_is_a_clear_error(cls):
    with pytest.raises(ValueError,
                       match=r"x must have shape \(\.\.\., L, d_model=8\), got \(2, 3, 9\)"):
        cls(8, max_len=10)(torch.randn(2, 3, 9))


@pytest.mark.parametrize("cls", [PositionalEncoding, LearnedPositionalEmbedding])
def test_dropout_only_in_training(cls):
    torch.manual_seed(0)
    mod = cls(16, max_len=10, dropout=0.5)
    x = torch.randn(4, 10, 16)
    mod.eval()
    torch.testing.assert_close(mod(x), x + (mod.pe if cls is PositionalEncoding else mod.weight))
    mod.train()
    assert (mod(x) == 0).float().mean() > 0.3


def test_sqrt_d_model_balances_content_and_position():
    """Chapter 06's argument, on the model of chapter 11: embeddings ~ N(0, d^-1/2), so an unscaled
    row has length ~1 and a row times sqrt(d) length ~sqrt(d), the order of |PE| = sqrt(d/2)."""
    from transformer_lib.model import Transformer, TransformerConfig

    torch.manual_seed(0)
    d = 64
    model = Transformer(TransformerConfig(src_vocab_size=4000, tgt_vocab_size=4000, d_model=d,
                                          n_heads=2, n_layers=1, d_ff=64, dropout=0.0))
    E = model.src_embed.weight.detach()
    assert E.std().item() == pytest.approx(d ** -0.5, rel=0.03)
    assert E.norm(dim=-1).mean().item() == pytest.approx(1.0, rel=0.03)
    assert (E * d ** 0.5).norm(dim=-1).mean().item() == pytest.approx(d ** 0.5, rel=0.03)
    torch.testing.assert_close(model.src_pos.pe.norm(dim=-1),
                               torch.full((model.src_pos.max_len,), (d / 2) ** 0.5))


@settings(max_examples=25, deadline=None)
@given(d=even_d, j=st.integers(1, 20), pos=st.integers(30, 300))
def test_rotation_as_score_matrix_points_j_steps_left(d, j, pos):
    """PE_pos^T R_j PE_(pos+k) = sum_i cos(omega_i (k + j)): depends on k only, largest at k =
    -j."""
    pe = sinusoidal_encoding(400, d, dtype=torch.float64)
    R = pe_shift_matrix(j, d)
    ks = list(range(-25, 26))
    scores = torch.stack([pe[pos] @ R @ pe[pos + k] for k in ks])
    expected = torch.tensor([pe_dot_product(k + j, d) for k in ks], dtype=torch.float64)
    torch.testing.assert_close(scores, expected, atol=1e-9, rtol=0)
    assert ks[int(scores.argmax())] == -j
