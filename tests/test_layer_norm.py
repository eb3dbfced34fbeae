"""Chapter 07: layer normalization and the residual wrapper (post-LN / pre-LN)."""
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from transformer_lib.layer_norm import LayerNorm, ResidualConnection, layer_norm

shapes = st.tuples(st.integers(1, 3), st.integers(1, 6), st.integers(2, 16))


@settings(max_examples=25, deadline=None)
@given(shape=shapes, seed=st.integers(0, 2**16), eps=st.sampled_from([1e-5, 1e-6, 1e-2]))
def test_layer_norm_matches_pytorch(shape, seed, eps):
    """explicit formula == our module (fused kernel) == nn.LayerNorm, with random gamma and beta."""
    g = torch.Generator().manual_seed(seed)
    d = shape[-1]
    x = torch.randn(*shape, generator=g, dtype=torch.float64) * 4 + 2
    ref = nn.LayerNorm(d, eps=eps, dtype=torch.float64)
    ours = LayerNorm(d, eps=eps).double()
    with torch.no_grad():
        ref.weight.copy_(torch.randn(d, generator=g))
        ref.bias.copy_(torch.randn(d, generator=g))
        ours.load_state_dict(ref.state_dict())
    expected = ref(x)
    torch.testing.assert_close(layer_norm(x, ref.weight, ref.bias, eps), expected, atol=1e-12,
                               rtol=1e-10)
    torch.testing.assert_close(ours(x), expected, atol=1e-12, rtol=1e-10)


def test_state_dict_names_match_nn_layernorm():
    assert set(LayerNorm(8).state_dict()) == set(nn.LayerNorm(8).state_dict()) == {"weight", "bias"}


def test_normalised_statistics_and_invariance():
    torch.manual_seed(0)
    x = torch.randn(5, 9, 32, dtype=torch.float64) * 10 - 3
    y = layer_norm(x, eps=0.0)
    torch.testing.assert_close(y.mean(-1), torch.zeros(5, 9, dtype=torch.float64), atol=1e-12,
                               rtol=0)
    torch.testing.assert_close(y.var(-1, unbiased=False), torch.ones(5, 9, dtype=torch.float64))
    torch.testing.assert_close(layer_norm(3.7 * x - 11.0, eps=0.0), y)
    # Tokens are normalised independently: changing one token changes no other row.
    x2 = x.clone()
    x2[0, 0] += 100
    torch.testing.assert_close(layer_norm(x2)[0, 1:], layer_norm(x)[0, 1:])


def test_gamma_only_form():
    """The gamma-only form gamma (h - mu) / sigma is LayerNorm with beta = 0 (and eps = 0); with one
    number gamma its output mean is 0."""
    torch.manual_seed(1)
    x = torch.randn(3, 4, 10, dtype=torch.float64)
    gamma = torch.randn(10, dtype=torch.float64)
    mu, sigma = x.mean(-1, keepdim=True), x.std(-1, unbiased=False, keepdim=True)
    torch.testing.assert_close(layer_norm(x, gamma, None, eps=0.0), gamma * (x - mu) / sigma)
    # one number gamma: mean exactly 0
    scalar = layer_norm(x, torch.tensor(2.5, dtype=torch.float64), None, eps=0.0)
    torch.testing.assert_close(scalar.mean(-1), torch.zeros(3, 4, dtype=torch.float64), atol=1e-12,
                               rtol=0)
    # A per-feature gamma does not force the mean to 0, but without beta there is no offset: odd in
    # x - mu.
    assert layer_norm(x, gamma, None).mean(-1).abs().max() > 1e-3
    torch.testing.assert_close(layer_norm(-x, gamma, None), -layer_norm(x, gamma, None))
    beta = torch.randn(10, dtype=torch.float64)
    assert not torch.allclose(layer_norm(-x, gamma, beta), -layer_norm(x, gamma, beta))


def test_constant_vector_is_finite():
    y = LayerNorm(6)(torch.full((2, 6), 3.0))
    assert torch.isfinite(y).all() and (y == 0).all()


def test_gradcheck():
    torch.manual_seed(2)
    x = torch.randn(2, 3, 5, dtype=torch.float64, requires_grad=True)
    g = torch.randn(5, dtype=torch.float64, requires_grad=True)
    b = torch.randn(5, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(layer_norm, (x, g, b))
    ln = LayerNorm(5).double()
    with torch.no_grad():
        ln.weight.normal_()
    assert torch.autograd.gradcheck(ln, (x,))
    res = ResidualConnection(5, norm_first=False).double()
    lin = nn.Linear(5, 5).double()
    assert torch.autograd.gradcheck(lambda t: res(t, lin), (x,))


def test_wrong_feature_size_is_a_clear_error():
    with pytest.raises(ValueError, match=r"x must have shape \(\.\.\., d_model=8\), got \(2, 7\)"):
        LayerNorm(8)(torch.randn(2, 7))


@pytest.mark.parametrize("norm_first", [False, True])
def test_residual_connection_formulas(norm_first):
    """post-LN: LN(x + F(x)); pre-LN: x + F(LN(x)), in eval mode (dropout off)."""
    torch.manual_seed(3)
    res = ResidualConnection(8, dropout=0.5, norm_first=norm_first).double().eval()
    with torch.no_grad():
        res.norm.weight.normal_()
        res.norm.bias.normal_()
    f = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 8)).double()
    x = torch.randn(2, 5, 8, dtype=torch.float64)
    ln = lambda t: F.layer_norm(t, (8,), res.norm.weight, res.norm.bias, 1e-5)  # noqa: E731
    expected = x + f(ln(x)) if norm_first else ln(x + f(x))
    torch.testing.assert_close(res(x, f), expected)


def test_residual_dropout_acts_on_the_sublayer_output_only():
    """§5.4: dropout on Sublayer(x) before the addition; the residual x itself is never dropped."""
    torch.manual_seed(4)
    res = ResidualConnection(16, dropout=0.9, norm_first=True).train()
    x = torch.randn(4, 6, 16)
    out = res(x, lambda t: torch.ones_like(t))
    kept = out - x                        # 0 where dropped, 1 / (1 - p) = 10 where kept
    assert set(kept.round(decimals=3).unique().tolist()) == {0.0, 10.0}


def test_residual_jacobian_contains_identity():
    """d(x + F(x))/dx = I + dF/dx (pre-LN block with a zero sub-layer is exactly the identity)."""
    x = torch.randn(6, dtype=torch.float64)
    lin = nn.Linear(6, 6).double()
    res = ResidualConnection(6, norm_first=True).double()
    jac = torch.autograd.functional.jacobian(lambda t: res(t, lin), x)
    jac_f = torch.autograd.functional.jacobian(lambda t: lin(res.norm(t)), x)
    torch.testing.assert_close(jac, torch.eye(6, dtype=torch.float64) + jac_f)


def test_float64_input_to_a_float32_layer_norm_names_the_argument():
    with pytest.raises(TypeError, match=r"x is a torch.float64 tensor but the module's parameters "
                                        r"are torch.float32"):
        LayerNorm(8)(torch.randn(2, 8, dtype=torch.float64))


@pytest.mark.parametrize("eps", [-1.0, 0.0, float("nan"), float("inf")])
def test_eps_must_be_positive_and_finite(eps):
    with pytest.raises(ValueError, match=r"eps must be a finite number > 0"):
        LayerNorm(8, eps)
